#!/usr/bin/env bash
# pql's tests, in tiers (README's test commands):
#   bash tests/run.sh [pytest args]         the fast tier: every test but those marked slow (the
#                                           learning tests, the chaos test and other long runs)
#   bash tests/run.sh --all [pytest args]   every test: what CI runs (.ci/run)
#   bash tests/run.sh --mjlab [pytest args] tests/mjlab, in an environment with mjlab 1.6 beside pql
#                                           (`pip install torch==2.13.0 mjlab==1.6.0 -e ".[test]"`;
#                                           mjlab pins MuJoCo 3.11, so the other tiers cannot hold it):
#                                           CI's second environment
#   bash tests/run.sh --playground [pytest args]
#                                           tests/playground, in an environment with MuJoCo
#                                           Playground beside pql (`pip install torch==2.13.0 -e
#                                           ".[playground]" pytest`, Python 3.11 or newer): CI's third
# The first two tiers run, in order:
#   0. the static checks: ruff's lint and format check, and mypy's type check of pql/ (all three
#      configured in pyproject.toml);
#   1. everything outside tests/kernels, the kernels dispatching to their PyTorch references on
#      CPU tensors as in a CPU run: two pytest workers (pytest-xdist, -n 2), since most tests wait
#      on one core (a run of one torch thread, a process importing torch, a signal's effect); then,
#      alone on the machine, the tests marked serial, which time how fast every process of a job
#      reacts (a killed replica's peers gone within 2 s), a bound another busy worker would break;
#   2. tests/kernels with TRITON_INTERPRET=1: the Triton kernels run on CPU tensors against their
#      references (the variable must be set before triton decorates a kernel: its own process);
#   3. on a machine with CUDA, tests/kernels again with the kernels compiled for the GPU.
# Each pytest run lists its 25 slowest tests (--durations=25), so that every CI log shows where
# the time goes.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--mjlab" || "${1:-}" == "--playground" ]]; then
    beside="${1#--}"
    shift
    python -m pytest --durations=25 "tests/$beside" "$@"
    exit
fi
tier=(-m "not slow")
fast="not slow and "
if [[ "${1:-}" == "--all" ]]; then
    tier=()
    fast=""
    shift
fi
ruff check .
ruff format --check .
mypy
others=(tests --ignore=tests/kernels --ignore=tests/mjlab --ignore=tests/playground)
# loadgroup: the tests of one xdist_group share a worker (tests/test_mps.py's fake daemons).
python -m pytest --durations=25 -n 2 --dist loadgroup "${others[@]}" -m "${fast}not serial" "$@"
# Exit code 5: no serial test in this selection.
python -m pytest --durations=25 "${others[@]}" -m "${fast}serial" "$@" || [[ $? == 5 ]]
TRITON_INTERPRET=1 python -m pytest --durations=25 tests/kernels ${tier[@]+"${tier[@]}"} "$@"
if python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    python -m pytest --durations=25 tests/kernels -m gpu "$@"
fi
