"""The batch-normalized residual network of FlashSAC (Kim et al., 2026): batch normalization before
each nonlinearity, an RMS normalization after the trunk, and weights re-projected to fixed norms
after each optimiser step (unit rows; the normalizations' gains at norm √d).

    embed:  h = W BN(x)
    block:  h ← h + relu(BN(W₂ relu(BN(W₁ h))))   (W₁ widens by `expansion`)
    head:   y = W_o RMSNorm(h) + b

A critic of this kind is trained on its current and next state-actions in one batch, so that the
batch statistics it learns with are those its targets are computed with (CrossQ; `couples_batch`).
In eval mode the running statistics stand in: the actor's, the evaluation's and the other
learner's copies run so."""

from __future__ import annotations

import torch
from torch import nn

from pql.nets.layers import BatchNorm, EnsembleLinear, RMSNorm


class _Block(nn.Module):
    def __init__(self, ensemble: int, width: int, expansion: int):
        super().__init__()
        self.w1 = EnsembleLinear(ensemble, width, width * expansion, bias=False, unit=True)
        self.norm1 = BatchNorm(ensemble, width * expansion)
        self.w2 = EnsembleLinear(ensemble, width * expansion, width, bias=False, unit=True)
        self.norm2 = BatchNorm(ensemble, width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + torch.relu(self.norm2(self.w2(torch.relu(self.norm1(self.w1(h))))))


class BatchNormNet(nn.Module):
    """x [B, in] -> [E, B, out] for an ensemble of E members (hidden: one block per entry, every
    entry the same width). head_init_std: None, a unit-row output layer (a critic's); a number,
    a plain one drawn at that std (a policy's: near-zero first actions)."""

    couples_batch = True

    def __init__(
        self,
        in_dim: int,
        hidden: tuple[int, ...],
        out_dim: int,
        *,
        ensemble: int,
        expansion: int,
        head_init_std: float | None = None,
    ):
        super().__init__()
        width = hidden[0]
        self.ensemble = ensemble
        self.embed_norm = BatchNorm(ensemble, in_dim)
        self.embed = EnsembleLinear(ensemble, in_dim, width, bias=False, unit=True)
        self.blocks = nn.ModuleList(_Block(ensemble, width, expansion) for _ in hidden)
        self.post_norm = RMSNorm(ensemble, width)
        unit = head_init_std is None
        self.head = EnsembleLinear(ensemble, width, out_dim, bias=True, unit=unit, init_std=head_init_std or 0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(self.embed_norm(x.unsqueeze(0).expand(self.ensemble, -1, -1)))
        for block in self.blocks:
            h = block(h)
        return self.head(self.post_norm(h))
