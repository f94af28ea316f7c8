"""What doing nothing, acting at random and a run's policy score on the same episodes of a task.

    python bench/reference_policies.py --task Anymal [--runs runs/<run> ...] [--envs 10] [--seed 123]

One episode in each of --envs envs (MuJoCo C backend, seeded --seed, so every policy meets the same
starts, goals and commands): zero actions (the middle of the action box), uniform random actions,
and the final policy of each run given (the exported computation, pql.export.deployed_policy).
For each: the mean return and length, the share of episodes that ended before the time limit, the
task's episode metrics at each episode's end (as evaluations report them) and the mean sum over
an episode of each reward term the task reports (info entries named reward_*). docs/benchmarks.md
quotes it beside the 15-minute runs of the robots.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tasks
from pql.checkpoint import load_checkpoint
from pql.export import checkpoint_file, deployed_policy


@torch.no_grad()
def score(task: str, act, num_envs: int, seed: int) -> dict:
    """One episode in each env under `act(obs, env) -> env actions`: the means described above."""
    env = tasks.make(task, num_envs, "cpu", seed=seed, backend="mujoco")
    obs = env.reset()
    running = torch.ones(num_envs, dtype=torch.bool)
    returns, lengths, ended_early = torch.zeros(num_envs), torch.zeros(num_envs), torch.zeros(num_envs)
    metrics = torch.zeros(len(env.episode_metrics), num_envs)
    terms: dict[str, torch.Tensor] = {}
    for _ in range(env.max_episode_steps):
        obs, reward, terminated, truncated, info = env.step(act(obs[:, : env.policy_obs_dim], env))
        returns += reward * running
        lengths += running
        for name, value in info.items():
            if name.startswith("reward_"):
                terms[name] = terms.get(name, torch.zeros(num_envs)) + value.float() * running
        ending = running & (terminated | truncated)
        if env.episode_metrics:
            metrics = torch.where(ending, torch.stack([info[name].float() for name in env.episode_metrics]), metrics)
        ended_early += ending & terminated
        running &= ~ending
        if not running.any():
            break
    env.close()
    return {
        "return": returns.mean().item(),
        "length": lengths.mean().item(),
        "ended early": ended_early.mean().item(),
        **{name: value.mean().item() for name, value in zip(env.episode_metrics, metrics)},
        **{name: value.mean().item() for name, value in terms.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True, help="one of pql's own tasks")
    parser.add_argument(
        "--runs", nargs="*", default=[], help="run directories (or checkpoints) whose policies to score"
    )
    parser.add_argument("--envs", type=int, default=10, help="envs, one episode each (default 10)")
    parser.add_argument("--seed", type=int, default=123, help="the envs' seed (default 123)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    policies = {
        "zero actions": lambda obs, env: ((env.action_low + env.action_high) / 2).expand(obs.shape[0], -1),
        "random actions": lambda obs, env: (
            env.action_low
            + torch.rand(obs.shape[0], env.act_dim, generator=generator) * (env.action_high - env.action_low)
        ),
    }
    for run in args.runs:
        policy, _ = deployed_policy(load_checkpoint(checkpoint_file(run)))
        policies[run] = lambda obs, env, policy=policy: policy(obs)
    for name, act in policies.items():
        scores = score(args.task, act, args.envs, args.seed)
        print(f"{args.task} | {name} | " + ", ".join(f"{key} {value:.4g}" for key, value in scores.items()), flush=True)


if __name__ == "__main__":
    main()
