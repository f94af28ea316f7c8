"""What a critic's heads output and how they learn (`algo.value`), beside the algorithm that uses
them (PQL, PQL-D, SAC: pql/algos/common.py's ClippedDoubleQ):

    scalar        one number per head, Q(s, a); squared TD error to y = R + γ_b (Q'(s', a') + b)
    categorical   num_atoms logits per head over the fixed support z_i = v_min + iΔz (C51,
                  Bellemare et al., 2017); cross-entropy to the projection of the target
                  distribution R + γ_b (Z'(s', a') + b) onto the support
    hl_gauss      the same heads and support, trained by cross-entropy to a histogram loss with
                  Gaussian smoothing (HL-Gauss; Imani & White, 2018; Farebrother et al., 2024):
                  the scalar target y = R + γ_b (E[Z'(s', a')] + b) spread over the atoms' bins
                  as a normal of σ = 0.75Δz, so that a target between two atoms, or a fraction of
                  a bin from the last one, still moves every nearby logit

b is the algorithm's bonus at the next state (SAC's −α log π(a'|s'); PQL's none). With
algo.return_scaling the rewards reach the critic divided by the return's running scale, so that
one support fits every task whose values take the same signs: [0, 5] for the DeepMind Control
Suite's, ±5 for Gymnasium's (pql/nets/normalizer.py's ReturnScale, pql/config/build.py's
scaled_support)."""

from __future__ import annotations

from typing import Any

import torch


def categorical_projection(
    reward: torch.Tensor, discount: torch.Tensor, probs: torch.Tensor, v_min: float, v_max: float
) -> torch.Tensor:
    """C51 projection Φ T̂Z onto the support z_i = v_min + iΔz (Bellemare et al. 2017, Eq. 7):
    (ΦT̂Z)_i = Σ_j [1 − |clip(R + γ_b z_j, v_min, v_max) − z_i| / Δz]₀¹ p_j.

    reward: [B] n-step return R (a bonus folded in: R + γ_b b); discount: [B] γ_b = γ^m, 0 after a
    termination; probs: [B, N] target distribution over the support. -> [B, N], each row sums to 1.
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


HL_GAUSS_SIGMA_BINS = 0.75  # σ/Δz, Farebrother et al.'s (2024) choice across their tasks


def hl_gauss_histogram(target: torch.Tensor, v_min: float, v_max: float, num_atoms: int) -> torch.Tensor:
    """HL-Gauss's target distribution: the mass of N(y, σ²), σ = 0.75Δz, in each atom's bin
    [z_i − Δz/2, z_i + Δz/2], renormalised over the support's bins; y is clipped onto [v_min, v_max].

    target: [B] scalar targets y. -> [B, num_atoms], each row sums to 1."""
    delta_z = (v_max - v_min) / (num_atoms - 1)
    edges = torch.linspace(
        v_min - delta_z / 2, v_max + delta_z / 2, num_atoms + 1, device=target.device, dtype=target.dtype
    )
    y = target.clamp(v_min, v_max).unsqueeze(-1)
    cdf = torch.special.erf((edges - y) / (HL_GAUSS_SIGMA_BINS * delta_z * 2**0.5))  # 2Φ − 1 at each edge
    return (cdf[..., 1:] - cdf[..., :-1]) / (cdf[..., -1:] - cdf[..., :1])


class ScalarValue:
    """Scalar heads: out [B, 1]; a target is y [B]."""

    out_dim = 1

    def mean(self, out: torch.Tensor) -> torch.Tensor:
        """The value E[Q] of a head's output. -> [B]."""
        return out.squeeze(-1)

    def smaller(self, out1: torch.Tensor, out2: torch.Tensor) -> torch.Tensor:
        """Clipped double Q: per sample, the head whose value is smaller."""
        return torch.min(out1, out2)

    def target(
        self, reward: torch.Tensor, discount: torch.Tensor, next_out: torch.Tensor, bonus: torch.Tensor | None
    ) -> torch.Tensor:
        """y = R + γ_b (Q'(s', a') + b). -> [B]."""
        value = self.mean(next_out) if bonus is None else self.mean(next_out) + bonus
        return reward + discount * value

    def target_mean(self, target: torch.Tensor) -> torch.Tensor:
        return target

    def larger(self, target1: torch.Tensor, target2: torch.Tensor) -> torch.Tensor:
        """Per sample, the larger of two targets (algo.greedy_nstep)."""
        return torch.maximum(target1, target2)

    def loss(self, out1: torch.Tensor, out2: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Σ_j (Q_j − y)². -> [B]."""
        return (self.mean(out1) - target).pow(2) + (self.mean(out2) - target).pow(2)


class CategoricalValue:
    """Categorical heads: out [B, num_atoms] logits; a target is a distribution [B, num_atoms]."""

    def __init__(self, num_atoms: int, v_min: float, v_max: float):
        self.out_dim, self.v_min, self.v_max = num_atoms, v_min, v_max

    def support(self, device: torch.device) -> torch.Tensor:
        """The atoms z_i = v_min + iΔz. -> [num_atoms]."""
        return torch.linspace(self.v_min, self.v_max, self.out_dim, device=device)

    def mean(self, out: torch.Tensor) -> torch.Tensor:
        """Q = E[Z] = Σ_i softmax(logits)_i z_i. -> [B]."""
        return out.softmax(-1) @ self.support(out.device)

    def smaller(self, out1: torch.Tensor, out2: torch.Tensor) -> torch.Tensor:
        """Per sample, the head with the smaller mean (the element-wise minimum of two
        distributions is not a distribution)."""
        return torch.where((self.mean(out1) <= self.mean(out2)).unsqueeze(-1), out1, out2)

    def target(
        self, reward: torch.Tensor, discount: torch.Tensor, next_out: torch.Tensor, bonus: torch.Tensor | None
    ) -> torch.Tensor:
        """Φ(R + γ_b (Z' + b)): the bonus shifts every atom, so it folds into the reward. -> [B, N]."""
        shift = reward if bonus is None else reward + discount * bonus
        return categorical_projection(shift, discount, next_out.softmax(-1), self.v_min, self.v_max)

    def target_mean(self, target: torch.Tensor) -> torch.Tensor:
        return target @ self.support(target.device)

    def larger(self, target1: torch.Tensor, target2: torch.Tensor) -> torch.Tensor:
        """Per sample, the target distribution with the larger mean (algo.greedy_nstep)."""
        first = self.target_mean(target1) >= self.target_mean(target2)
        return torch.where(first.unsqueeze(-1), target1, target2)

    def loss(self, out1: torch.Tensor, out2: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Cross-entropy −Σ_i (ΦT̂Z')_i log p_i for both heads. -> [B]."""
        return -(target * (out1.log_softmax(-1) + out2.log_softmax(-1))).sum(-1)


class HLGaussValue(CategoricalValue):
    """CategoricalValue's heads, learning HL-Gauss's histogram of the scalar target instead of
    C51's projection of the target distribution."""

    def target(
        self, reward: torch.Tensor, discount: torch.Tensor, next_out: torch.Tensor, bonus: torch.Tensor | None
    ) -> torch.Tensor:
        """The histogram of y = R + γ_b (E[Z'] + b). -> [B, N]."""
        value = self.mean(next_out) if bonus is None else self.mean(next_out) + bonus
        return hl_gauss_histogram(reward + discount * value, self.v_min, self.v_max, self.out_dim)


Value = ScalarValue | CategoricalValue


def make_value(cfg: Any) -> Value:
    """The heads algo.value names (scalar, categorical or hl_gauss), on algo's support."""
    if cfg.value == "scalar":
        return ScalarValue()
    kind = HLGaussValue if cfg.value == "hl_gauss" else CategoricalValue
    return kind(cfg.num_atoms, cfg.v_min, cfg.v_max)
