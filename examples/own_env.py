"""A batched env of your own, written in torch: `python train.py task=examples.own_env:make_env`.

A point mass on a plane is pushed towards a goal drawn at each episode's start. Everything is a
tensor of num_envs rows on `device`, so the same code steps 16 envs on a CPU or 16,384 on a GPU.
docs/own_env.md explains each part of the protocol this follows (tasks/base.py), the optional
ones too: observations of the critic's own (`task.kwargs.privileged=true`) and checkpoints.
"""

import torch

from tasks.base import BatchedEnv, check_state_fits


class PointMass(BatchedEnv):
    obs_dim, act_dim, max_episode_steps = 6, 2, 100  # obs: position, velocity, goal

    def __init__(self, num_envs: int, device: str, seed: int, arena: float = 1.0, privileged: bool = False):
        self.num_envs, self.device, self.arena = num_envs, torch.device(device), arena
        # privileged: the critic reads a group of its own, after the policy's: the policy's
        # observations and the share of the episode left, which the policy does without.
        self.critic_obs_dim = 7 if privileged else 0
        self.obs_dim = 6 + self.critic_obs_dim
        self.action_low = -torch.ones(2, device=self.device)  # pql scales its [-1, 1] onto these
        self.action_high = torch.ones(2, device=self.device)
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.pos, self.vel, self.goal = (torch.zeros(num_envs, 2, device=self.device) for _ in range(3))
        self.steps = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def _draw(self, n: int) -> torch.Tensor:
        return (torch.rand(n, 2, generator=self.generator, device=self.device) * 2 - 1) * self.arena

    def _start(self, envs: torch.Tensor) -> None:
        """New episodes in the envs where `envs` [N] bool is true."""
        n = self.num_envs
        self.pos = torch.where(envs[:, None], self._draw(n), self.pos)
        self.goal = torch.where(envs[:, None], self._draw(n), self.goal)
        self.vel = torch.where(envs[:, None], 0.0, self.vel)
        self.steps = torch.where(envs, 0, self.steps)

    def _obs(self) -> torch.Tensor:
        policy = torch.cat([self.pos, self.vel, self.goal], dim=1)
        if not self.critic_obs_dim:
            return policy
        left = 1.0 - self.steps[:, None].float() / self.max_episode_steps
        return torch.cat([policy, policy, left], dim=1)

    def reset(self) -> torch.Tensor:
        self._start(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self._obs()

    def step(self, actions: torch.Tensor):
        self.vel = 0.9 * self.vel + 0.1 * actions.clamp(-1, 1)
        self.pos = self.pos + 0.1 * self.vel
        self.steps += 1
        reward = -torch.linalg.vector_norm(self.pos - self.goal, dim=1)
        terminated = self.pos.abs().amax(dim=1) > 2 * self.arena  # left the arena: the episode ends
        truncated = (self.steps >= self.max_episode_steps) & ~terminated  # cut by the step limit
        reward = torch.where(terminated, reward - 10.0, reward)
        final_obs = self._obs()  # what ended each episode: a truncated one bootstraps from it
        self._start(terminated | truncated)
        return self._obs(), reward, terminated, truncated, {"final_obs": final_obs}

    def state_dict(self) -> dict:
        """Where the episodes stand, so that a resumed run continues them."""
        state = {name: getattr(self, name).to("cpu", copy=True) for name in ("pos", "vel", "goal", "steps")}
        return {"num_envs": self.num_envs, "obs_dim": self.obs_dim, **state, "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        check_state_fits(state, self.state_dict())  # refuses another size or layout before changing anything
        for name in ("pos", "vel", "goal", "steps"):
            setattr(self, name, state[name].to(self.device))
        self.generator.set_state(state["generator"])


def make_env(num_envs: int, device: str, seed: int, arena: float = 1.0, privileged: bool = False) -> PointMass:
    """The factory pql calls: task.kwargs.<name>=<value> on the command line become its keyword arguments."""
    return PointMass(num_envs, device, seed, arena, privileged)
