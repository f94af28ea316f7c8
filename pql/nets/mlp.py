"""The one MLP builder every network in pql uses."""
from __future__ import annotations

from torch import nn


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, layer_norm: bool = False) -> nn.Sequential:
    """Linear layers with ELU between them (and optional LayerNorm before each ELU)."""
    layers: list[nn.Module] = []
    dim = in_dim
    for width in hidden:
        layers.append(nn.Linear(dim, width))
        if layer_norm:
            layers.append(nn.LayerNorm(width))
        layers.append(nn.ELU())
        dim = width
    layers.append(nn.Linear(dim, out_dim))
    return nn.Sequential(*layers)
