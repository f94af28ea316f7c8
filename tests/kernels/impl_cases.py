"""The (impl, device) pairs every kernel test runs: the PyTorch reference on CPU, the Triton code
on CPU under TRITON_INTERPRET=1, and the Triton code compiled on a GPU. The reference on the
same device is each test's oracle; a case that cannot run here skips with the reason."""

import pytest
import torch

from pql.kernels import INTERPRETING, triton_runs_on

CASES = [
    pytest.param(("torch", "cpu"), id="torch-cpu"),
    pytest.param(
        ("triton", "cpu"),
        id="triton-cpu",
        marks=pytest.mark.skipif(
            not triton_runs_on("cpu"),
            reason="Triton on CPU tensors needs TRITON_INTERPRET=1 set before pql.kernels is imported",
        ),
    ),
    pytest.param(
        ("triton", "cuda"),
        id="triton-cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(
                not torch.cuda.is_available() or INTERPRETING,
                reason="needs CUDA, with TRITON_INTERPRET unset so that the kernels are compiled",
            ),
        ],
    ),
]
