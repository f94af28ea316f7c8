"""Statistical parity with Gymnasium's MuJoCo v5 envs: for every task, pql's batched env (mujoco
backend) and Gymnasium envs run uniform random actions with auto-reset, and the mean and spread
of every observation dimension, of the reward, of the termination rate and of the episodes'
first observations must agree within a few standard errors.

Unlike tests/test_tasks_parity.py, which replays Gymnasium's own start states, this also checks
what pql draws by itself (the reset noise: its scale and distribution) and the episode
statistics over a long stretch of random play. Each env's trajectory is independent of the
others' on both sides, so a trajectory statistic is averaged per env first and its standard
error taken across envs (steps within one episode are correlated); the episodes' starts are
independent draws, one row each. The tests below the parametrized one show that the comparison
catches a wrong reward weight, a missing reward term and a wrong reset noise scale or
distribution.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import gymnasium
import numpy as np
import pytest
import torch

from tasks.mujoco import GYMNASIUM_TASKS, TASKS
from tasks.mujoco.env import MujocoEnv
from tasks.mujoco.physics_mujoco import MujocoPhysics
from tasks.mujoco.walker2d import Walker2d

NUM_ENVS = 32
STEPS = 150
SIGMAS = 5.0  # a difference beyond this many standard errors is a mismatch
# Float32 observations against float64: a constant entry (a body's mass in cinert) differs by its rounding.
ROUNDING = 1e-5


@dataclass
class Rollout:
    obs: torch.Tensor  # [envs, steps, obs_dim] the observation each step ended at (pre-reset)
    reward: torch.Tensor  # [envs, steps]
    terminated: torch.Tensor  # [envs, steps], 0 or 1
    starts: torch.Tensor  # [episodes, obs_dim] every episode's first observation


def pql_rollout(task_cls, seed: int = 0, num_envs: int = NUM_ENVS, steps: int = STEPS) -> Rollout:
    env = MujocoEnv(task_cls, num_envs, torch.device("cpu"), seed, MujocoPhysics)
    gen = torch.Generator().manual_seed(seed)
    obs = env.reset()
    starts, seen, rewards, terminations = [obs], [], [], []
    for _ in range(steps):
        u = torch.rand((num_envs, env.act_dim), generator=gen)
        obs, reward, terminated, truncated, info = env.step(env.action_low + u * (env.action_high - env.action_low))
        starts.append(obs[terminated | truncated])
        seen.append(info["final_obs"])
        rewards.append(reward)
        terminations.append(terminated)
    env.close()
    return Rollout(
        torch.stack(seen, 1).double(),
        torch.stack(rewards, 1).double(),
        torch.stack(terminations, 1).double(),
        torch.cat(starts).double(),
    )


@functools.cache
def gymnasium_rollout(name: str, seed: int = 0, num_envs: int = NUM_ENVS, steps: int = STEPS) -> Rollout:
    envs = [gymnasium.make(f"{name}-v5") for _ in range(num_envs)]
    rng = np.random.default_rng(seed)
    starts = [env.reset(seed=seed * num_envs + i)[0] for i, env in enumerate(envs)]
    obs = np.empty((num_envs, steps, len(starts[0])))
    reward, terminated = np.zeros((num_envs, steps)), np.zeros((num_envs, steps))
    low, high = envs[0].action_space.low, envs[0].action_space.high
    for t in range(steps):
        for i, env in enumerate(envs):
            obs[i, t], reward[i, t], terminated[i, t], truncated, _ = env.step(
                rng.uniform(low, high).astype(np.float32)
            )
            if terminated[i, t] or truncated:
                starts.append(env.reset()[0])
    for env in envs:
        env.close()
    return Rollout(
        torch.from_numpy(obs),
        torch.from_numpy(reward),
        torch.from_numpy(terminated),
        torch.from_numpy(np.stack(starts)),
    )


def mismatches(ours: Rollout, theirs: Rollout, sigmas: float = SIGMAS) -> list[str]:
    """The statistics on which the two rollouts differ by more than `sigmas` standard errors, one line each.

    Per quantity, rows are independent samples (envs for trajectory averages, episodes for the
    starts): the mean and the variance (about the pooled mean) of each dimension are compared.
    """
    found = []
    for what, a, b in [
        ("observation", ours.obs, theirs.obs),
        ("reward", ours.reward[..., None], theirs.reward[..., None]),
        ("termination rate", ours.terminated[..., None], theirs.terminated[..., None]),
        ("first observation", ours.starts[:, None], theirs.starts[:, None]),
    ]:
        center = torch.cat([a.flatten(0, 1), b.flatten(0, 1)]).mean(0)
        for moment, fa, fb in [("mean", a, b), ("variance", (a - center).square(), (b - center).square())]:
            rows_a, rows_b = fa.mean(1), fb.mean(1)  # [rows, dims]: one independent sample per row
            mean_a, mean_b = rows_a.mean(0), rows_b.mean(0)
            error = (rows_a.var(0) / len(rows_a) + rows_b.var(0) / len(rows_b)).sqrt()
            rounding = ROUNDING * (1 + center.abs())
            slack = sigmas * error + (rounding if moment == "mean" else rounding.square())
            for j in ((mean_a - mean_b).abs() > slack).nonzero().flatten().tolist():
                found.append(
                    f"{what}[{j}] {moment}: pql {mean_a[j]:.5g}, Gymnasium {mean_b[j]:.5g} "
                    f"({(mean_a[j] - mean_b[j]).abs() / error[j]:.1f} standard errors)"
                )
    return found


@pytest.mark.parametrize("name", GYMNASIUM_TASKS)
def test_statistics_match_gymnasium(name):
    found = mismatches(pql_rollout(TASKS[name]), gymnasium_rollout(name))
    assert not found, f"{name}: {len(found)} statistics differ from Gymnasium's:\n" + "\n".join(found[:20])


class CostlyWalker2d(Walker2d):
    ctrl_cost_weight = 0.1  # Gymnasium's is 1e-3


class JoylessWalker2d(Walker2d):
    healthy_reward = 0.0


class ShakyWalker2d(Walker2d):
    reset_noise_scale = 7.5e-3  # 1.5 times Gymnasium's


class GaussianWalker2d(Walker2d):
    qvel_noise = "normal"  # Gymnasium draws Walker2d's start velocities uniformly


@pytest.mark.parametrize(
    "task_cls, culprit",
    [
        (CostlyWalker2d, "reward[0] mean"),
        (JoylessWalker2d, "reward[0] mean"),
        (ShakyWalker2d, "first observation[0] variance"),
        (GaussianWalker2d, "first observation[8] variance"),
    ],
)
def test_a_wrong_task_is_caught(task_cls, culprit):
    """With seeded rollouts the margins are fixed: the 100-fold control cost moves the mean reward
    by 6.7 standard errors, the missing healthy reward by 35; the 1.5-fold noise scale and the
    normal velocity noise (the first qvel entry is observation 8) move their start variances by
    about 8."""
    found = mismatches(pql_rollout(task_cls), gymnasium_rollout("Walker2d"))
    assert any(line.startswith(culprit) for line in found), found
