"""The goal-conditioned tasks' resets (Reacher, Pusher): each random start, target or object
included, has Gymnasium v5's distribution, is drawn at every reset of an env and only for the
envs that restart, is keyed by (seed, env, episode), and is the same on both backends.

The distribution checks draw 2,000 starts with the task's own reset kernel, as the backends
launch it (that the envs start there is checked separately, on both backends). A sample passes
if every Kolmogorov-Smirnov distance to the exact law is below 1.95/sqrt(n) (a 0.1% test) and
every mean or spread compared to a Gymnasium replay is within 4 standard errors; the draws are
seeded, so a pass is not luck that could change from run to run.
"""

import math

import gymnasium
import numpy as np
import pytest
import torch
import warp as wp

import tasks
from tasks.mujoco.env import MujocoEnv
from tasks.mujoco.physics_mujoco import MujocoPhysics
from tasks.mujoco.pusher import Pusher
from tasks.mujoco.reacher import Reacher
from tasks.mujoco.task import Starts, init_warp, load_asset

SAMPLES = 2000
BACKENDS = ["mujoco", "mjwarp"]
CPU = torch.device("cpu")


def draw_starts(task_cls, num_envs, seed, episode=1):
    """(qpos [N, nq], qvel [N, nv]) float64: every env's `episode`-th random start, drawn by the
    task's reset kernel from MuJoCo's reset state (qpos0, zero velocity) as the backends do."""
    init_warp()
    model = load_asset(task_cls.xml)
    task = task_cls(model, torch.float64, CPU)
    qpos = torch.from_numpy(model.qpos0).repeat(num_envs, 1)
    qvel = torch.zeros(num_envs, model.nv, dtype=torch.float64)
    restart = torch.ones(num_envs, dtype=torch.bool)
    episodes = torch.full((num_envs,), episode - 1, dtype=torch.int32)
    task.add_reset_noise(seed, Starts(*(wp.from_torch(t) for t in (restart, episodes, qpos, qvel))))
    return qpos, qvel


def gymnasium_starts(name, num_resets):
    """(qpos, qvel) float64 of `num_resets` successive resets of Gymnasium's own env."""
    env = gymnasium.make(f"{name}-v5").unwrapped
    env.reset(seed=0)
    starts = []
    for _ in range(num_resets):
        env.reset()
        starts.append((env.data.qpos.copy(), env.data.qvel.copy()))
    return tuple(torch.from_numpy(np.stack(s)) for s in zip(*starts))


def ks_distance(samples, cdf):
    """Kolmogorov-Smirnov distance between the empirical law of samples [n] and `cdf`."""
    x = samples.double().sort().values
    n = x.numel()
    f = cdf(x)
    steps = torch.arange(1, n + 1, dtype=torch.float64) / n
    return max((steps - f).max().item(), (f - (steps - 1 / n)).max().item())


def uniform_problems(what, samples, low, high):
    """Why samples [n, k] are not each U(low, high): bounds and a KS test per column."""
    problems = []
    if samples.min() < low or samples.max() > high:
        problems.append(f"{what} outside [{low}, {high}]: {samples.min():.4g} .. {samples.max():.4g}")
    for j in range(samples.shape[1]):
        distance = ks_distance(samples[:, j], lambda x: ((x - low) / (high - low)).clamp(0, 1))
        if distance > 1.95 / samples.shape[0] ** 0.5:
            problems.append(f"{what}[{j}] is not U({low}, {high}): KS distance {distance:.3f}")
    return problems


def matching_problems(what, samples, reference):
    """Why samples [n, k] do not match reference [m, k] (Gymnasium's): means and standard
    deviations per column more than 4 standard errors apart."""
    problems = []
    for j in range(samples.shape[1]):
        a, b = samples[:, j].double(), reference[:, j].double()
        mean_se = (a.var() / a.numel() + b.var() / b.numel()).sqrt()
        if (a.mean() - b.mean()).abs() > 4 * mean_se:
            problems.append(f"{what}[{j}] mean {a.mean():.4f}, Gymnasium's {b.mean():.4f}")

        def std_se(x):  # delta method: var(s^2) ~ (m4 - s^4) / n, s.e.(s) = s.e.(s^2) / 2s
            m4 = (x - x.mean()).pow(4).mean()
            return ((m4 - x.var() ** 2) / x.numel()).sqrt() / (2 * x.std())

        if (a.std() - b.std()).abs() > 4 * (std_se(a) ** 2 + std_se(b) ** 2).sqrt():
            problems.append(f"{what}[{j}] spread {a.std():.4f}, Gymnasium's {b.std():.4f}")
    return problems


def reacher_start_problems(qpos, qvel, qpos0):
    """Why Reacher starts (qpos [n, 4], qvel [n, 4]) do not follow Reacher-v5's reset: arm angles
    qpos0 + U(±0.1), arm velocities U(±0.005), the target uniform on the disc of radius 0.2
    (r²/0.2² ~ U(0, 1), angle ~ U(-π, π)) and at rest. Empty if they do."""
    problems = uniform_problems("arm qpos - qpos0", qpos[:, :2] - qpos0[:2], -0.1, 0.1)
    problems += uniform_problems("arm qvel", qvel[:, :2], -0.005, 0.005)
    if (qvel[:, 2:] != 0).any():
        problems.append("the target moves at the start")
    target = qpos[:, 2:]
    radius = target.norm(dim=1)
    n = radius.numel()
    if radius.max() >= 0.2:
        problems.append(f"a target {radius.max():.4f} from the centre, outside the disc of radius 0.2")
    if ks_distance(radius.square() / 0.04, lambda x: x.clamp(0, 1)) > 1.95 / n**0.5:
        problems.append("the target's distance from the centre is not that of a uniform disc (r² not uniform)")
    angle = torch.atan2(target[:, 1], target[:, 0])
    if ks_distance(angle, lambda x: (x + math.pi) / (2 * math.pi)) > 1.95 / n**0.5:
        problems.append("the target's direction is not uniform")
    inner = (radius < 0.1).double().mean().item()
    if abs(inner - 0.25) > 4 * (0.25 * 0.75 / n) ** 0.5:
        problems.append(f"{inner:.3f} of the targets within 0.1 of the centre, where a uniform disc has 0.25")
    if (target.mean(dim=0).abs() > 4 * 0.1 / n**0.5).any():  # each coordinate's std is R/2 = 0.1
        problems.append(f"the targets' mean is {target.mean(dim=0).tolist()}, not 0")
    return problems


def pusher_start_problems(qpos, qvel, qpos0, reference_qpos):
    """Why Pusher starts (qpos [n, 11], qvel [n, 11]) do not follow Pusher-v5's reset: arm at
    qpos0 with velocities U(±0.005), the object in [-0.3, 0] x [-0.2, 0.2] farther than 0.17 from
    the goal and at rest, the goal at rest at 0; the object's position distributed as in
    reference_qpos (Gymnasium's resets). Empty if they do."""
    problems = uniform_problems("arm qvel", qvel[:, :7], -0.005, 0.005)
    if (qpos[:, :7] != qpos0[:7]).any():
        problems.append("the arm does not start at qpos0")
    if (qpos[:, 9:] != 0).any() or (qvel[:, 7:] != 0).any():
        problems.append("the goal is not at 0, or the object or the goal moves at the start")
    obj = qpos[:, 7:9]
    low, high = torch.tensor([-0.3, -0.2], dtype=obj.dtype), torch.tensor([0.0, 0.2], dtype=obj.dtype)
    if ((obj < low) | (obj > high)).any():
        problems.append("an object outside [-0.3, 0] x [-0.2, 0.2]")
    if obj.norm(dim=1).min() <= 0.17:
        problems.append(f"an object {obj.norm(dim=1).min():.4f} from the goal, not farther than 0.17")
    reference = reference_qpos[:, 7:9]
    problems += matching_problems(
        "object qpos",
        torch.cat([obj, obj.norm(dim=1, keepdim=True)], dim=1),
        torch.cat([reference, reference.norm(dim=1, keepdim=True)], dim=1),
    )
    return problems


class SquareReacher(Reacher):
    """A mistake: the target drawn in the square around the disc, without rejection."""

    def start_params(self):
        params = super().start_params()
        params.radius = wp.float64(1.0)  # every point of the square passes
        return params


class NarrowReacher(Reacher):
    """A mistake: the target drawn on too small a disc."""

    target_radius = 0.18


class CrowdingPusher(Pusher):
    """A mistake: the object drawn anywhere in its box, even on the goal."""

    min_goal_distance = 0.0


def test_reacher_start_distribution():
    qpos, qvel = draw_starts(Reacher, SAMPLES, seed=0)
    assert reacher_start_problems(qpos, qvel, torch.from_numpy(load_asset(Reacher.xml).qpos0)) == []


@pytest.mark.parametrize(
    "task_cls, problem", [(SquareReacher, "outside the disc of radius 0.2"), (NarrowReacher, "r² not uniform")]
)
def test_reacher_check_catches_a_wrong_target(task_cls, problem):
    qpos, qvel = draw_starts(task_cls, SAMPLES, seed=0)
    problems = reacher_start_problems(qpos, qvel, torch.from_numpy(load_asset(Reacher.xml).qpos0))
    assert any(problem in p for p in problems), problems


def test_reacher_matches_gymnasium_replay():
    """Beyond the exact law: the target's and the arm's moments against Gymnasium's own resets."""
    qpos, qvel = draw_starts(Reacher, SAMPLES, seed=0)
    gym_qpos, gym_qvel = gymnasium_starts("Reacher", 10 * SAMPLES)
    assert matching_problems("qpos", qpos, gym_qpos) + matching_problems("qvel", qvel[:, :2], gym_qvel[:, :2]) == []


@pytest.mark.parametrize("task_cls, fails", [(Pusher, False), (CrowdingPusher, True)])
def test_pusher_start_distribution(task_cls, fails):
    qpos, qvel = draw_starts(task_cls, SAMPLES, seed=0)
    reference, _ = gymnasium_starts("Pusher", 10 * SAMPLES)
    problems = pusher_start_problems(qpos, qvel, torch.from_numpy(load_asset(Pusher.xml).qpos0), reference)
    assert bool(problems) == fails, problems


def start_states(env):
    return torch.cat([env.physics.state["qpos"], env.physics.state["qvel"]], dim=1).double()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("task_cls", [Reacher, Pusher])
def test_envs_start_where_the_kernel_draws(task_cls, backend):
    env = tasks.make(task_cls.__name__, 5, "cpu", seed=7, backend=backend)
    torch.testing.assert_close(
        start_states(env),
        torch.cat(draw_starts(task_cls, 5, seed=7), dim=1),
        rtol=0,
        atol=0 if backend == "mujoco" else 1e-6,
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_new_target_at_each_reset_for_the_envs_that_restart(backend):
    """Envs 1 and 3 restart their step count at step 20 (reset_to their own state); at the
    50-step limit the others are truncated and restart with a new target, their second draw;
    envs 1 and 3 keep their target until their own limit, then draw theirs."""
    env = tasks.make("Reacher", 5, "cpu", seed=3, backend=backend)
    late = torch.tensor([False, True, False, True, False])
    first_targets = env.physics.state["qpos"][:, 2:].clone()
    second_starts = torch.cat(draw_starts(Reacher, 5, seed=3, episode=2), dim=1)
    gen = torch.Generator().manual_seed(0)
    for step in range(1, 71):
        actions = 2 * torch.rand(5, 2, generator=gen) - 1
        obs, _, terminated, truncated, info = env.step(actions)
        assert not terminated.any()
        if step == 20:
            # Clones: mjwarp's state tensors are the physics' own, overwritten by the reset.
            env.reset_to(env.physics.state["qpos"].clone(), env.physics.state["qvel"].clone(), mask=late)
        if step == 50:
            assert torch.equal(truncated, ~late)
            targets = env.physics.state["qpos"][:, 2:].double()
            assert torch.equal(targets[late], first_targets[late].double())
            assert (targets[~late] != first_targets[~late].double()).all()
            torch.testing.assert_close(
                start_states(env)[~late], second_starts[~late], rtol=0, atol=0 if backend == "mujoco" else 1e-6
            )
            torch.testing.assert_close(obs[:, 4:6], targets.float())  # the observation shows the new target
            torch.testing.assert_close(info["final_obs"][late], obs[late])
        if step == 70:
            assert torch.equal(truncated, late)
            torch.testing.assert_close(
                start_states(env)[late], second_starts[late], rtol=0, atol=0 if backend == "mujoco" else 1e-6
            )


@pytest.mark.parametrize("backend", BACKENDS)
def test_targets_are_keyed_by_seed_and_env(backend):
    few, many = (tasks.make("Reacher", n, "cpu", seed=4, backend=backend) for n in (3, 6))
    assert torch.equal(start_states(few), start_states(many)[:3])
    other = tasks.make("Reacher", 3, "cpu", seed=5, backend=backend)
    assert (start_states(other)[:, 2:4] != start_states(few)[:, 2:4]).all()
    # Distinct envs of one seed get distinct targets.
    assert len(set(map(tuple, start_states(many)[:, 2:4].tolist()))) == 6


@pytest.mark.parametrize("name", ["Reacher", "Pusher"])
def test_both_backends_start_alike(name):
    """The same kernel draws the starts on both; mjwarp's reset computes the body positions that
    the observation reads (xpos) as MuJoCo C's mj_forward does, to float32 rounding."""
    mujoco_c, mjwarp = (tasks.make(name, 6, "cpu", seed=2, backend=backend) for backend in BACKENDS)
    for restart in (None, torch.tensor([True, False, True, False, False, True])):
        if restart is not None:
            for env in (mujoco_c, mjwarp):
                env.physics.reset(restart)
        torch.testing.assert_close(start_states(mjwarp), start_states(mujoco_c), rtol=0, atol=1e-6)
        obs = [env.task.observe(env.physics.state).float() for env in (mujoco_c, mjwarp)]
        torch.testing.assert_close(obs[1], obs[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(mjwarp.reset(), mujoco_c.reset(), rtol=0, atol=1e-5)


def test_target_is_the_same_in_both_precisions():
    """The rejection test runs in float64 on float32 draws, so the float64 (MuJoCo C) and float32
    (mjwarp) starts hold the very same target, inside the disc in either precision."""
    env = MujocoEnv(Reacher, 64, CPU, 9, MujocoPhysics)
    targets = env.physics.state["qpos"][:, 2:]
    assert torch.equal(targets.float().double(), targets)
    assert (targets.norm(dim=1) < 0.2).all() and (targets.float().norm(dim=1) < 0.2).all()
