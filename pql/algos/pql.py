"""PQL's update rules (Li et al., 2023): clipped double-Q critic with TD3 target smoothing on
n-step targets, and a deterministic policy that maximises min(Q1, Q2). The critic's heads are
algo.value's (scalar; categorical for PQL-D, Li et al.'s distributional variant)."""

from __future__ import annotations

import torch
from torch import nn

from pql.algos.common import ClippedDoubleQ, smoothed_target_action
from pql.algos.exploration import Noise, held_noise, noise_stds
from pql.algos.rules import OffPolicyRules, ParamGroups
from pql.nets import DeterministicActor


class PQL(ClippedDoubleQ[DeterministicActor], OffPolicyRules[DeterministicActor, Noise]):
    """Update rules for the three roles (their contract: pql.algos.rules.OffPolicyRules), with
    ClippedDoubleQ's critic. Observations given to these methods are normalised."""

    def make_policy(self) -> DeterministicActor:
        net = self.cfg.net
        return DeterministicActor(
            self.obs_dim,
            self.act_dim,
            net.actor_hidden,
            activation=net.activation,
            kind=net.kind,
            expansion=net.expansion,
        )

    def exploration_noise(self, num_envs: int, device: torch.device) -> Noise:
        """Each env's noise std (algo.exploration: mixed or ape_x), [N, 1], and its held draws."""
        return Noise(noise_stds(self.cfg, num_envs, device), held_noise(self.cfg, num_envs, self.act_dim, device))

    @torch.no_grad()
    def explore(self, policy: DeterministicActor, obs: torch.Tensor, noise: Noise) -> torch.Tensor:
        """a = clip(π(s) + σ_i·ε, −1, 1) with σ_i per env and ε ~ N(0, I), fresh or held."""
        assert noise.std is not None  # exploration_noise's
        action = policy(obs)
        eps = torch.randn_like(action) if noise.held is None else noise.held.draw()
        return (action + noise.std * eps).clamp(-1.0, 1.0)

    def next_action(self, policy: DeterministicActor, next_obs: torch.Tensor) -> tuple[torch.Tensor, None]:
        """TD3's smoothed target action, no bonus."""
        return smoothed_target_action(policy, next_obs, self.cfg.target_noise, self.cfg.target_noise_clip), None

    def policy_loss(
        self, policy: DeterministicActor, critic: nn.Module, obs: torch.Tensor, critic_obs: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Maximise min(E[Q1], E[Q2])(s, π(s)). -> (loss, scalars to log)."""
        loss = -self.min_q(critic, critic_obs, policy(obs)).mean()
        return loss, {"policy/loss": loss.detach()}

    def policy_optim_params(self, policy: DeterministicActor) -> ParamGroups:
        return [{"params": policy.parameters(), "lr": self.cfg.actor_lr}]
