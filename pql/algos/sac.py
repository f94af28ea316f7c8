"""SAC (Haarnoja et al., 2018) on PQL's three-role runtime: a squashed Gaussian policy, n-step
soft clipped double-Q targets, and an automatically tuned temperature α toward a target entropy:
SAC's H̄ = −act_dim, or with algo.target_entropy_std = σ that of a Gaussian of std σ in every
action dimension, H̄ = act_dim/2 · log(2πeσ²) (FlashSAC's fixed-σ target, σ = 0.15).

The temperature is a parameter of the policy module (`SquashedGaussianActor.log_alpha`): the
P-learner updates it with the policy, and the weight sync that carries the policy to the
V-learner carries α with it. The critic and its loss are ClippedDoubleQ's, its heads algo.value's."""

from __future__ import annotations

import math

import torch
from torch import nn

from pql.algos.common import ClippedDoubleQ
from pql.algos.exploration import Noise, held_noise
from pql.algos.rules import OffPolicyRules, ParamGroups
from pql.nets import SquashedGaussianActor


class SAC(ClippedDoubleQ[SquashedGaussianActor], OffPolicyRules[SquashedGaussianActor, Noise]):
    """Update rules for the three roles (their contract: pql.algos.rules.OffPolicyRules).
    Observations given to these methods are normalised."""

    def make_policy(self) -> SquashedGaussianActor:
        net = self.cfg.net
        return SquashedGaussianActor(
            self.obs_dim,
            self.act_dim,
            net.actor_hidden,
            self.cfg.init_alpha,
            activation=net.activation,
            kind=net.kind,
            expansion=net.expansion,
        )

    @property
    def target_entropy(self) -> float:
        std = self.cfg.target_entropy_std
        if std is None:
            return -float(self.act_dim)
        return 0.5 * self.act_dim * math.log(2 * math.pi * math.e * std**2)

    def exploration_noise(self, num_envs: int, device: torch.device) -> Noise:
        """No noise scale (the policy has its own σ), and the held draws of its ε if any."""
        return Noise(None, held_noise(self.cfg, num_envs, self.act_dim, device))

    @torch.no_grad()
    def explore(self, policy: SquashedGaussianActor, obs: torch.Tensor, noise: Noise) -> torch.Tensor:
        """a = tanh(μ(s) + σ(s)·ε), ε ~ N(0, I) fresh or held. -> [N, act_dim] in [-1, 1]."""
        return policy.sample(obs, None if noise.held is None else noise.held.draw())[0]

    def next_action(self, policy: SquashedGaussianActor, next_obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """a' ~ π(·|s'), and the entropy bonus b = −α log π(a'|s'), α from the synced policy copy.
        The bonus enters at the bootstrap state only: the intermediate actions of the n-step
        return were taken by the (older) behaviour policy."""
        next_action, next_log_prob = policy.sample(next_obs)
        return next_action, -policy.log_alpha.exp() * next_log_prob

    def policy_loss(
        self, policy: SquashedGaussianActor, critic: nn.Module, obs: torch.Tensor, critic_obs: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """J_π = E[α log π(a|s) − min_j E[Q_j](s, a)], a ~ π(·|s) reparameterised (SAC Eq. 12),
        plus the temperature loss J(α) = E[−α (log π(a|s) + H̄)] (SAC Eq. 18). α is held fixed in
        J_π and log π in J(α), so each loss moves only its own parameters. -> (loss, scalars)."""
        action, log_prob = policy.sample(obs)
        alpha = policy.log_alpha.exp()
        actor_loss = (alpha.detach() * log_prob - self.min_q(critic, critic_obs, action)).mean()
        alpha_loss = -(alpha * (log_prob.detach() + self.target_entropy)).mean()
        return actor_loss + alpha_loss, {
            "policy/loss": actor_loss.detach(),
            "policy/alpha": alpha.detach(),
            "policy/entropy": -log_prob.detach().mean(),
        }

    def policy_optim_params(self, policy: SquashedGaussianActor) -> ParamGroups:
        return [
            {"params": policy.net.parameters(), "lr": self.cfg.actor_lr},
            {"params": [policy.log_alpha], "lr": self.cfg.alpha_lr},
        ]
