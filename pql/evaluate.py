"""Deterministic evaluation on envs separate from the training envs."""
from __future__ import annotations

import torch

from pql.envs import to_env_action


@torch.no_grad()
def evaluate(env, policy, normalizer) -> tuple[float, float]:
    """Run the deterministic policy (its forward: the mean action, clipped to the action box as in
    training) until every env has finished one episode.
    -> (mean return, mean length) over the env's num_envs first episodes."""
    obs = env.reset()
    n = env.num_envs
    returns = torch.zeros(n, device=env.device)
    lengths = torch.zeros(n, device=env.device)
    running = torch.ones(n, dtype=torch.bool, device=env.device)
    for _ in range(env.max_episode_steps):
        action = policy(normalizer(obs)).clamp(-1.0, 1.0)
        obs, reward, terminated, truncated, _ = env.step(to_env_action(action, env))
        returns += reward * running
        lengths += running.float()
        running &= ~(terminated | truncated)
        if not running.any():
            break
    return float(returns.mean()), float(lengths.mean())
