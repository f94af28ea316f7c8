"""SAC (Haarnoja et al., 2018) on PQL's three-role runtime: a squashed Gaussian policy, n-step
soft clipped double-Q targets, and an automatically tuned temperature α with target entropy
H̄ = −act_dim.

The temperature is a parameter of the policy module (`SquashedGaussianActor.log_alpha`): the
P-learner updates it with the policy, and the weight sync that carries the policy to the
V-learner carries α with it. The critic and its loss are PQL's (ClippedDoubleQ)."""

from __future__ import annotations

import torch
from torch import nn

from pql.algos.common import ClippedDoubleQ, greedy_target
from pql.algos.rules import Batch, OffPolicyRules, ParamGroups
from pql.nets import SquashedGaussianActor


class SAC(ClippedDoubleQ[SquashedGaussianActor], OffPolicyRules[SquashedGaussianActor, None]):
    """Update rules for the three roles (their contract: pql.algos.rules.OffPolicyRules).
    Observations given to these methods are normalised."""

    def make_policy(self) -> SquashedGaussianActor:
        return SquashedGaussianActor(
            self.obs_dim,
            self.act_dim,
            self.cfg.net.actor_hidden,
            self.cfg.init_alpha,
            activation=self.cfg.net.activation,
        )

    @property
    def target_entropy(self) -> float:
        return -float(self.act_dim)

    def exploration_noise(self, num_envs: int, device: torch.device) -> None:
        """None: SAC explores by sampling its own policy, with no per-env noise schedule."""
        return None

    @torch.no_grad()
    def explore(self, policy: SquashedGaussianActor, obs: torch.Tensor, noise_std: None) -> torch.Tensor:
        """a ~ π(·|s). -> [N, act_dim] in [-1, 1]."""
        return policy.sample(obs)[0]

    @torch.no_grad()
    def td_target(self, batch: Batch, target_critic: nn.Module, policy: SquashedGaussianActor) -> torch.Tensor:
        """Soft n-step target y = R⁽ⁿ⁾ + γ_b · (min_j Q'_j(s', a') − α log π(a'|s')), a' ~ π(·|s'),
        with γ_b = γ^m (0 after a termination) and α from the synced policy copy; the larger of it and
        the one-step soft target where the batch carries first steps (greedy_target). -> [B].
        The entropy bonus enters at the bootstrap state only: the intermediate actions of the
        n-step return were taken by the (older) behaviour policy."""

        def soft_value(next_obs: torch.Tensor) -> torch.Tensor:
            next_action, next_log_prob = policy.sample(next_obs)
            return torch.min(*target_critic(next_obs, next_action)).squeeze(-1) - policy.log_alpha.exp() * next_log_prob

        return greedy_target(batch, soft_value)

    def policy_loss(
        self, policy: SquashedGaussianActor, critic: nn.Module, obs: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """J_π = E[α log π(a|s) − min_j Q_j(s, a)], a ~ π(·|s) reparameterised (SAC Eq. 12), plus the
        temperature loss J(α) = E[−α (log π(a|s) + H̄)] (SAC Eq. 18). α is held fixed in J_π and
        log π in J(α), so each loss moves only its own parameters. -> (loss, scalars to log)."""
        action, log_prob = policy.sample(obs)
        q1, q2 = critic(obs, action)
        alpha = policy.log_alpha.exp()
        actor_loss = (alpha.detach() * log_prob - torch.min(q1, q2).squeeze(-1)).mean()
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
