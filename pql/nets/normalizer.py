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
    max(σ_G, max|G| / bound), G being the envs' discounted returns so far in their episodes,
    G_t = r_t + γ G_{t−1} (0 before an episode's first step). σ_G keeps the values' spread near
    one; the second term keeps the largest return seen within ±bound, the support of a categorical
    critic. The actor folds in each step's G of every env (and of every replica) and publishes the
    statistics; every role scales with the latest published copy, as with ObsNormalizer. Before
    any data the scale is 1."""

    count: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor
    max_abs: torch.Tensor

    def __init__(self, bound: float, eps: float = 1e-8):
        super().__init__()
        self.bound, self.eps = bound, eps
        self.register_buffer("count", torch.tensor(0.0))
        self.register_buffer("mean", torch.tensor(0.0))
        self.register_buffer("var", torch.tensor(1.0))
        self.register_buffer("max_abs", torch.tensor(0.0))

    @torch.no_grad()
    def update(self, returns: torch.Tensor) -> None:
        """returns: [N] this step's G of every env."""
        self.update_moments(returns.shape[0], returns.mean(), returns.var(unbiased=False), returns.abs().max())

    @torch.no_grad()
    def update_moments(
        self, n: int | torch.Tensor, batch_mean: torch.Tensor, batch_var: torch.Tensor, batch_max_abs: torch.Tensor
    ) -> None:
        """Fold in n returns with mean, (biased) variance and largest magnitude (0-d tensors)."""
        fold_moments(self.count, self.mean, self.var, n, batch_mean, batch_var)
        self.max_abs.copy_(torch.maximum(self.max_abs, batch_max_abs))

    def scale(self) -> torch.Tensor:
        """max(σ_G, max|G| / bound), a 0-d tensor."""
        return torch.maximum((self.var + self.eps).sqrt(), self.max_abs / self.bound)

    def forward(self, reward: torch.Tensor) -> torch.Tensor:
        return reward / self.scale()
