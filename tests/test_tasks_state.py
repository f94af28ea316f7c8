"""An env's saved state (BatchedEnv.state_dict) restored into a fresh env continues its episodes to
the bit, on both physics backends (MuJoCo Warp on Warp's CPU device), across episode ends and resets;
a state of another env is refused before anything changes."""

import io

import pytest
import torch

import tasks
from tasks.mujoco.ant import Ant
from tasks.mujoco.env import MujocoEnv
from tasks.mujoco.physics_mjwarp import MjwarpPhysics
from tasks.mujoco.physics_mujoco import MujocoPhysics

CPU = torch.device("cpu")
PHYSICS = {"mujoco": MujocoPhysics, "mjwarp": MjwarpPhysics}


class ShortAnt(Ant):
    """Ant with contacts and cfrc_ext whose episodes end within the test, by the step limit."""

    max_episode_steps = 25


class StaggeredAnt(Ant):
    """Ant whose episodes end at different steps in different envs (the limit alone ends them together)."""

    healthy_z_range = (0.45, 1.0)


TASKS = {"InvertedPendulum": tasks.TASKS["InvertedPendulum"], "ShortAnt": ShortAnt}


def make(name: str, backend: str, num_envs: int = 8) -> MujocoEnv:
    return MujocoEnv(TASKS[name], num_envs, CPU, 7, PHYSICS[backend])


def random_actions(env, steps: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    return [
        env.action_low + torch.rand((env.num_envs, env.act_dim), generator=gen) * (env.action_high - env.action_low)
        for _ in range(steps)
    ]


def round_trip(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("backend", ["mujoco", "mjwarp"])
@pytest.mark.parametrize("name", ["InvertedPendulum", "ShortAnt"])
def test_a_loaded_env_continues_its_episodes_exactly(name, backend):
    saved = make(name, backend)
    ended_before = torch.zeros(saved.num_envs, dtype=torch.bool)
    for actions in random_actions(saved, 30, seed=0):
        _, _, terminated, truncated, _ = saved.step(actions)
        ended_before |= terminated | truncated
    assert ended_before.any(), "no episode ended before the save: the reset-noise counters go untested"
    state = round_trip(saved.state_dict())

    loaded = make(name, backend)
    loaded.load_state_dict(state)
    for field, value in saved.physics.state.items():
        assert torch.equal(loaded.physics.state[field], value), field
    ended_after = 0
    for t, actions in enumerate(random_actions(saved, 40, seed=1)):
        expected, got = saved.step(actions), loaded.step(actions)
        for what, a, b in zip(("obs", "reward", "terminated", "truncated"), expected, got):
            assert torch.equal(a, b), f"{what} differs at step {t} after the load"
        assert expected[4].keys() == got[4].keys()
        for key in expected[4]:
            assert torch.equal(expected[4][key], got[4][key]), f"info[{key!r}] differs at step {t} after the load"
        ended_after += int((expected[2] | expected[3]).sum())
    assert ended_after > 0


@pytest.mark.parametrize("backend", ["mujoco", "mjwarp"])
def test_staggered_episodes_of_ant_continue_exactly(backend):
    """Episodes that end at different steps (fallen Ants) between the save and the checks."""
    env = MujocoEnv(StaggeredAnt, 8, CPU, 3, PHYSICS[backend])
    for actions in random_actions(env, 10, seed=2):
        env.step(actions)
    state = round_trip(env.state_dict())
    loaded = MujocoEnv(StaggeredAnt, 8, CPU, 3, PHYSICS[backend])
    loaded.load_state_dict(state)
    ends = []
    for actions in random_actions(env, 40, seed=3):
        expected, got = env.step(actions), loaded.step(actions)
        for a, b in zip(expected[:4], got[:4]):
            assert torch.equal(a, b)
        assert torch.equal(expected[4]["final_obs"], got[4]["final_obs"])
        ends.append(expected[2])
    assert torch.stack(ends).any(dim=0).sum() >= 2  # several envs ended, not all at one step


@pytest.mark.parametrize(
    "other, message",
    [
        (dict(name="InvertedPendulum"), "its task is 'InvertedPendulum' where this env has 'ShortAnt'"),
        (dict(num_envs=4), "its num_envs is 4 where this env has 8"),
        (dict(backend="mjwarp"), "its backend is 'mjwarp' where this env has 'mujoco'"),
    ],
)
def test_a_state_of_another_env_is_refused_before_anything_changes(other, message):
    source = make(**{"name": "ShortAnt", "backend": "mujoco", **other})
    env = make("ShortAnt", "mujoco")
    for actions in random_actions(env, 3, seed=0):
        env.step(actions)
    before = env.state_dict()
    with pytest.raises(ValueError, match=message):
        env.load_state_dict(source.state_dict())
    after = env.state_dict()
    assert torch.equal(after["physics"]["integration"], before["physics"]["integration"])
    assert torch.equal(after["elapsed"], before["elapsed"])


def test_a_state_of_another_seed_or_layout_is_refused():
    env = make("ShortAnt", "mujoco")
    state = env.state_dict()
    with pytest.raises(ValueError, match="its seed is 8 where this env has 7"):
        env.load_state_dict({**state, "seed": 8})
    with pytest.raises(ValueError, match=r"its layout\.nq is 16 where this env has 15"):
        env.load_state_dict({**state, "layout": {**state["layout"], "nq": 16}})
    with pytest.raises(ValueError, match=r"its physics\.integration is \(8, 10\) torch.float64 where this env expects"):
        env.load_state_dict({**state, "physics": {**state["physics"], "integration": torch.zeros(8, 10).double()}})
