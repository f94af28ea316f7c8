"""python train.py task=Ant [algo=pql] [key=value ...]   (Hydra; see README.md for every key)."""
from __future__ import annotations

import sys

from pql.cli import import_isaacgym_first

# Isaac Gym refuses to load once torch is imported, and the imports below bring torch in. A role
# process started by spawn runs this module's top level again (as __mp_main__, with the parent's
# sys.argv) before it unpickles its arguments, so this line puts isaacgym first there too.
import_isaacgym_first(sys.argv[1:])

import hydra  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from pql.checkpoint import CheckpointError  # noqa: E402
from pql.config import ConfigError, load_config, register_configs  # noqa: E402
from pql.runtime import train  # noqa: E402
from pql.runtime.supervisor import RoleFailure  # noqa: E402
from tasks import TaskError  # noqa: E402

register_configs()  # cfg/config.yaml composes the defaults from Hydra's ConfigStore


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

    from pql.cli import check_overrides, expand_isaacgym_task

    try:
        sys.argv[1:] = expand_isaacgym_task(sys.argv[1:])  # Hydra reads sys.argv
        check_overrides(sys.argv[1:], os.path.join(os.path.dirname(os.path.abspath(__file__)), "cfg"))
    except ConfigError as e:
        print(f"pql: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    main()
