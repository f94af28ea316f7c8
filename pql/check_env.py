"""The env contract checker's command line: does a task's env keep the BatchedEnv protocol?

    python -m pql.check_env <task> [--num-envs N] [--steps N] [key=value ...]

builds the envs of `<task>` as a run does (the command line composed and validated as train.py's,
then `pql.envs.build_env` on the actor's device) and prints one line per check of tasks/contract.py
(`pydoc tasks.contract` says what each asserts), `ok  <check>`, `FAIL <check>: <what to fix>` or
`skip <check>: <why>`, then the batch's env steps per second. Exit code 0 when no check fails, 2
when one does or the task or config is bad.
"""

from __future__ import annotations

import sys

from pql.cli import import_isaacgym_first

if __name__ == "__main__":
    # Isaac Gym refuses to load once torch is imported, and the imports below bring torch in. The
    # task is a positional argument here: written as task=<arg>, an isaacgym/<Task> one is found.
    import_isaacgym_first([f"task={arg}" for arg in sys.argv[1:]])

import argparse
import os
import tempfile

from tasks.base import TaskError
from tasks.contract import CHECKS, run_checks

DEFAULT_NUM_ENVS = 4
CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cfg")


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer > 0")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pql.check_env",
        description="Check that a task's env keeps the BatchedEnv protocol (tasks/base.py), built as a run builds it.",
        epilog=f"checks: {', '.join(CHECKS)} (pydoc tasks.contract says what each asserts)",
    )
    parser.add_argument("task", help="as task=<task> of train.py: Ant, gym:<EnvId>, <module>:<factory>, ...")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="train.py's overrides")
    parser.add_argument(
        "--num-envs",
        type=_positive,
        help=f"envs in the batch (default: task.num_envs if given, else {DEFAULT_NUM_ENVS})",
    )
    parser.add_argument("--steps", type=_positive, help="the rollout's steps (default: until every env has finished)")
    return parser


def _config(task: str, overrides: list[str]):
    """The Config train.py would run for this command line, validated as train.py's preflight does."""
    from pql.cli import expand_task_forms, preflight

    argv = expand_task_forms([f"task={task}", *overrides])
    # This command writes nothing: the run-directory probe of preflight goes to the temp folder.
    return preflight([*argv, f"hydra.run.dir={tempfile.gettempdir()}"], CONFIG_DIR)[0]


def main(argv: list[str] | None = None) -> int:
    """python -m pql.check_env <task> [key=value ...] -> 0 if every check passes, else 2."""
    from pql.checkpoint import CheckpointError
    from pql.config import ConfigError, given
    from pql.envs import build_env

    args = _parser().parse_args(argv)
    try:
        cfg = _config(args.task, args.overrides)
        given_num_envs = any(arg.startswith("task.num_envs=") for arg in args.overrides)
        num_envs = args.num_envs or (given(cfg.task.num_envs) if given_num_envs else DEFAULT_NUM_ENVS)
        device, seed = given(cfg.runtime.actor_device), cfg.runtime.seed
        build = lambda: build_env(cfg.task, num_envs, device, seed)
        env = build()
    except (ConfigError, TaskError, CheckpointError) as e:
        print(f"pql.check_env: {e}", file=sys.stderr, flush=True)
        return 2
    try:
        report = run_checks(env, steps=args.steps, make_again=build)
    finally:
        env.close()
    print("\n".join(report.lines()), flush=True)
    return 2 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
