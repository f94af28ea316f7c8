"""Parity with dm_control's own environments, for every dmc/ task (tasks/dmc/).

Each world is put into the state a dm_control environment reset to (and given its targets), both
get the same random actions, and observations and rewards are compared step by step.

* mujoco backend: one MjData per world stepped as dm_control steps it, so trajectories match
  dm_control's to rounding; the worlds are put back onto dm_control's state every
  `RESYNC` steps all the same, since a start made by pql's reset has no solver warm start where
  dm_control's has one (cheetah settles for 200 steps) and contacts grow such differences. The
  tolerance is 1e-5 relative to 1 + |value| (the float32 cast of what pql returns).
* mjwarp backend (Warp's CPU device): float32 physics and MuJoCo Warp's solver, so both sides run
  the models with elliptic cones and Newton, the worlds are put back onto dm_control's state
  before every step, and the tolerance is that of the Gymnasium tasks' mjwarp parity
  (tests/test_tasks_parity.py, which says why).

Random starts are dm_control's own by construction (tasks/dmc/suite.py); the test of their
statistics is tests/test_dmc_statistics.py.
"""

import numpy as np
import pytest
import torch
from conftest import refused_on_mjwarp

import tasks
from tasks import DMC_TASK_NAMES
from tasks.dmc import DMC_TASKS
from tasks.mujoco.env import MujocoEnv
from tasks.mujoco.physics_mjwarp import MjwarpPhysics
from tests.test_tasks_parity import match_mjwarp_physics

STEPS = 12
NUM_ENVS = 2
RESYNC = 4
TOLERANCE = {"mujoco": dict(obs=1e-5, reward=1e-5), "mjwarp": dict(obs=1e-2, reward=1e-3)}


def flat(observation) -> np.ndarray:
    """dm_control's observation flattened as pql's: its keys in their order."""
    return np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in observation.values()])


def sync(env, suites, mask=None) -> torch.Tensor:
    """Put env's worlds (where mask) into the dm_control environments' states, targets included."""
    for i, s in enumerate(suites):
        for key, value in env.task.episode_values(s.physics).items():
            env.task.values[key][i] = torch.as_tensor(value)
    qpos = torch.tensor(np.stack([s.physics.data.qpos for s in suites]))
    qvel = torch.tensor(np.stack([s.physics.data.qvel for s in suites]))
    act = torch.tensor(np.stack([s.physics.data.act for s in suites]))
    return env.reset_to(qpos, qvel, mask, act)


def assert_close(actual: torch.Tensor, expected: np.ndarray, tolerance: float, what: str, step: int):
    expected_t = torch.as_tensor(expected, dtype=torch.float64)
    assert actual.shape == expected_t.shape, f"{what}: shape {tuple(actual.shape)}, dm_control's {expected.shape}"
    error = (actual.double() - expected_t).abs() / (1 + expected_t.abs())
    assert error.max() <= tolerance, (
        f"{what} differs from dm_control at step {step}: relative error {error.max():.2e} "
        f"at {np.unravel_index(int(error.argmax()), tuple(error.shape))}"
    )


def make_env(name: str, backend: str):
    if backend == "mujoco":
        return tasks.make(name, NUM_ENVS, "cpu", seed=0, backend="mujoco")
    model = match_mjwarp_physics(DMC_TASKS[name].load_model())
    return MujocoEnv(DMC_TASKS[name], NUM_ENVS, torch.device("cpu"), 0, MjwarpPhysics, model=model)


@pytest.mark.parametrize("backend", ["mujoco", "mjwarp"])
@pytest.mark.parametrize("name", DMC_TASK_NAMES)
def test_matches_dm_control(name, backend):
    if backend == "mjwarp" and refused_on_mjwarp(DMC_TASKS[name].load_model(), lambda: make_env(name, backend)):
        return
    compare(name, backend, STEPS)


def test_acceleration_sensors_match_on_mjwarp_after_contact():
    """finger's touch sensors (acceleration stage, observed after dm_control's mj_step1): the
    random actions press the finger onto the spinner within 40 steps, and mjwarp's observations
    keep matching (MuJoCo Warp's step1 clears them where MuJoCo C's keeps them)."""
    observations = compare("dmc/finger-spin", "mjwarp", 40)
    touch = observations[:, :, 6:8]  # after position (4) and velocity (3): the two touch sensors
    assert (touch > 0).any(), "no contact in the run: the test checks nothing"


def compare(name: str, backend: str, steps: int) -> np.ndarray:
    """Step pql's env and dm_control's side by side for `steps` random actions, asserting equal
    observations and rewards; -> dm_control's observations [steps, NUM_ENVS, obs_dim]."""
    tol = TOLERANCE[backend]
    env = make_env(name, backend)
    suites = [DMC_TASKS[name].load_suite() for _ in range(NUM_ENVS)]
    for i, s in enumerate(suites):
        s.task._random = np.random.RandomState(100 + i)
        if backend == "mjwarp":
            match_mjwarp_physics(s.physics.model.ptr)
    first = np.stack([flat(s.reset().observation) for s in suites])
    assert_close(sync(env, suites), first, tol["obs"], "first observation", 0)
    rng = np.random.default_rng(0)
    low, high = env.action_low.numpy(), env.action_high.numpy()
    seen = []
    for step in range(steps):
        if backend == "mjwarp" or (step > 0 and step % RESYNC == 0):
            for s in suites:  # the forward that ends dm_control's reset, as pql's reset_to ends
                s.physics.after_reset()
            sync(env, suites)
        actions = rng.uniform(low, high, (NUM_ENVS, env.act_dim)).astype(np.float32)
        results = [s.step(a.astype(np.float64)) for s, a in zip(suites, actions)]
        _, reward, terminated, truncated, info = env.step(torch.from_numpy(actions))
        expected = np.stack([flat(r.observation) for r in results])
        assert_close(info["final_obs"], expected, tol["obs"], "observation", step)
        assert_close(reward, np.array([r.reward for r in results]), tol["reward"], "reward", step)
        assert not terminated.any() and not truncated.any()
        seen.append(expected)
    env.close()
    return np.stack(seen)
