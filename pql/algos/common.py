"""Pieces every off-policy update rule shares."""
from __future__ import annotations

import torch
from torch import nn


class Checkpointable:
    """state_dict/load_state_dict over the attributes named in `state_attrs` (modules and
    optimisers): what a checkpoint keeps of an object that owns several of them."""

    state_attrs: tuple = ()

    def state_dict(self) -> dict:
        return {name: getattr(self, name).state_dict() for name in self.state_attrs}

    def load_state_dict(self, state: dict) -> None:
        for name in self.state_attrs:
            getattr(self, name).load_state_dict(state[name])


def adam(params, lr: float | None = None) -> torch.optim.Adam:
    """Adam over `params` (tensors or param groups), fused into one kernel per step: the default
    launches several per parameter tensor on CUDA, and on a CPU the fused step took a critic
    update from 5.8 to 5.2 ms (docs/tuning.md)."""
    groups = [{**g, "params": list(g["params"])} if isinstance(g, dict) else g for g in params]
    return torch.optim.Adam(groups, **({} if lr is None else {"lr": lr}), fused=True)


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Polyak averaging θ' ← τθ + (1 − τ)θ' over parameters (buffers are copied)."""
    torch._foreach_lerp_(list(target.parameters()), list(source.parameters()), tau)
    for t, s in zip(target.buffers(), source.buffers()):
        t.copy_(s)


def smoothed_target_action(policy: nn.Module, next_obs: torch.Tensor, noise: float, noise_clip: float) -> torch.Tensor:
    """TD3 target-policy smoothing: clip(π(s') + clip(ε, −c, c), −1, 1), ε ~ N(0, noise²)."""
    action = policy(next_obs)
    eps = (torch.randn_like(action) * noise).clamp(-noise_clip, noise_clip)
    return (action + eps).clamp(-1.0, 1.0)
