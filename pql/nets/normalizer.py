"""Running mean/std observation normaliser, shared by every role through the weight sync."""

from __future__ import annotations

import torch
from torch import nn


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
        total = self.count + n
        delta = batch_mean - self.mean
        # Chan et al.'s parallel combination of two (mean, M2) summaries.
        m2 = self.var * self.count + batch_var * n + delta.pow(2) * self.count * n / total
        self.mean += delta * n / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return ((obs - self.mean) / (self.var + self.eps).sqrt()).clamp(-self.clip, self.clip)
