"""python train.py task=Ant [algo=pql] [key=value ...]   (Hydra; see README.md for every key)."""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from pql.checkpoint import CheckpointError
from pql.config import ConfigError, load_config
from pql.runtime import train
from pql.runtime.launch import RoleFailure
from tasks import TaskError


def run(raw: dict) -> dict:
    """Validate a composed config and run it. Exits with code 2 on a bad config (or checkpoint,
    or task), 1 on a failed run."""
    try:
        return train(load_config(raw))
    except (ConfigError, TaskError, CheckpointError) as e:
        print(f"pql: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    except RoleFailure as e:  # a failing role arrives here with its traceback in the message
        print(f"pql: run failed: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    except KeyboardInterrupt:
        print("pql: interrupted", file=sys.stderr, flush=True)
        sys.exit(130)


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
