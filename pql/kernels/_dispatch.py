"""Which implementation runs a kernel call: the Triton kernel or its PyTorch reference.

The rule (docs/architecture.md, "Kernels"): Triton on CUDA tensors, the reference on CPU tensors,
and Triton on CPU tensors when `TRITON_INTERPRET=1` was set before `pql.kernels` was imported
(Triton reads the variable when `@triton.jit` decorates a kernel, so setting it later has no
effect on kernels that already exist).
"""

from __future__ import annotations

import torch
from triton import knobs

IMPLS = ("auto", "triton", "torch")

# Options for every kernel launch. No fused multiply-add: a kernel then rounds like its PyTorch
# reference (the sum-tree tests compare bit for bit), whatever Triton's default of the day.
LAUNCH_OPTIONS = {"enable_fp_fusion": False}

# Read once, at the import of pql.kernels, the same moment the kernels below us are decorated;
# every kernel module imports this one first, so the flag and the kernels agree.
INTERPRETING: bool = bool(knobs.runtime.interpret)


def triton_runs_on(device: torch.device | str) -> bool:
    """Whether the Triton kernels of this process can take tensors on `device`."""
    device = torch.device(device)
    return device.type == "cuda" or (INTERPRETING and device.type == "cpu")


def select_impl(impl: str, device: torch.device | str) -> str:
    """Resolve `impl` ("auto", "triton" or "torch") for tensors on `device` to "triton" or "torch".

    "auto" follows the dispatch rule above. Forcing "triton" where it cannot run raises, rather
    than silently measuring or testing the reference instead.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} is not allowed; expected one of {', '.join(IMPLS)}")
    if impl == "torch":
        return impl
    if triton_runs_on(device):
        return "triton"
    if impl == "triton":
        raise ValueError(
            f"impl='triton' cannot run on {torch.device(device)} tensors: the Triton kernels take CUDA "
            "tensors, or CPU tensors when TRITON_INTERPRET=1 is set before pql.kernels is imported"
        )
    return "torch"


def check_same_device(device: torch.device, **tensors: torch.Tensor) -> None:
    """Raise if any of `tensors` is not on `device` (a kernel would read foreign memory)."""
    for name, t in tensors.items():
        if t.device != device:
            raise ValueError(f"{name} is on {t.device}, expected {device}")
