"""The actor's inference copy of the policy, optionally at lower precision (actor.precision)."""

from __future__ import annotations

import copy

import torch
from torch import nn


def _cast_io(module: nn.Module, dtype: torch.dtype) -> None:
    """Run `module` in `dtype`, taking and returning float32 so its callers are unchanged."""
    module.to(dtype)
    module.register_forward_pre_hook(lambda _, args: tuple(a.to(dtype) for a in args))
    module.register_forward_hook(lambda _, args, out: out.float())


def _bf16_copy(policy: nn.Module) -> nn.Module:
    """A copy whose sub-networks run in bf16. Parameters held directly by the policy (SAC's
    log_alpha) stay float32, and every method of the policy (forward, SAC's sample) still works."""
    bf16 = copy.deepcopy(policy)
    for child in bf16.children():
        _cast_io(child, torch.bfloat16)
    return bf16


class InferenceCopy:
    """What the actor acts with: fp32, the policy itself; bf16, one bf16 module made once, into
    which `refresh` copies the policy's weights (casting in place, no new module per sync);
    int8, Linear layers dynamically quantised again at each refresh (CPU only: torch's dynamic
    int8 kernels are CPU kernels, and config validation rejects int8 on CUDA)."""

    def __init__(self, policy: nn.Module, precision: str):
        if precision not in ("fp32", "bf16", "int8"):
            raise ValueError(f"precision={precision!r} is not allowed; expected one of fp32, bf16, int8")
        if precision == "int8" and next(policy.parameters()).device.type != "cpu":
            raise ValueError("actor.precision=int8 runs on CPU only; use bf16 on CUDA")
        self.policy, self.precision = policy, precision
        self.module = _bf16_copy(policy) if precision == "bf16" else policy
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Take the policy's current weights."""
        if self.precision == "bf16":
            for dst, src in zip(self.module.state_dict().values(), self.policy.state_dict().values()):
                dst.copy_(src)
        elif self.precision == "int8":
            self.module = torch.ao.quantization.quantize_dynamic(
                copy.deepcopy(self.policy), {nn.Linear}, dtype=torch.qint8
            )
