"""The bridge from pql's config and normalised action box to a task's batched env."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tasks.base import Mirror


def build_env(task_cfg, num_envs: int, device, seed: int):
    """A batched env from tasks/ for this config (task_cfg: TaskConfig)."""
    import tasks

    return tasks.make(
        task_cfg.name,
        num_envs=num_envs,
        device=device,
        seed=seed,
        backend=task_cfg.backend,
        kwargs=task_cfg.kwargs,
        import_module=task_cfg.import_module,
        policy_group=task_cfg.policy_group,
        critic_group=task_cfg.critic_group,
        vectorization=task_cfg.vectorization,
        action_repeat=task_cfg.action_repeat,
    )


def to_env_action(action: torch.Tensor, env) -> torch.Tensor:
    """Map actions in [-1, 1]^act_dim onto the env's box [low, high]. action: [N, act_dim]."""
    low, high = env.action_low, env.action_high
    return low + (action + 1.0) * 0.5 * (high - low)


@dataclass(frozen=True)
class ObsLayout:
    """Which columns of an env's observations the policy and the critic read (tasks/base.py:
    critic_obs_dim). What stores observations (the replay, the n-step window, the rollouts) and
    normalises them keeps all `width` columns; the policy reads the first `policy_dim`, the critic
    `critic_columns` = (start, stop): the env's critic columns where it offers them and the run
    lets it read them (task.privileged_critic), else the policy's."""

    width: int
    policy_dim: int
    critic_columns: tuple[int, int]
    # How the columns, and the actions, mirror (the env's symmetry): not part of the layout's
    # identity, which the actor checks its envs against.
    mirror: Mirror | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, env, privileged: bool) -> ObsLayout:
        """The layout of `env`'s observations: its critic columns read only where `privileged`."""
        policy = env.obs_dim - env.critic_obs_dim
        critic = (policy, env.obs_dim) if privileged and env.critic_obs_dim else (0, policy)
        return cls(env.obs_dim, policy, critic, env.mirror)

    @classmethod
    def shared(cls, obs_dim: int) -> ObsLayout:
        """Observations that the policy and the critic both read whole."""
        return cls(obs_dim, obs_dim, (0, obs_dim))

    @property
    def critic_dim(self) -> int:
        return self.critic_columns[1] - self.critic_columns[0]

    @property
    def privileged(self) -> bool:
        """Whether the critic reads columns the policy does not."""
        return self.critic_columns != (0, self.policy_dim)

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy's columns of obs [..., width] (obs itself where they are all of it)."""
        return obs if self.policy_dim == self.width else obs[..., : self.policy_dim]

    def critic(self, obs: torch.Tensor) -> torch.Tensor:
        """The critic's columns of obs [..., width] (obs itself where they are all of it)."""
        start, stop = self.critic_columns
        return obs if (start, stop) == (0, self.width) else obs[..., start:stop]

    def split(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A replay batch (pql.algos.rules.Batch) with its stored observations [B, width] (obs,
        next_obs, next_obs1) given as the policy's, under those names, and the critic's, under
        CRITIC_OBS's."""
        split = dict(batch)
        for key, critic_key in CRITIC_OBS.items():
            if key in batch:
                split[key], split[critic_key] = self.policy(batch[key]), self.critic(batch[key])
        return split

    def split_rollout(self, rollout: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A rollout (pql.algos.rules.OnPolicyRules.update) with its stored observations
        [T, N, width] given as the policy's obs, and the critic's critic_obs and final_critic_obs
        (final_obs is read by the critic only)."""
        split = {k: v for k, v in rollout.items() if k != "final_obs"}
        split["obs"], split["critic_obs"] = self.policy(rollout["obs"]), self.critic(rollout["obs"])
        split["final_critic_obs"] = self.critic(rollout["final_obs"])
        return split


# The critic's observations of each state a replay batch holds, by the name of the policy's.
CRITIC_OBS = {"obs": "critic_obs", "next_obs": "next_critic_obs", "next_obs1": "next_critic_obs1"}
