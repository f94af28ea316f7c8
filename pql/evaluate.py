"""Deterministic evaluation on envs separate from the training envs."""
from __future__ import annotations

import torch

from pql.envs import to_env_action


@torch.no_grad()
def evaluate(env, policy, normalizer) -> tuple[float, float]:
    """Run the deterministic policy until every env has finished one episode.
    -> (mean return, mean length) over the env's num_envs first episodes."""
    obs = env.reset()
    n = env.num_envs
    returns = torch.zeros(n, device=env.device)
    lengths = torch.zeros(n, device=env.device)
    running = torch.ones(n, dtype=torch.bool, device=env.device)
    for _ in range(env.max_episode_steps):
        obs, reward, terminated, truncated, _ = env.step(to_env_action(policy(normalizer(obs)), env))
        returns += reward * running
        lengths += running.float()
        running &= ~(terminated | truncated)
        if not running.any():
            break
    return float(returns.mean()), float(lengths.mean())


def report_checkpoint_evaluation(cfg, ret: float, length: float) -> dict:
    """test=true: print what the checkpoint's policy scored. -> the eval scalars."""
    print(f"pql: evaluated {cfg.checkpoint} on {cfg.task.eval_envs} {cfg.task.name} envs: "
          f"mean return {ret:.2f}, mean length {length:.1f}", flush=True)
    return {"eval/return": ret, "eval/length": length}
