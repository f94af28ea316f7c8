"""The running statistics every role reads through the weight sync: the observation normaliser, and
the return's scale that algo.return_scaling divides the critic's rewards by."""

from __future__ import annotations

import torch
from torch import nn


def fold_moments(
    count: torch.Tensor,
    mean: torch.Tensor,
    var: torch.Tensor,
    n: int | torch.Tensor,
    batch_mean: torch.Tensor,
    batch_var: torch.Tensor,
) -> None:
    """Fold a batch of n samples (mean, biased variance) into running (count, mean, var), in place:
    Chan et al.'s parallel combination of two (mean, M2) summaries."""
    total = count + n
    delta = batch_mean - mean
    m2 = var * count + batch_var * n + delta.pow(2) * count * n / total
    mean += delta * n / total
    var.copy_(m2 / total)
    count.copy_(total)


class ObsNormalizer(nn.Module):
    """Welford-style batched running statistics. The actor updates them; every role normalises
    with the latest published copy, so a sample is normalised identically wherever it is used.
    Its buffers travel with the policy in weight syncs and checkpoints."""

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, obs_dim: int, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("mean", torch.zeros(obs_dim))
        self.register_buffer("var", torch.ones(obs_dim))
        self.register_buffer("count", torch.tensor(0.0))

    @torch.no_grad()
    def update(self, obs: torch.Tensor) -> None:
        """obs: [B, obs_dim] raw observations on the normaliser's device."""
        self.update_moments(obs.shape[0], obs.mean(0), obs.var(0, unbiased=False))

    @torch.no_grad()
    def update_moments(self, n: int | torch.Tensor, batch_mean: torch.Tensor, batch_var: torch.Tensor) -> None:
        """Fold in a batch of n observations (a number, or a 0-d tensor on the device) with
        mean and (biased) variance [obs_dim]."""
        fold_moments(self.count, self.mean, self.var, n, batch_mean, batch_var)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return ((obs - self.mean) / (self.var + self.eps).sqrt()).clamp(-self.clip, self.clip)

    def head(self, columns: int) -> ObsNormalizer:
        """A normaliser of the first `columns` observations only, with these statistics (copied):
        the policy's, which a run delivers where the critic reads more (pql.envs.ObsLayout)."""
        head = ObsNormalizer(columns, self.clip, self.eps).to(self.mean.device)
        head.load_state_dict({"mean": self.mean[:columns], "var": self.var[:columns], "count": self.count})
        return head


class ReturnScale(nn.Module):
    """The scale the critic's rewards are divided by with algo.return_scaling (SimbaV2, FlashSAC):
    max(σ_G, max G / high, min G / low), G being the envs' discounted returns so far in their
    episodes, G_t = r_t + γ G_{t−1} (0 before an episode's first step), and [low, high] the range
    the scaled returns must stay in, a categorical critic's support (low <= 0 <= high, not both 0).
    σ_G keeps the values' spread near one; the other terms keep the largest and the smallest
    return seen inside the support (on ±bound they are FlashSAC's max|G| / bound; an end at 0
    bounds nothing, so a support of [0, high] leaves negative returns to be clipped onto it). The
    actor folds in each step's G of every env (and of every replica) and publishes the
    statistics; every role scales with the latest published copy, as with ObsNormalizer. Before
    any data the scale is 1."""

    count: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor
    max_return: torch.Tensor
    min_return: torch.Tensor

    def __init__(self, low: float, high: float, eps: float = 1e-8):
        super().__init__()
        if not low <= 0.0 <= high or low == high:
            raise ValueError(f"a return-scaled support must hold 0 and not be one point, got [{low}, {high}]")
        # 0 where an end is 0: that end takes no part in the scale (returns beyond it are clipped).
        self.per_high = 1.0 / high if high > 0 else 0.0
        self.per_low = 1.0 / low if low < 0 else 0.0
        self.eps = eps
        self.register_buffer("count", torch.tensor(0.0))
        self.register_buffer("mean", torch.tensor(0.0))
        self.register_buffer("var", torch.tensor(1.0))
        self.register_buffer("max_return", torch.tensor(0.0))  # the largest G seen, and 0
        self.register_buffer("min_return", torch.tensor(0.0))  # the smallest G seen, and 0

    @torch.no_grad()
    def update(self, returns: torch.Tensor) -> None:
        """returns: [N] this step's G of every env."""
        smallest, largest = torch.aminmax(returns)  # one pass over the envs
        self.update_moments(returns.shape[0], returns.mean(), returns.var(unbiased=False), largest, smallest)

    @torch.no_grad()
    def update_moments(
        self,
        n: int | torch.Tensor,
        batch_mean: torch.Tensor,
        batch_var: torch.Tensor,
        batch_max: torch.Tensor,
        batch_min: torch.Tensor,
    ) -> None:
        """Fold in n returns with mean, (biased) variance, largest and smallest (0-d tensors)."""
        fold_moments(self.count, self.mean, self.var, n, batch_mean, batch_var)
        self.max_return.copy_(torch.maximum(self.max_return, batch_max))
        self.min_return.copy_(torch.minimum(self.min_return, batch_min))

    def scale(self) -> torch.Tensor:
        """max(σ_G, max G / high, min G / low), a 0-d tensor."""
        ends = torch.maximum(self.max_return * self.per_high, self.min_return * self.per_low)
        return torch.maximum((self.var + self.eps).sqrt(), ends)

    def forward(self, reward: torch.Tensor) -> torch.Tensor:
        return reward / self.scale()
