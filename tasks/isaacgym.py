"""IsaacGymEnvs tasks behind the batched-env protocol: `tasks.make("isaacgym/Ant", ...)`.

An IsaacGymEnvs VecTask keeps its results in buffers: `step(actions)` returns
`({"obs": obs_buf}, rew_buf, reset_buf, extras)`, with `extras["time_outs"]` marking the envs whose
episode hit the step limit. The adapter maps reset_buf & time_outs to `truncated` and the rest of
reset_buf to `terminated`.

One difference from the MuJoCo tasks follows from Isaac Gym itself: a VecTask resets a finished
env at the start of its next step, so the observation returned with `terminated | truncated` is
the terminal one (`obs` equals `info["final_obs"]` there) and the new episode's first observation
comes one step later. Untested here: Isaac Gym cannot be installed on the CI machines; the tests
run the adapter against a VecTask-shaped stand-in.
"""
from __future__ import annotations

import torch

from .base import ActionCheck, BatchedEnv, TaskError

INSTALL_HINT = ("Isaac Gym is not installed: download Isaac Gym Preview 4 from NVIDIA, `pip install -e "
                "isaacgym/python`, then `pip install -e` a clone of IsaacGymEnvs, and import isaacgym before torch")


class IsaacGymEnv(BatchedEnv):
    """The protocol over an IsaacGymEnvs VecTask `vec_task`; tensors [N, ...] on the task's rl_device."""

    def __init__(self, vec_task):
        self.vec_task = vec_task
        self.num_envs = vec_task.num_envs
        self.device = torch.device(vec_task.rl_device)
        self.obs_dim = vec_task.num_obs
        self.act_dim = vec_task.num_actions
        self.max_episode_steps = int(vec_task.max_episode_length)
        space = vec_task.action_space
        self.action_low = torch.as_tensor(space.low, dtype=torch.float32, device=self.device)
        self.action_high = torch.as_tensor(space.high, dtype=torch.float32, device=self.device)
        self._check_actions = ActionCheck(self.num_envs, self.act_dim, self.device)

    def reset(self) -> torch.Tensor:
        return self.vec_task.reset()["obs"].float()

    def step(self, actions: torch.Tensor):
        self._check_actions(actions)
        obs_dict, reward, reset_buf, extras = self.vec_task.step(actions)
        obs = obs_dict["obs"].float()
        done = reset_buf.bool()
        time_outs = extras.get("time_outs")
        truncated = done & time_outs.bool() if time_outs is not None else torch.zeros_like(done)
        return obs, reward.float(), done & ~truncated, truncated, {"final_obs": obs}

    def close(self) -> None:
        if hasattr(self.vec_task, "close"):
            self.vec_task.close()


def make_isaacgym_env(task: str, num_envs: int, device: torch.device, seed: int) -> IsaacGymEnv:
    """IsaacGymEnvs' task `task` (e.g. "Ant"), headless, simulated and learned on `device`."""
    try:
        import isaacgym  # noqa: F401  (must precede torch's CUDA use; IsaacGymEnvs needs it loaded)
        import isaacgymenvs
    except ImportError as err:
        raise TaskError(f"task isaacgym/{task}: {INSTALL_HINT} ({err})") from None
    vec_task = isaacgymenvs.make(seed=seed, task=task, num_envs=num_envs, sim_device=str(device),
                                 rl_device=str(device), graphics_device_id=device.index or 0, headless=True)
    return IsaacGymEnv(vec_task)
