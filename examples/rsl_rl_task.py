"""One of pql's tasks behind rsl_rl's VecEnv interface, as Isaac Lab, mjlab and Genesis present
their envs: `python train.py task=examples.rsl_rl_task:make_env task.kwargs.task=InvertedPendulum`.

What rsl_rl's interface keeps and drops, as those wrappers do: observations in a TensorDict
whose "policy" group the policy sees, one `dones` flag per env with `extras["time_outs"]` marking
the step limit, the envs reset inside `step`, and no final observation unless `final_obs=True`
puts it in `extras["final_obs"]` (Isaac Lab's compute_final_obs). tests/test_rsl_rl_env.py trains
through it; bench/final_obs.py measures what hiding the final observation costs.
"""

import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

import tasks


class PqlTaskAsVecEnv(VecEnv):
    def __init__(self, task: str, num_envs: int, device: str, seed: int, final_obs: bool):
        self.env = tasks.make(task, num_envs, device, seed, backend="mujoco")
        self.num_envs, self.num_actions, self.device = num_envs, self.env.act_dim, torch.device(device)
        self.max_episode_length = self.env.max_episode_steps
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.cfg = {"task": task}
        self.final_obs = final_obs
        self._obs = self.env.reset()

    def get_observations(self) -> TensorDict:
        return TensorDict({"policy": self._obs}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor):
        low, high = self.env.action_low, self.env.action_high  # the env's own action scale
        self._obs, reward, terminated, truncated, info = self.env.step(
            low + (actions.clamp(-1, 1) + 1) * 0.5 * (high - low)
        )
        dones = terminated | truncated
        self.episode_length_buf = torch.where(dones, 0, self.episode_length_buf + 1)
        extras = {"time_outs": truncated, "log": {}}
        if self.final_obs:
            extras["final_obs"] = TensorDict({"policy": info["final_obs"]}, batch_size=[self.num_envs])
        return self.get_observations(), reward, dones.long(), extras

    def close(self) -> None:
        self.env.close()


def make_env(num_envs: int, device: str, seed: int, task: str = "InvertedPendulum", final_obs: bool = False):
    return PqlTaskAsVecEnv(task, num_envs, device, seed, final_obs)
