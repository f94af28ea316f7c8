"""One command for a CUDA machine: the GPU kernel tests, the benchmarks, a short training run and
its resume, measured in one go and written up as one Markdown report.

    python bench/gpu_check.py [--out DIR] [--runs-dir DIR] [--steps STEP ...] [--without-mps] [--with-eager]
                              [--budget-s 560] [--train-seconds 180] [--resume-seconds 45]

Steps, in this order, each a subprocess with its own time limit (a step that fails or hangs is
stopped, recorded with the last lines of its output, and the check goes on with the next):

    tests    python -m pytest tests/kernels -m gpu
    env      bench/env_throughput.py --profile: Ant on MuJoCo Warp (CUDA) at 4,096 / 16,384 / 32,768
             envs, and the parts of one step (physics, restart, pql's own work)
    learner  bench/learner.py at batch 8,192, its together run on the MPS path of a training run
             (runtime.mps=auto); with --without-mps a second time with --mps off (learner_no_mps); with
             --with-eager the roles alone again with runtime.compile=false (learner_eager)
    kernels  bench/kernel_speed.py: Triton vs the PyTorch reference vs the flat index vs torchrl (where it loads)
    train    python train.py task=Ant runtime.max_time_s=180
    resume   python train.py task=Ant checkpoint=<train run>/checkpoint.pt runtime.max_time_s=45,
             and a check that its env-step counter went on from the checkpoint's
    plot     python -m pql.plot on the train run: its return curve

The report directory (--out; default runs/gpu_check/<date_time>) receives report.md, log.txt
(every step's whole output), the benches' CSVs (env_throughput.csv, env_profile.csv, learner.csv,
learner_no_mps.csv with --without-mps, learner_eager.csv with --with-eager, kernels.csv),
targets.csv (one row per H100/H200 target: name, target, measured, unit, met, gpu) and
return_curve.png: at most 10 files. report.md and
targets.csv are rewritten after every step. The two training runs go to --runs-dir (default
<report dir>/runs). --budget-s bounds the whole check: a step gets at most the time left, and the
train run is shortened when less than its length is left.

Exit code: 0 when every step passed; 1 when one failed, timed out or was skipped; 2 without a
CUDA device (one line on stderr, before any work) or with bad arguments.

This script reads the command line; the check itself is the package bench/gpu.
"""

from __future__ import annotations

import argparse
import os
import sys

# Run as `python bench/gpu_check.py`, Python puts bench/ on sys.path, not the repository root the
# package bench.gpu is imported from.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gpu.check import STEPS, run


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/gpu_check.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=None, help="report directory (default runs/gpu_check/<date_time>)")
    parser.add_argument(
        "--runs-dir",
        default=None,
        help="where the train and resume runs go (default <report dir>/runs); on a machine that "
        "returns only a few files from the report directory, put them elsewhere",
    )
    parser.add_argument(
        "--steps",
        nargs="+",
        choices=STEPS,
        default=list(STEPS),
        help="the steps to run (default: all); resume and plot need train",
    )
    parser.add_argument(
        "--without-mps",
        action="store_true",
        help="also run the learner bench with --mps off (its together run's role processes taking "
        "turns on the GPU), to compare with the MPS path of a training run",
    )
    parser.add_argument(
        "--with-eager",
        action="store_true",
        help="also time the learners alone with runtime.compile=false (learner_eager), beside the "
        "compiled updates a CUDA run uses",
    )
    parser.add_argument("--budget-s", type=float, default=560.0, help="wall-clock budget of the whole check")
    parser.add_argument(
        "--train-seconds",
        type=float,
        default=180.0,
        help="runtime.max_time_s of the train run; --train-seconds 300 measures the "
        "return_at_5_min target, which a shorter run leaves unmeasured (raise --budget-s with "
        "it, or the run is shortened to fit)",
    )
    parser.add_argument("--resume-seconds", type=float, default=45.0, help="runtime.max_time_s of the resumed run")
    args = parser.parse_args(argv)
    for name in ("budget_s", "train_seconds", "resume_seconds"):
        if getattr(args, name) <= 0:
            parser.error(
                f"--{name.replace('_', '-')} {getattr(args, name):g} is not allowed; give a number of seconds > 0"
            )
    return args


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
