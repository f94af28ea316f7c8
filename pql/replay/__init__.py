"""The replay: storage (`ReplayBuffer`) and the samplers that draw from it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from pql.replay.buffer import ReplayBuffer, UniformSampler, replay_layout
from pql.replay.prioritized import PrioritizedSampler, sampler_kind

if TYPE_CHECKING:
    from pql.config import ReplayConfig

__all__ = [
    "PrioritizedSampler",
    "ReplayBuffer",
    "UniformSampler",
    "make_sampler",
    "replay_layout",
    "sampler_layout_kind",
]


def make_sampler(replay_cfg: ReplayConfig, capacity: int, device: torch.device) -> PrioritizedSampler | None:
    """The sampler replay_cfg asks for (None: uniform, the buffer's own) for a replay of `capacity`."""
    if replay_cfg.kind == "uniform":
        return None
    return PrioritizedSampler(
        capacity,
        device,
        mode=replay_cfg.priority_mode,
        alpha=replay_cfg.priority_alpha,
        beta0=replay_cfg.priority_beta0,
        beta_anneal_updates=replay_cfg.beta_anneal_updates,
        eps=replay_cfg.priority_eps,
        rerank_every=replay_cfg.rerank_every,
        # On a GPU each check is a host sync per update; the CPU checks for free.
        validate=torch.device(device).type == "cpu",
    )


def sampler_layout_kind(replay_cfg: ReplayConfig) -> str:
    """The kind of sampler replay_cfg asks for, as a saved replay's layout names it."""
    return UniformSampler.kind if replay_cfg.kind == "uniform" else sampler_kind(replay_cfg.priority_mode)
