"""The hyperspherical residual network of SimbaV2 (Lee et al., 2025): every hidden feature lives on
the unit sphere, and every weight row is a unit vector (re-projected after each optimiser step), so
neither the features' nor the weights' norms can grow as training goes on; learned per-feature
scalers carry the magnitudes instead.

    embed:  x̃ = ‖[x, c]‖-normalized (c = 3: the input's norm survives as an angle);
            h = normalize(s ⊙ W x̃)
    block:  m = normalize(W₂ (relu(s ⊙ W₁ h) + ε)),  h ← normalize(h + α ⊙ (m − h))
            (W₁ widens by `expansion`; α, per feature, interpolates on the sphere)
    head:   y = W_b (s ⊙ W_a h) + b

Every W has unit rows and no bias; only the head has a bias."""

from __future__ import annotations

import math

import torch
from torch import nn

from pql.nets.layers import EnsembleLinear, Scaler, l2_normalize

C_SHIFT = 3.0  # the constant appended to the input before its normalization (SimbaV2's c_shift)
RELU_EPS = 1e-8  # keeps an all-negative pre-activation from normalizing a zero vector


def _unit(ensemble: int, in_dim: int, out_dim: int) -> EnsembleLinear:
    return EnsembleLinear(ensemble, in_dim, out_dim, bias=False, unit=True)


class _Block(nn.Module):
    def __init__(self, ensemble: int, width: int, expansion: int, num_blocks: int):
        super().__init__()
        scale = math.sqrt(2.0 / width) / math.sqrt(expansion)
        self.w1 = _unit(ensemble, width, width * expansion)
        self.scaler = Scaler(ensemble, width * expansion, scale, scale)
        self.w2 = _unit(ensemble, width * expansion, width)
        # α starts at 1/(blocks + 1), stored at 1/√width (SimbaV2's alpha_init and alpha_scale).
        self.alpha = Scaler(ensemble, width, 1.0 / (num_blocks + 1), 1.0 / math.sqrt(width))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        m = l2_normalize(self.w2(torch.relu(self.scaler(self.w1(h))) + RELU_EPS))
        return l2_normalize(h + self.alpha(m - h))


class HypersphericalNet(nn.Module):
    """x [B, in] -> [E, B, out] for an ensemble of E members (hidden: one block per entry, every
    entry the same width)."""

    def __init__(self, in_dim: int, hidden: tuple[int, ...], out_dim: int, *, ensemble: int, expansion: int):
        super().__init__()
        width = hidden[0]
        scale = math.sqrt(2.0 / width)
        self.ensemble = ensemble
        self.embed = _unit(ensemble, in_dim + 1, width)
        self.embed_scaler = Scaler(ensemble, width, scale, scale)
        self.blocks = nn.ModuleList(_Block(ensemble, width, expansion, len(hidden)) for _ in hidden)
        self.head_in = _unit(ensemble, width, width)
        self.head_scaler = Scaler(ensemble, width, 1.0, 1.0)
        self.head_out = _unit(ensemble, width, out_dim)
        self.head_bias = nn.Parameter(torch.zeros(ensemble, 1, out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.cat([x, x.new_full((*x.shape[:-1], 1), C_SHIFT)], dim=-1)
        x = l2_normalize(x).unsqueeze(0).expand(self.ensemble, -1, -1)
        h = l2_normalize(self.embed_scaler(self.embed(x)))
        for block in self.blocks:
            h = block(h)
        return self.head_out(self.head_scaler(self.head_in(h))) + self.head_bias
