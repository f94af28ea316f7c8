"""Deterministic evaluation on envs separate from the training envs."""
from __future__ import annotations

import contextlib

import torch

from pql.envs import to_env_action


@contextlib.contextmanager
def one_torch_thread():
    """Run the block with one torch thread, then give back the thread count it had."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@torch.no_grad()
@one_torch_thread()
def evaluate(env, policy, normalizer) -> tuple[float, float]:
    """Run the deterministic policy (its forward: the mean action, clipped to the action box as in
    training) until every env has finished one episode, on one torch thread: a few envs' worth of
    policy gives a thread pool nothing to share, and on a CPU the pool's idle threads spin on the
    cores the training processes need (measured on 2 cores, Ant: an evaluation took 12 s with 2
    threads and the roles all but stopped meanwhile; 2.3 s with 1, training going on).
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
