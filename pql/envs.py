"""The bridge from pql's config and normalised action box to a task's batched env."""

from __future__ import annotations

import torch


def build_env(task_cfg, num_envs: int, device, seed: int):
    """A batched env from tasks/ for this config (task_cfg: TaskConfig)."""
    import tasks

    return tasks.make(
        task_cfg.name,
        num_envs=num_envs,
        device=device,
        seed=seed,
        backend=task_cfg.backend,
        kwargs=task_cfg.kwargs,
        import_module=task_cfg.import_module,
        policy_group=task_cfg.policy_group,
        vectorization=task_cfg.vectorization,
        action_repeat=task_cfg.action_repeat,
    )


def to_env_action(action: torch.Tensor, env) -> torch.Tensor:
    """Map actions in [-1, 1]^act_dim onto the env's box [low, high]. action: [N, act_dim]."""
    low, high = env.action_low, env.action_high
    return low + (action + 1.0) * 0.5 * (high - low)
