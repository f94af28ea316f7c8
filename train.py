"""python train.py task=Ant [algo=pql] [key=value ...]   (Hydra; see README.md for every key)."""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from pql.config import ConfigError, load_config


def run(raw: dict) -> dict:
    """Validate a composed config and run it. Exits with code 2 on a bad config, 1 on a failed run."""
    from tasks import TaskError

    try:
        cfg = load_config(raw)
        if cfg.algo.name == "ppo":
            from pql.runtime.ppo_runner import train_ppo

            return train_ppo(cfg)
        if cfg.algo.name == "impala":
            from pql.runtime.impala_runner import train_impala

            return train_impala(cfg)
        from pql.runtime.trainer import train

        return train(cfg)
    except (ConfigError, TaskError) as e:
        print(f"pql: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    except Exception as e:  # a failing role arrives here with its traceback in the message
        from pql.runtime.launch import RoleFailure

        if isinstance(e, RoleFailure):
            print(f"pql: run failed: {e}", file=sys.stderr, flush=True)
            sys.exit(1)
        raise


@hydra.main(version_base=None, config_path="cfg", config_name="config")
def main(cfg: DictConfig) -> float:
    result = run(OmegaConf.to_container(cfg, resolve=True))
    return float(result.get("eval/return", float("nan")))  # what a Hydra sweeper optimises


if __name__ == "__main__":
    import os

    from pql.cli import check_overrides

    try:
        check_overrides(sys.argv[1:], os.path.join(os.path.dirname(os.path.abspath(__file__)), "cfg"))
    except ConfigError as e:
        print(f"pql: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    main()
