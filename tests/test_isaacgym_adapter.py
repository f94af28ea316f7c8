"""The Isaac Gym adapter against a minimal VecTask-shaped stand-in (Isaac Gym cannot be installed here)."""
import types

import numpy as np
import pytest
import torch

from tasks import TaskError
from tasks.isaacgym import IsaacGymEnv


class FakeVecTask:
    """IsaacGymEnvs' VecTask surface: buffers, a Box action space, step -> (obs_dict, rew, reset, extras).

    Env i's episode lasts i + 2 steps; env 0 "falls" (reset without time-out), the others time out.
    """

    def __init__(self, num_envs=3, num_obs=5, num_actions=2, max_episode_length=4):
        self.num_envs, self.num_obs, self.num_actions = num_envs, num_obs, num_actions
        self.max_episode_length = max_episode_length
        self.rl_device = "cpu"
        self.action_space = types.SimpleNamespace(low=-np.ones(num_actions, np.float32),
                                                  high=np.ones(num_actions, np.float32))
        self.obs_buf = torch.zeros(num_envs, num_obs)
        self.rew_buf = torch.zeros(num_envs)
        self.reset_buf = torch.zeros(num_envs, dtype=torch.long)
        self.progress_buf = torch.zeros(num_envs, dtype=torch.long)
        self.closed = False

    def reset(self):
        return {"obs": self.obs_buf}

    def step(self, actions):
        self.progress_buf[self.reset_buf.bool()] = 0  # VecTask resets finished envs on the next step
        self.progress_buf += 1
        self.obs_buf = self.progress_buf[:, None].float().expand(-1, self.num_obs) + actions.sum(1, keepdim=True)
        self.rew_buf = torch.ones(self.num_envs)
        limit = torch.arange(self.num_envs) + 2
        self.reset_buf = (self.progress_buf >= limit).long()
        time_outs = self.reset_buf.bool() & (torch.arange(self.num_envs) > 0)
        return {"obs": self.obs_buf}, self.rew_buf, self.reset_buf, {"time_outs": time_outs}

    def close(self):
        self.closed = True


def test_properties_follow_the_vec_task():
    env = IsaacGymEnv(FakeVecTask())
    assert (env.num_envs, env.obs_dim, env.act_dim, env.max_episode_steps) == (3, 5, 2, 4)
    assert env.device == torch.device("cpu")
    assert torch.equal(env.action_low, -torch.ones(2)) and env.action_high.dtype == torch.float32
    assert env.reset().shape == (3, 5)


def test_reset_buf_and_time_outs_become_terminated_and_truncated():
    env = IsaacGymEnv(FakeVecTask())
    env.reset()
    seen = []
    for _ in range(4):
        obs, reward, terminated, truncated, info = env.step(torch.zeros(3, 2))
        assert obs.shape == (3, 5) and reward.dtype == torch.float32
        assert not (terminated & truncated).any()
        assert torch.equal(info["final_obs"], obs)
        seen.append((terminated.tolist(), truncated.tolist()))
    assert seen[0] == ([False, False, False], [False, False, False])
    assert seen[1] == ([True, False, False], [False, False, False])  # env 0 fell after 2 steps
    assert seen[2] == ([False, False, False], [False, True, False])  # env 1 timed out after 3
    assert seen[3] == ([True, False, False], [False, False, True])   # env 0 again, env 2 timed out


def test_actions_are_checked_and_close_reaches_the_task():
    vec_task = FakeVecTask()
    env = IsaacGymEnv(vec_task)
    with pytest.raises(TaskError, match="shape"):
        env.step(torch.zeros(3, 3))
    bad = torch.zeros(3, 2)
    bad[2, 0] = float("nan")
    with pytest.raises(TaskError, match=r"indices \[2\]"):
        env.step(bad)
    env.close()
    assert vec_task.closed
