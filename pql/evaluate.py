"""Deterministic evaluation on envs separate from the training envs."""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from pql.envs import to_env_action
from tasks.base import LateRead


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
def evaluate(env, policy, normalizer) -> dict[str, float]:
    """Run the deterministic policy (its forward: the mean action, clipped to the action box as in
    training) until every env has finished one episode, on one torch thread: a few envs' worth of
    policy gives a thread pool nothing to share, and on a CPU the pool's idle threads spin on the
    cores the training processes need (measured on 2 cores, Ant: an evaluation took 12 s with 2
    threads and the roles all but stopped meanwhile; 2.3 s with 1, training going on).

    All episodes step as one batch, and no step waits on the device: whether any episode still
    runs is read from a copy that lands on the host a few steps late (tasks.base.LateRead; on the
    CPU it is the mask itself). The steps after the last episode ended add nothing, since every
    sum is masked by `running`. An env that cannot start episodes on demand (env.episode_starts
    is not None) is scored on each env's first episode that starts after this call: an episode
    under way is stepped through unscored. The policy and `normalizer` read the env's policy
    columns (env.policy_obs_dim: an env may offer the critic more). -> {"eval/return",
    "eval/length", and "eval/<metric>" for each of the env's episode_metrics}: means over the
    env's num_envs scored episodes, read in one transfer at the end."""
    obs = env.reset()
    n = env.num_envs
    metrics = env.episode_metrics
    returns = torch.zeros(n, device=env.device)
    lengths = torch.zeros(n, device=env.device)
    scores = torch.zeros(len(metrics), n, device=env.device)  # each metric at each episode's last step
    running = torch.ones(n, dtype=torch.bool, device=env.device)  # the scored episode has not ended
    starts = env.episode_starts
    scoring = running.clone() if starts is None else starts.clone()  # the episode stepped is the one scored
    still_running = LateRead(running)
    for _ in range(env.max_episode_steps * (1 if starts is None else 2)):
        obs, reward, terminated, truncated, info = env.step(deterministic_action(env, policy, normalizer, obs))
        done = terminated | truncated
        counted = running & scoring
        returns += reward * counted
        lengths += counted.float()
        ended = counted & done
        if metrics:
            scores = torch.where(ended, torch.stack([info[name] for name in metrics]), scores)
        running &= ~ended
        scoring |= done  # an env whose unscored episode ended starts its scored one at the next step
        seen = still_running.read()
        if seen is not None and not seen.any():
            break
    names = ["eval/return", "eval/length"] + [f"eval/{name}" for name in metrics]
    means = torch.cat([torch.stack([returns.mean(), lengths.mean()]), scores.mean(dim=1)]).tolist()
    return dict(zip(names, means))


def deterministic_action(env, policy, normalizer, obs: torch.Tensor) -> torch.Tensor:
    """The action an evaluation sends `env` for obs [N, obs_dim]: the policy's forward (its mean
    action) on the normalised policy columns, clipped to [-1, 1] as in training, on the env's box."""
    action = policy(normalizer(obs[:, : env.policy_obs_dim])).clamp(-1.0, 1.0)
    return to_env_action(action, env)


@torch.no_grad()
@one_torch_thread()
def record_episode(env, policy, normalizer, max_steps: int) -> np.ndarray:
    """Env 0's first episode from a reset, stepped as `evaluate` steps it (every env steps with
    it), up to max_steps steps: its frames [T, H, W, 3] uint8 (env.render). Raises TaskError for
    an env that cannot render, before it steps."""
    obs = env.reset()
    frames = [env.render(0)]
    for _ in range(max_steps):
        obs, _, terminated, truncated, _ = env.step(deterministic_action(env, policy, normalizer, obs))
        if bool(terminated[0] | truncated[0]):  # obs is the next episode's first
            break
        frames.append(env.render(0))
    return np.stack(frames)
