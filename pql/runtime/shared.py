"""Everything the roles share, created once by the main process before the roles start
(so that spawn can hand it to them: shared memory on CPU, CUDA IPC on GPU)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from pql.runtime.control import NUM_COUNTERS, NUM_STATS
from pql.runtime.weight_sync import SharedWeights


@dataclass
class SharedState:
    counters: torch.Tensor          # [NUM_COUNTERS] int64, shared memory
    stats: torch.Tensor             # [NUM_STATS] float64, shared memory
    ring: dict                      # staging ring {field: [slots, num_envs, ...]} of staging_spec, on the device
    policy: SharedWeights           # published by the P-learner
    critic: SharedWeights           # published by the V-learner
    normalizer: SharedWeights       # published by the actor
    condition: object = None        # multiprocessing Condition (None in sequential mode)
    errors: object = None           # queue of (role, traceback) from failing roles
    checkpoint_parts: object = None  # queue of (request id, role, state) for checkpoints

    @property
    def ring_slots(self) -> int:
        return next(iter(self.ring.values())).shape[0]


def transition_spec(obs_dim: int, act_dim: int) -> dict:
    """The n-step folded transition the actor makes and the V-learner stores."""
    return {"obs": ((obs_dim,), torch.float32), "action": ((act_dim,), torch.float32),
            "reward": ((), torch.float32), "next_obs": ((obs_dim,), torch.float32),
            "discount": ((), torch.float32)}


def staging_spec(obs_dim: int, act_dim: int) -> dict:
    """A transition and the priority the actor gives it (read only with replay.actor_priorities)."""
    return {**transition_spec(obs_dim, act_dim), "priority": ((), torch.float32)}


def make_shared_state(num_envs: int, obs_dim: int, act_dim: int, device, slots: int,
                      policy, critic, normalizer, ctx=None) -> SharedState:
    """ctx: a multiprocessing context for process mode, None for sequential mode."""
    ring = {k: torch.zeros((slots, num_envs, *shape), dtype=dtype, device=device)
            for k, (shape, dtype) in staging_spec(obs_dim, act_dim).items()}
    if torch.device(device).type == "cpu":
        for t in ring.values():
            t.share_memory_()
    return SharedState(
        counters=torch.zeros(NUM_COUNTERS, dtype=torch.int64).share_memory_(),
        stats=torch.zeros(NUM_STATS, dtype=torch.float64).share_memory_(),
        ring=ring,
        policy=SharedWeights(policy, device),
        critic=SharedWeights(critic, device),
        normalizer=SharedWeights(normalizer, device),
        condition=ctx.Condition() if ctx else None,
        errors=ctx.Queue() if ctx else None,
        checkpoint_parts=ctx.Queue() if ctx else None,
    )
