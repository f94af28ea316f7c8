"""PQL's update rules (Li et al., 2023): clipped double-Q critic with TD3 target smoothing on
n-step targets, and a deterministic policy that maximises min(Q1, Q2)."""

from __future__ import annotations

import torch
from torch import nn

from pql.algos.common import greedy_target, smoothed_target_action
from pql.algos.exploration import noise_stds
from pql.nets import DeterministicActor, DoubleQ


class PQL:
    """Update rules for the three roles. Observations given to these methods are normalised.

    The contract every off-policy algorithm keeps: make_policy, make_critic, exploration_noise,
    explore (actor); critic_loss, critic_optim_params (V-learner); policy_loss,
    policy_optim_params (P-learner); td_error (Ape-X priorities in the actor).
    """

    def __init__(self, cfg, obs_dim: int, act_dim: int):
        self.cfg, self.obs_dim, self.act_dim = cfg, obs_dim, act_dim

    def make_policy(self) -> nn.Module:
        return DeterministicActor(
            self.obs_dim, self.act_dim, self.cfg.net.actor_hidden, activation=self.cfg.net.activation
        )

    def make_critic(self) -> nn.Module:
        return DoubleQ(
            self.obs_dim,
            self.act_dim,
            self.cfg.net.critic_hidden,
            layer_norm=self.cfg.net.critic_layer_norm,
            activation=self.cfg.net.activation,
        )

    def exploration_noise(self, num_envs: int, device) -> torch.Tensor:
        """Each env's noise std (algo.exploration: mixed or ape_x). -> [N, 1]."""
        return noise_stds(self.cfg, num_envs, device)

    @torch.no_grad()
    def explore(self, policy: nn.Module, obs: torch.Tensor, noise_std: torch.Tensor) -> torch.Tensor:
        """Mixed exploration: a = clip(π(s) + σ_i·ε, −1, 1) with σ_i per env. noise_std: [N, 1]."""
        action = policy(obs)
        return (action + noise_std * torch.randn_like(action)).clamp(-1.0, 1.0)

    @torch.no_grad()
    def td_target(self, batch: dict, target_critic: nn.Module, policy: nn.Module) -> torch.Tensor:
        """y = R⁽ⁿ⁾ + γ_b · min_j Q'_j(s', ã'), with γ_b = γ^m (0 after a termination); the larger of
        it and the one-step target where the batch carries first steps (greedy_target). -> [B]."""

        def bootstrap(next_obs):
            next_action = smoothed_target_action(policy, next_obs, self.cfg.target_noise, self.cfg.target_noise_clip)
            return torch.min(*target_critic(next_obs, next_action)).squeeze(-1)

        return greedy_target(batch, bootstrap)

    def critic_loss(
        self, critic: nn.Module, target_critic: nn.Module, policy: nn.Module, batch: dict, weights: torch.Tensor
    ):
        """-> (loss, |δ| [B] for priorities, scalars to log). weights: importance weights [B]."""
        target = self.td_target(batch, target_critic, policy)
        q1, q2 = critic(batch["obs"], batch["action"])
        q1, q2 = q1.squeeze(-1), q2.squeeze(-1)
        loss = (weights * ((q1 - target).pow(2) + (q2 - target).pow(2))).mean()
        td_abs = (torch.min(q1, q2) - target).detach().abs()
        return loss, td_abs, {"critic/loss": loss.detach(), "critic/q": q1.detach().mean()}

    @torch.no_grad()
    def td_error(self, critic: nn.Module, target_critic: nn.Module, policy: nn.Module, batch: dict) -> torch.Tensor:
        """|min_j Q_j(s, a) − y| [B], the TD error critic_loss reports, without a loss."""
        q1, q2 = critic(batch["obs"], batch["action"])
        return (torch.min(q1, q2).squeeze(-1) - self.td_target(batch, target_critic, policy)).abs()

    def critic_optim_params(self, critic: nn.Module):
        return [{"params": critic.parameters(), "lr": self.cfg.critic_lr}]

    def policy_loss(self, policy: nn.Module, critic: nn.Module, obs: torch.Tensor):
        """Maximise min(Q1, Q2)(s, π(s)). -> (loss, scalars to log)."""
        q1, q2 = critic(obs, policy(obs))
        loss = -torch.min(q1, q2).mean()
        return loss, {"policy/loss": loss.detach()}

    def policy_optim_params(self, policy: nn.Module):
        return [{"params": policy.parameters(), "lr": self.cfg.actor_lr}]
