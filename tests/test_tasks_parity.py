"""Parity with Gymnasium's MuJoCo v5 envs, for every task on both backends (mjwarp on Warp's CPU).

Each world starts from the state a Gymnasium env reset to, both get the same random actions, and
observations, rewards, terminations and info entries are compared step by step; when a Gymnasium episode ends
its env is reset and the world is put into the same new state.

* mujoco backend: one MjData per world, stepped exactly as Gymnasium steps, so the trajectories
  are the same to the last bit and only the float32 cast of observations and rewards differs
  (relative 6e-8): the tolerance is 1e-5.
* mjwarp backend: MuJoCo Warp differs from MuJoCo C in ways that are not the task code's:
  float32 physics, a Newton tolerance of 1e-6 instead of 1e-8, no PGS solver (Humanoid runs
  Newton), and another tangent frame for plane contacts, which turns Gymnasium's pyramidal
  friction cones (up to ~30% of a contact's acceleration in one step). So both engines run the
  models with elliptic cones (rotation-invariant) and Newton, and the worlds are put back onto
  Gymnasium's state before every step, since float32 rounding grows chaotically through
  contacts within ~20 steps. Left are constraint forces agreeing to ~1e-3 relative (they enter
  Ant's and Humanoid's observation as cfrc_ext), kinematics to ~1e-5: the tolerance is 1e-2
  relative to 1 + |value| for observations, 1e-3 for rewards.
"""

import os
import re

import gymnasium
import mujoco
import numpy as np
import pytest
import torch

import tasks
from tasks.mujoco import GYMNASIUM_TASKS, TASKS
from tasks.mujoco.env import MujocoEnv
from tasks.mujoco.half_cheetah import HalfCheetah
from tasks.mujoco.task import ASSETS, load_asset

STEPS = 60
NUM_ENVS = 3
TOLERANCE = {"mujoco": dict(obs=1e-5, reward=1e-5), "mjwarp": dict(obs=1e-2, reward=1e-3)}
# HumanoidStandup lies on the floor, on many frictionless contacts at once, where the solver's
# stopping point moves the contact forces most: its cfrc_ext entries differed by up to 5% of
# 1 + |value| in 800 probed steps (median 5e-4; with MuJoCo C also stopping at 1e-6, 1.2% and 4e-5).
TASK_TOLERANCE = {("HumanoidStandup", "mjwarp"): dict(obs=0.1, reward=1e-3)}
# Gymnasium's info entries that pql leaves out (docs/tasks.md): the Humanoids' raw tendon state.
INFO_LEFT_OUT = {"tendon_length", "tendon_velocity"}


def match_mjwarp_physics(model: mujoco.MjModel) -> mujoco.MjModel:
    """The solver options both engines share in the mjwarp comparison (see the module docstring)."""
    model.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    model.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    return model


def make_env(name, backend):
    if backend == "mujoco":
        return tasks.make(name, NUM_ENVS, "cpu", seed=0, backend="mujoco")
    from tasks.mujoco.physics_mjwarp import MjwarpPhysics

    model = match_mjwarp_physics(load_asset(TASKS[name].xml))
    return MujocoEnv(TASKS[name], NUM_ENVS, torch.device("cpu"), 0, MjwarpPhysics, model=model)


def gym_state(gyms):
    qpos = torch.tensor(np.stack([g.unwrapped.data.qpos for g in gyms]))
    qvel = torch.tensor(np.stack([g.unwrapped.data.qvel for g in gyms]))
    return qpos, qvel


def assert_close(actual: torch.Tensor, expected: np.ndarray, tolerance: float, what: str, step: int):
    expected = torch.as_tensor(expected, dtype=torch.float64)
    error = (actual.double() - expected).abs() / (1 + expected.abs())
    assert error.max() <= tolerance, (
        f"{what} differs from Gymnasium at step {step}: relative error {error.max():.2e} "
        f"at {np.unravel_index(int(error.argmax()), tuple(error.shape))}"
    )


@pytest.mark.parametrize("backend", ["mujoco", "mjwarp"])
@pytest.mark.parametrize("name", GYMNASIUM_TASKS)
def test_matches_gymnasium(name, backend):
    tol = TASK_TOLERANCE.get((name, backend), TOLERANCE[backend])
    env = make_env(name, backend)
    gyms = [gymnasium.make(f"{name}-v5") for _ in range(NUM_ENVS)]
    if backend == "mjwarp":
        for g in gyms:
            match_mjwarp_physics(g.unwrapped.model)
    first_obs = np.stack([g.reset(seed=i)[0] for i, g in enumerate(gyms)])
    assert_close(env.reset_to(*gym_state(gyms)), first_obs, tol["obs"], "first observation", 0)
    rng = np.random.default_rng(0)
    low, high = env.action_low.numpy(), env.action_high.numpy()
    episodes_ended = 0
    for step in range(STEPS):
        if backend == "mjwarp":
            for g in gyms:  # mj_forward, so that both start the step from fresh kinematics
                g.unwrapped.set_state(g.unwrapped.data.qpos.copy(), g.unwrapped.data.qvel.copy())
            env.reset_to(*gym_state(gyms))
        actions = rng.uniform(low, high, (NUM_ENVS, env.act_dim)).astype(np.float32)
        results = [g.step(a) for g, a in zip(gyms, actions)]
        _, reward, terminated, truncated, info = env.step(torch.from_numpy(actions))
        assert_close(info["final_obs"], np.stack([r[0] for r in results]), tol["obs"], "observation", step)
        assert_close(reward, np.array([r[1] for r in results]), tol["reward"], "reward", step)
        assert terminated.tolist() == [r[2] for r in results], f"terminated differs at step {step}"
        gym_info = [r[4] for r in results]
        assert set(info) - {"final_obs"} == set(gym_info[0]) - INFO_LEFT_OUT
        for key in set(info) - {"final_obs"}:
            assert_close(
                info[key], np.array([i[key] for i in gym_info], dtype=np.float64), tol["reward"], f"info[{key!r}]", step
            )
        if backend == "mujoco":  # on mjwarp every step began with reset_to, which restarts pql's step count
            assert truncated.tolist() == [r[3] for r in results], f"truncated differs at step {step}"
        ended = np.array([r[2] or r[3] for r in results])
        if ended.any():
            episodes_ended += int(ended.sum())
            for i in np.flatnonzero(ended):
                gyms[i].reset(seed=1000 + NUM_ENVS * step + int(i))
            obs = env.reset_to(*gym_state(gyms), mask=torch.from_numpy(ended))
            assert_close(
                obs[ended],
                np.stack([g.unwrapped._get_obs() for g in gyms])[ended],
                tol["obs"],
                "observation after a reset",
                step,
            )
    env.close()
    if name in ("InvertedPendulum", "Hopper", "Walker2d", "InvertedDoublePendulum"):
        assert episodes_ended > 0, "random actions were expected to end some episodes"


def test_half_cheetah_gets_gymnasiums_total_mass_without_the_deprecated_attribute(capfd):
    """The copy leaves out `settotalmass`, which MuJoCo 4 warns about on every load; the mass set
    on the compiled model instead must give the model Gymnasium's XML compiles to, to the bit."""
    path = os.path.join(ASSETS, HalfCheetah.xml)
    with open(path) as f:
        xml = f.read()
    assert re.search(r"<compiler[^>]*settotalmass", xml) is None
    ours = load_asset(HalfCheetah.xml)
    assert "settotalmass" not in capfd.readouterr().err
    theirs = mujoco.MjModel.from_xml_string(
        xml.replace('inertiafromgeom="true"/>', 'inertiafromgeom="true" settotalmass="14"/>')
    )
    assert ours.body_mass.sum() == pytest.approx(14.0)
    arrays = [name for name in dir(ours) if isinstance(getattr(ours, name, None), np.ndarray)]
    assert "body_inertia" in arrays and "dof_invweight0" in arrays
    for name in arrays:
        np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name), err_msg=name)
