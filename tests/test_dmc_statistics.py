"""pql's dmc/ tasks against dm_control's as black boxes: the same random-action statistics.

The parity test (tests/test_dmc_parity.py) puts pql's worlds into dm_control's states; this one
lets each side start where its own reset puts it (pql: dm_control's initialize_episode on the
host, seeded per env and episode, carried into the batched physics), steps both with uniform
random actions and compares the mean reward and each observation entry's mean. Each env's mean
over its episode is one sample, so the test allows several standard errors of the difference of
two means: it catches a start that is not carried over (a target left at the origin, every env
at one start), not a subtle bias. Six standard errors of 16 samples a side: dog's 200-odd
observation entries at 5 of 8 a side failed by chance (5.2 at one entry).
"""

import numpy as np
import pytest
import torch

import tasks
from tasks import DMC_TASK_NAMES
from tasks.dmc import DMC_TASKS
from tests.test_dmc_parity import flat

NUM_ENVS = 16
STEPS = 40
STANDARD_ERRORS = 6.0


def pql_means(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Per env: mean reward [N] and mean observation [N, obs_dim] over STEPS random-action steps."""
    env = tasks.make(name, NUM_ENVS, "cpu", seed=7, backend="mujoco")
    generator = torch.Generator().manual_seed(0)
    low, high = env.action_low, env.action_high
    obs, rewards = [env.reset()], []
    for _ in range(STEPS):
        action = low + (high - low) * torch.rand(NUM_ENVS, env.act_dim, generator=generator)
        o, r, *_ = env.step(action)
        obs.append(o)
        rewards.append(r)
    env.close()
    return torch.stack(rewards).mean(0).double().numpy(), torch.stack(obs).mean(0).double().numpy()


def dm_control_means(name: str) -> tuple[np.ndarray, np.ndarray]:
    rewards, obs = [], []
    rng = np.random.default_rng(0)
    env = DMC_TASKS[name].load_suite()
    spec = env.action_spec()
    for i in range(NUM_ENVS):
        env.task._random = np.random.RandomState(1000 + i)
        episode_obs, episode_rewards = [flat(env.reset().observation)], []
        for _ in range(STEPS):
            step = env.step(rng.uniform(spec.minimum, spec.maximum))
            episode_obs.append(flat(step.observation))
            episode_rewards.append(step.reward)
        rewards.append(np.mean(episode_rewards))
        obs.append(np.mean(episode_obs, axis=0))
    return np.array(rewards), np.stack(obs)


def assert_same_mean(ours: np.ndarray, theirs: np.ndarray, what: str) -> None:
    """ours, theirs: [samples, ...]; each entry's means agree within STANDARD_ERRORS."""
    spread = np.sqrt(ours.var(0, ddof=1) / len(ours) + theirs.var(0, ddof=1) / len(theirs))
    gap = np.abs(ours.mean(0) - theirs.mean(0))
    bad = gap > STANDARD_ERRORS * spread + 1e-6 * (1 + np.abs(theirs.mean(0)))
    assert not bad.any(), (
        f"{what}: means differ at {np.flatnonzero(bad).tolist()}: pql {ours.mean(0)[bad]}, "
        f"dm_control {theirs.mean(0)[bad]} (allowed {STANDARD_ERRORS} x {spread[bad]})"
    )


@pytest.mark.parametrize("name", DMC_TASK_NAMES)
def test_random_action_statistics_match_dm_control(name):
    our_rewards, our_obs = pql_means(name)
    their_rewards, their_obs = dm_control_means(name)
    assert our_obs.shape[1] == their_obs.shape[1]
    assert_same_mean(our_rewards, their_rewards, "reward")
    assert_same_mean(our_obs, their_obs, "observation")
    # Distinct starts: the envs do not all begin from one state.
    assert np.unique(our_obs.round(9), axis=0).shape[0] == NUM_ENVS


@pytest.mark.parametrize("name", DMC_TASK_NAMES)
def test_starts_are_dm_controls_for_the_same_key(name):
    """Env i's k-th random start is what dm_control's reset gives with RandomState([seed, i, k]):
    its positions, velocities, actuator states (dog's) and targets, as the first observation shows."""
    seed = 11
    env = tasks.make(name, 3, "cpu", seed=seed, backend="mujoco")
    obs = env.reset().double()
    episodes = env.state_dict()["task_state"]["episodes"].tolist()
    suite = DMC_TASKS[name].load_suite()
    for i, k in enumerate(episodes):
        suite.task._random = np.random.RandomState([seed, i, k])
        expected = torch.from_numpy(flat(suite.reset().observation))
        torch.testing.assert_close(obs[i], expected, rtol=1e-5, atol=1e-5)
