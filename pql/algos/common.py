"""Pieces every off-policy update rule shares."""
from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Polyak averaging θ' ← τθ + (1 − τ)θ' over parameters (buffers are copied)."""
    for t, s in zip(target.parameters(), source.parameters()):
        t.lerp_(s, tau)
    for t, s in zip(target.buffers(), source.buffers()):
        t.copy_(s)


def smoothed_target_action(policy: nn.Module, next_obs: torch.Tensor, noise: float, noise_clip: float) -> torch.Tensor:
    """TD3 target-policy smoothing: clip(π(s') + clip(ε, −c, c), −1, 1), ε ~ N(0, noise²)."""
    action = policy(next_obs)
    eps = (torch.randn_like(action) * noise).clamp(-noise_clip, noise_clip)
    return (action + eps).clamp(-1.0, 1.0)
