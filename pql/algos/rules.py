"""What an algorithm's update rules provide to the runtime: `OffPolicyRules` for the three roles of
pql/runtime/off_policy (PQL, PQL-D, SAC), `OnPolicyRules` for the learner of pql/runtime/on_policy
(PPO, IMPALA). pql.config names each algorithm's rules class as "module:attribute"; the runtime
builds it as cls(cfg, obs_dim, act_dim, critic_obs_dim) (off-policy) or cls(cfg, obs_dim, act_dim,
device, average_gradients, critic_obs_dim) (on-policy), cfg being the algorithm's config, obs_dim
what the policy reads and critic_obs_dim what the critic reads (pql.envs.ObsLayout: more where
the env offers the critic observations of its own; None: the policy's).

Each rules class subclasses its Protocol, so mypy checks it where it is defined. Observations
given to the rules are normalised; actions lie in the box [-1, 1]^act_dim. B is a batch, N the
number of envs, T the steps of a rollout.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import torch
from torch import nn

from pql.nets import GaussianActor

PolicyT = TypeVar("PolicyT", bound=nn.Module)
NoiseT = TypeVar("NoiseT")

Batch = dict[str, torch.Tensor]
"""A replay batch: obs [B, obs_dim] and critic_obs [B, critic_obs_dim] (the policy's and the
critic's observations of one state), action [B, act_dim], reward [B] (the n-step return R⁽ⁿ⁾),
next_obs [B, obs_dim] and next_critic_obs [B, critic_obs_dim], discount [B] (γ^m, 0 after a
termination); with algo.greedy_nstep also reward1 [B], next_obs1 [B, obs_dim], next_critic_obs1
[B, critic_obs_dim], discount1 [B] of the first step."""

ParamGroups = list[dict[str, Any]]
"""Optimiser parameter groups: [{"params": parameters, "lr": float}, ...]."""


class OffPolicyRules(Protocol[PolicyT, NoiseT]):
    """The maths of an off-policy algorithm, called by the actor (make_policy, exploration_noise,
    explore; make_critic and td_error for Ape-X priorities with replay.actor_priorities), the
    V-learner (critic_loss, critic_optim_params) and the P-learner (policy_loss,
    policy_optim_params). Each role builds its own networks with make_policy and make_critic and
    hands them back: PolicyT is the policy's class, NoiseT what exploration_noise gives explore."""

    def make_policy(self) -> PolicyT:
        """An untrained policy π: obs [B, obs_dim] -> action [B, act_dim]."""
        ...

    def make_critic(self) -> nn.Module:
        """An untrained critic: (critic_obs [B, critic_obs_dim], action [B, act_dim]) -> its heads' outputs."""
        ...

    def exploration_noise(self, num_envs: int, device: torch.device) -> NoiseT:
        """The actor's per-env exploration state, made once and passed to every explore."""
        ...

    def explore(self, policy: PolicyT, obs: torch.Tensor, noise_std: NoiseT) -> torch.Tensor:
        """Behaviour actions. obs: [N, obs_dim] -> [N, act_dim] in [-1, 1]."""
        ...

    def critic_loss(
        self, critic: nn.Module, target_critic: nn.Module, policy: PolicyT, batch: Batch, weights: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """-> (loss, |TD error| [B] for the priorities, scalars to log). weights: importance weights [B]."""
        ...

    def td_error(self, critic: nn.Module, target_critic: nn.Module, policy: PolicyT, batch: Batch) -> torch.Tensor:
        """The |TD error| [B] critic_loss reports, without a loss."""
        ...

    def critic_optim_params(self, critic: nn.Module) -> ParamGroups: ...

    def policy_loss(
        self, policy: PolicyT, critic: nn.Module, obs: torch.Tensor, critic_obs: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """-> (loss, scalars to log). obs [B, obs_dim] and critic_obs [B, critic_obs_dim] of the same states."""
        ...

    def policy_optim_params(self, policy: PolicyT) -> ParamGroups: ...


class OnPolicyRules(Protocol):
    """The learner of an on-policy algorithm: its networks, its update and its training state."""

    policy: GaussianActor
    """π, which the rollouts sample (pql/runtime/on_policy/rollout.py) and the runner publishes."""

    critic: nn.Module
    """V: critic_obs [B, critic_obs_dim] -> [B]."""

    def update(self, traj: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One update on a rollout: obs [T, N, obs_dim] (the policy's), critic_obs and
        final_critic_obs [T, N, critic_obs_dim] (the critic's, of the same state and of the state
        the step ended in), action [T, N, act_dim], log_prob [T, N] of the behaviour policy, reward
        [T, N], terminated and truncated [T, N] bool. -> scalars to log (0-d tensors: reading one
        is a host sync)."""
        ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...
