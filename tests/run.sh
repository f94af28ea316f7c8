#!/usr/bin/env bash
# The whole test suite: README's test command and what CI runs after installing.
#   1. everything outside tests/kernels (learning tests included), the kernels dispatching to
#      their PyTorch references on CPU tensors as in a CPU run;
#   2. tests/kernels with TRITON_INTERPRET=1: the Triton kernels run on CPU tensors against their
#      references (the variable must be set before triton decorates a kernel: its own process);
#   3. on a machine with CUDA, tests/kernels again with the kernels compiled for the GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest tests --ignore=tests/kernels "$@"
TRITON_INTERPRET=1 python -m pytest tests/kernels "$@"
if python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    python -m pytest tests/kernels -m gpu "$@"
fi
