"""PQL's update rules (Li et al., 2023): clipped double-Q critic with TD3 target smoothing on
n-step targets, and a deterministic policy that maximises min(Q1, Q2)."""

from __future__ import annotations

import torch
from torch import nn

from pql.algos.common import ClippedDoubleQ, greedy_target, smoothed_target_action
from pql.algos.exploration import noise_stds
from pql.algos.rules import Batch, OffPolicyRules, ParamGroups
from pql.nets import DeterministicActor


class PQL(ClippedDoubleQ[DeterministicActor], OffPolicyRules[DeterministicActor, torch.Tensor]):
    """Update rules for the three roles (their contract: pql.algos.rules.OffPolicyRules), with
    ClippedDoubleQ's critic. Observations given to these methods are normalised."""

    def make_policy(self) -> DeterministicActor:
        return DeterministicActor(
            self.obs_dim, self.act_dim, self.cfg.net.actor_hidden, activation=self.cfg.net.activation
        )

    def exploration_noise(self, num_envs: int, device: torch.device) -> torch.Tensor:
        """Each env's noise std (algo.exploration: mixed or ape_x). -> [N, 1]."""
        return noise_stds(self.cfg, num_envs, device)

    @torch.no_grad()
    def explore(self, policy: DeterministicActor, obs: torch.Tensor, noise_std: torch.Tensor) -> torch.Tensor:
        """Mixed exploration: a = clip(π(s) + σ_i·ε, −1, 1) with σ_i per env. noise_std: [N, 1]."""
        action = policy(obs)
        return (action + noise_std * torch.randn_like(action)).clamp(-1.0, 1.0)

    @torch.no_grad()
    def td_target(self, batch: Batch, target_critic: nn.Module, policy: DeterministicActor) -> torch.Tensor:
        """y = R⁽ⁿ⁾ + γ_b · min_j Q'_j(s', ã'), with γ_b = γ^m (0 after a termination); the larger of
        it and the one-step target where the batch carries first steps (greedy_target). -> [B]."""

        def bootstrap(next_obs: torch.Tensor) -> torch.Tensor:
            next_action = smoothed_target_action(policy, next_obs, self.cfg.target_noise, self.cfg.target_noise_clip)
            return torch.min(*target_critic(next_obs, next_action)).squeeze(-1)

        return greedy_target(batch, bootstrap)

    def policy_loss(
        self, policy: DeterministicActor, critic: nn.Module, obs: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Maximise min(Q1, Q2)(s, π(s)). -> (loss, scalars to log)."""
        q1, q2 = critic(obs, policy(obs))
        loss = -torch.min(q1, q2).mean()
        return loss, {"policy/loss": loss.detach()}

    def policy_optim_params(self, policy: DeterministicActor) -> ParamGroups:
        return [{"params": policy.parameters(), "lr": self.cfg.actor_lr}]
