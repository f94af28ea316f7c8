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


def inference_copy(policy: nn.Module, precision: str) -> nn.Module:
    """fp32: the policy itself; bf16: a bf16 copy; int8: dynamically quantised Linear layers
    (CPU only: torch's dynamic int8 kernels are CPU kernels)."""
    if precision == "fp32":
        return policy
    if precision == "bf16":
        return _bf16_copy(policy)
    if next(policy.parameters()).device.type != "cpu":
        raise ValueError("actor.precision=int8 runs on CPU only; use bf16 on CUDA")
    return torch.ao.quantization.quantize_dynamic(copy.deepcopy(policy), {nn.Linear}, dtype=torch.qint8)
