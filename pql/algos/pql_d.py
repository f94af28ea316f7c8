"""PQL-D (Li et al., 2023): PQL with a categorical distributional critic (C51, Bellemare et al.,
2017). Each head of the double critic outputs logits over a fixed support z_i = v_min + iΔz of
num_atoms atoms; the n-step target distribution is projected back onto that support, and both
heads are trained by cross-entropy. Everything else (TD3 target smoothing, the deterministic
policy, mixed or Ape-X exploration) is PQL's."""

from __future__ import annotations

import torch
from torch import nn

from pql.algos.common import smoothed_target_action
from pql.algos.pql import PQL
from pql.algos.rules import Batch
from pql.nets import DeterministicActor, DoubleQ


def categorical_projection(
    reward: torch.Tensor, discount: torch.Tensor, probs: torch.Tensor, v_min: float, v_max: float
) -> torch.Tensor:
    """C51 projection Φ T̂Z onto the support z_i = v_min + iΔz (Bellemare et al. 2017, Eq. 7):
    (ΦT̂Z)_i = Σ_j [1 − |clip(R + γ_b z_j, v_min, v_max) − z_i| / Δz]₀¹ p_j.

    reward: [B] n-step return R; discount: [B] γ_b = γ^m, 0 after a termination;
    probs: [B, N] target distribution over the support. -> [B, N], each row sums to 1.
    """
    num_atoms = probs.shape[-1]
    delta_z = (v_max - v_min) / (num_atoms - 1)
    support = torch.linspace(v_min, v_max, num_atoms, device=probs.device, dtype=probs.dtype)
    target_z = (reward.unsqueeze(-1) + discount.unsqueeze(-1) * support).clamp(v_min, v_max)
    b = ((target_z - v_min) / delta_z).clamp(0, num_atoms - 1)
    # Split each atom between l = ⌊b⌋ and l + 1 with weights (1 − (b − l), b − l); capping l at
    # N − 2 keeps l + 1 on the support for an atom at v_max. An atom exactly on a support point
    # keeps all its mass, which C51's weights (⌈b⌉ − b, b − ⌊b⌋) would drop when ⌊b⌋ = ⌈b⌉.
    lower = b.floor().clamp(max=num_atoms - 2)
    upper_weight = b - lower
    projected = torch.zeros_like(probs)
    projected.scatter_add_(-1, lower.long(), probs * (1 - upper_weight))
    projected.scatter_add_(-1, lower.long() + 1, probs * upper_weight)
    return projected


class PQLD(PQL):
    """Update rules for the three roles with the distributional critic (logits [B, num_atoms])."""

    def make_critic(self) -> nn.Module:
        return DoubleQ(
            self.obs_dim,
            self.act_dim,
            self.cfg.net.critic_hidden,
            out_dim=self.cfg.num_atoms,
            layer_norm=self.cfg.net.critic_layer_norm,
            activation=self.cfg.net.activation,
        )

    def support(self, device: torch.device) -> torch.Tensor:
        """The atoms z_i = v_min + iΔz. -> [num_atoms]."""
        return torch.linspace(self.cfg.v_min, self.cfg.v_max, self.cfg.num_atoms, device=device)

    def expected_q(self, logits: torch.Tensor) -> torch.Tensor:
        """Q = E[Z] = Σ_i softmax(logits)_i z_i. logits: [B, N] -> [B]."""
        return logits.softmax(-1) @ self.support(logits.device)

    @torch.no_grad()
    def td_target(self, batch: Batch, target_critic: nn.Module, policy: DeterministicActor) -> torch.Tensor:
        """Φ T̂Z' for the target head with the smaller mean, per sample (clipped double Q on
        distributions: the element-wise minimum of two distributions is not a distribution). Where
        the batch carries first steps (algo.greedy_nstep), per sample the one of the n-step and the
        one-step target distributions with the larger mean (greedy_target's rule on means).
        -> target distribution [B, num_atoms]."""
        if "next_obs1" not in batch:
            return self._projected(batch["reward"], batch["discount"], batch["next_obs"], target_critic, policy)
        both = self._projected(
            torch.cat([batch["reward"], batch["reward1"]]),
            torch.cat([batch["discount"], batch["discount1"]]),
            torch.cat([batch["next_obs"], batch["next_obs1"]]),
            target_critic,
            policy,
        )
        n_step, one_step = both.chunk(2)
        support = self.support(both.device)
        return torch.where((n_step @ support >= one_step @ support).unsqueeze(-1), n_step, one_step)

    def _projected(
        self,
        reward: torch.Tensor,
        discount: torch.Tensor,
        next_obs: torch.Tensor,
        target_critic: nn.Module,
        policy: DeterministicActor,
    ) -> torch.Tensor:
        """Φ(reward + discount·Z'(next_obs, ã)) of the head with the smaller mean. -> [B, num_atoms]."""
        next_action = smoothed_target_action(policy, next_obs, self.cfg.target_noise, self.cfg.target_noise_clip)
        logits1, logits2 = target_critic(next_obs, next_action)
        head1_smaller = (self.expected_q(logits1) <= self.expected_q(logits2)).unsqueeze(-1)
        probs = torch.where(head1_smaller, logits1, logits2).softmax(-1)
        return categorical_projection(reward, discount, probs, self.cfg.v_min, self.cfg.v_max)

    def critic_loss(
        self,
        critic: nn.Module,
        target_critic: nn.Module,
        policy: DeterministicActor,
        batch: Batch,
        weights: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Cross-entropy −Σ_i (ΦT̂Z')_i log p_i(s, a) for both heads.
        -> (loss, |E[Z(s,a)] − E[ΦT̂Z']| [B] for priorities, scalars to log). weights: [B]."""
        target = self.td_target(batch, target_critic, policy)
        logits1, logits2 = critic(batch["obs"], batch["action"])
        cross_entropy = -(target * (logits1.log_softmax(-1) + logits2.log_softmax(-1))).sum(-1)
        loss = (weights * cross_entropy).mean()
        with torch.no_grad():
            td_abs = self._mean_td_error(logits1, logits2, target)
        return loss, td_abs, {"critic/loss": loss.detach(), "critic/q": self.expected_q(logits1).detach().mean()}

    @torch.no_grad()
    def td_error(
        self, critic: nn.Module, target_critic: nn.Module, policy: DeterministicActor, batch: Batch
    ) -> torch.Tensor:
        """|min_j E[Z_j(s, a)] − E[ΦT̂Z']| [B], the TD error critic_loss reports, without a loss."""
        logits1, logits2 = critic(batch["obs"], batch["action"])
        return self._mean_td_error(logits1, logits2, self.td_target(batch, target_critic, policy))

    def _mean_td_error(self, logits1: torch.Tensor, logits2: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        q = torch.min(self.expected_q(logits1), self.expected_q(logits2))
        return (q - target @ self.support(target.device)).abs()

    def policy_loss(
        self, policy: DeterministicActor, critic: nn.Module, obs: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Maximise min(E[Z1], E[Z2])(s, π(s)). -> (loss, scalars to log)."""
        logits1, logits2 = critic(obs, policy(obs))
        loss = -torch.min(self.expected_q(logits1), self.expected_q(logits2)).mean()
        return loss, {"policy/loss": loss.detach()}
