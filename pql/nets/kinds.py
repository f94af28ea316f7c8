"""The kinds of network a policy or critic can be built as (`algo.net.kind`), in one place:

    mlp             linear layers with an activation between them (LayerNorm before each
                    activation for a critic with algo.net.critic_layer_norm): PQL's own
    hyperspherical  SimbaV2's residual net on the unit sphere (pql/nets/hyperspherical.py)
    batchnorm       FlashSAC's batch-normalized residual net (pql/nets/batchnorm.py)

For the residual kinds, `hidden` gives one block per entry, all of one width. Their weights are
re-projected after each optimiser step (pql.nets.layers.projected_layers)."""

from __future__ import annotations

import torch
from torch import nn

from pql.nets.batchnorm import BatchNormNet
from pql.nets.hyperspherical import HypersphericalNet
from pql.nets.mlp import mlp

NET_KINDS = ("mlp", "hyperspherical", "batchnorm")
POLICY_HEAD_STD = 1e-3  # a batchnorm policy's output layer starts near zero (FlashSAC's mean head)


def ensemble_net(
    kind: str, in_dim: int, hidden: tuple[int, ...], out_dim: int, *, ensemble: int, expansion: int, policy: bool
) -> nn.Module:
    """A residual net of `kind` mapping x [B, in] -> [E, B, out] for E = ensemble members."""
    if kind == "hyperspherical":
        return HypersphericalNet(in_dim, hidden, out_dim, ensemble=ensemble, expansion=expansion)
    if kind == "batchnorm":
        head_std = POLICY_HEAD_STD if policy else None
        return BatchNormNet(in_dim, hidden, out_dim, ensemble=ensemble, expansion=expansion, head_init_std=head_std)
    raise ValueError(f"unknown network kind {kind!r}; expected one of {', '.join(NET_KINDS[1:])}")


class _Single(nn.Module):
    """An ensemble of one, as a map [B, in] -> [B, out]."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)[0]


def policy_net(kind: str, in_dim: int, hidden: tuple[int, ...], out_dim: int, *, activation: str, expansion: int):
    """A policy's network of `kind`: obs [B, in] -> [B, out]."""
    if kind == "mlp":
        return mlp(in_dim, hidden, out_dim, activation=activation)
    return _Single(ensemble_net(kind, in_dim, hidden, out_dim, ensemble=1, expansion=expansion, policy=True))
