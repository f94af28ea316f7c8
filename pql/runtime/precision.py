"""The actor's inference copy of the policy, optionally at lower precision (actor.precision)."""
from __future__ import annotations

import copy

import torch
from torch import nn


class _Bf16Policy(nn.Module):
    """Runs a bf16 copy of the policy; takes and returns float32 so callers are unchanged."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.inner = copy.deepcopy(policy).to(torch.bfloat16)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.inner(obs.to(torch.bfloat16)).float()


def inference_copy(policy: nn.Module, precision: str) -> nn.Module:
    """fp32: the policy itself; bf16: a bf16 copy; int8: dynamically quantised Linear layers
    (CPU only: torch's dynamic int8 kernels are CPU kernels)."""
    if precision == "fp32":
        return policy
    if precision == "bf16":
        return _Bf16Policy(policy)
    if next(policy.parameters()).device.type != "cpu":
        raise ValueError("actor.precision=int8 runs on CPU only; use bf16 on CUDA")
    return torch.ao.quantization.quantize_dynamic(copy.deepcopy(policy), {nn.Linear}, dtype=torch.qint8)
