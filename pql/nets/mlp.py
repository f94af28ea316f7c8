"""The one MLP builder every network in pql uses."""

from __future__ import annotations

from torch import nn

ACTIVATIONS = {"elu": nn.ELU, "relu": nn.ReLU}


def mlp(
    in_dim: int, hidden: tuple[int, ...], out_dim: int, layer_norm: bool = False, *, activation: str
) -> nn.Sequential:
    """Linear layers with `activation` (a key of ACTIVATIONS) between them, and optional LayerNorm
    before each activation."""
    layers: list[nn.Module] = []
    dim = in_dim
    for width in hidden:
        layers.append(nn.Linear(dim, width))
        if layer_norm:
            layers.append(nn.LayerNorm(width))
        layers.append(ACTIVATIONS[activation]())
        dim = width
    layers.append(nn.Linear(dim, out_dim))
    return nn.Sequential(*layers)
