"""python train.py task=Ant [algo=pql] [key=value ...]   (Hydra; `--help` for pql's own text, and
docs/configuration.md for every key)."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn

from pql.cli import import_isaacgym_first, usage
from pql.video import default_to_egl

HYDRA_OUTPUT = ".hydra"  # hydra.output_subdir
CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cfg")

# pql's --help replaces Hydra's generic one, and answers before torch is imported.
if __name__ == "__main__" and any(arg in ("--help", "-h") for arg in sys.argv[1:]):
    print(usage(CONFIG_DIR))
    sys.exit(0)

# Isaac Gym refuses to load once torch is imported, and the imports below bring torch in. A run
# that imports it spawns its roles (pql/runtime/supervisor.py), and a spawned role runs this
# module's top level again (as __mp_main__, with the parent's sys.argv) before it unpickles its
# arguments, so this line puts isaacgym first there too.
import_isaacgym_first(sys.argv[1:])
default_to_egl()  # runtime.video_every renders without a display; MuJoCo reads it when first imported

import hydra  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from pql.checkpoint import CheckpointError, CheckpointWriteError  # noqa: E402
from pql.config import ConfigError, load_config, register_configs  # noqa: E402
from pql.logging.console_log import TRAIN_LOG, console_log  # noqa: E402
from pql.runtime import train  # noqa: E402
from pql.runtime.distributed import ReplicaLost, Replicas  # noqa: E402
from pql.runtime.divergence import Diverged  # noqa: E402
from pql.runtime.stopping import Stopped, signal_name  # noqa: E402
from pql.runtime.supervisor import RoleFailure  # noqa: E402
from tasks import TaskError  # noqa: E402

register_configs()  # cfg/config.yaml composes the defaults from Hydra's ConfigStore


def run(raw: dict) -> dict:
    """Validate a composed config and run it, its console copied into the run directory's
    train.log (rank 0's, under torchrun). Exits with code 2 on a bad config (or checkpoint, or
    task), 1 on a failed run (under torchrun, naming the replica's rank), 130 after Ctrl-C and
    143 after SIGTERM (on every replica, once rank 0 has written the checkpoint; a second signal
    stops at once, without one)."""
    replicas = Replicas.from_env()
    run_dir = str(raw.get("run_dir", "."))
    log = os.path.join(run_dir, TRAIN_LOG) if replicas.lead else None
    try:
        with console_log(log):
            return _run(raw, replicas)
    except SystemExit as e:
        if e.code == 2 and replicas.lead:  # refused before it started: no run to keep
            discard_unstarted_run(run_dir)
        raise


def discard_unstarted_run(run_dir: str) -> None:
    """Remove run_dir if it holds only what Hydra and the console copy write as a job starts
    (.hydra/ and train.log): a task or config refused once Hydra made the directory (an env that
    fails its checks) leaves nothing behind, as one refused before it does."""
    import shutil

    with contextlib.suppress(OSError):
        if set(os.listdir(run_dir)) <= {HYDRA_OUTPUT, TRAIN_LOG}:
            shutil.rmtree(run_dir)


def _run(raw: dict, replicas: Replicas) -> dict:
    where = f"rank {replicas.rank}: " if replicas.world > 1 else ""
    try:
        return train(load_config(raw))
    except (ConfigError, TaskError, CheckpointError) as e:
        print(f"pql: {where}{e}", file=sys.stderr, flush=True)
        sys.exit(2)
    # A failing role arrives with its traceback in the message; a full disk or a diverged run
    # (sequential mode) with a line of its own.
    except ReplicaLost as e:  # names the replica whose failure stopped this one
        print(f"pql: run failed: {e}", file=sys.stderr, flush=True)
        _exit_failed(replicas)
    except (RoleFailure, CheckpointWriteError, Diverged) as e:
        print(f"pql: run failed: {where}{e}", file=sys.stderr, flush=True)
        _exit_failed(replicas)
    except KeyboardInterrupt as e:  # Stopped; or Ctrl-C before the run handles it
        code = e.code if isinstance(e, Stopped) else 130
        said = "interrupted" if code == 130 else f"terminated ({signal_name(code)})"
        print(f"pql: {where}{said}", file=sys.stderr, flush=True)
        sys.exit(code)


def _exit_failed(replicas: Replicas) -> NoReturn:
    """Exit 1. A failed replica exits at once, without the interpreter's teardown of torch and the
    tasks (half a second on 2 cores): torchrun stops the job and restarts it only once every
    replica has exited, and this one's roles, logs and checkpoint are closed already."""
    if replicas.world > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    sys.exit(1)


@hydra.main(version_base=None, config_path="cfg", config_name="config")
def main(cfg: DictConfig) -> float:
    result = run(OmegaConf.to_container(cfg, resolve=True))
    return float(result.get("eval/return", float("nan")))  # what a Hydra sweeper optimises


if __name__ == "__main__":
    from pql.cli import expand_task_forms, mps_plan, preflight, quiet_replica
    from pql.runtime import mps

    try:
        sys.argv[1:] = quiet_replica(expand_task_forms(sys.argv[1:]))  # Hydra reads sys.argv
        jobs = preflight(sys.argv[1:], CONFIG_DIR)  # before Hydra creates the run directory
        mode, why_not = mps_plan(jobs, Replicas.from_env().world) if jobs else ("off", None)
        # Before anything initialises CUDA here: this process must be a client of the daemon too.
        with mps.sharing_gpu(mode, why_not):
            main()
    except (ConfigError, CheckpointError, TaskError, mps.MpsError) as e:
        print(f"pql: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
