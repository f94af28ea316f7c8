"""Critics: twin Q for clipped double Q-learning, its distributional form, and a state value."""

from __future__ import annotations

import torch
from torch import nn

from pql.nets.kinds import ensemble_net
from pql.nets.mlp import mlp


class DoubleQ(nn.Module):
    """Two independent Q heads, networks of `kind` (pql.nets.kinds): two MLPs, or one ensemble of
    two for the residual kinds. obs [B, obs_dim], action [B, act_dim] -> (q1, q2), each
    [B, out_dim] (out_dim = 1 for scalar Q, num_atoms logits for a categorical critic).
    couples_batch: its outputs depend on the whole batch (batch normalization in training mode),
    so a critic update runs its current and next state-actions through it together."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: tuple[int, ...],
        out_dim: int = 1,
        layer_norm: bool = False,
        *,
        activation: str,
        kind: str = "mlp",
        expansion: int = 4,
    ):
        super().__init__()
        self.couples_batch = kind == "batchnorm"
        self.ensembled = kind != "mlp"
        if not self.ensembled:
            self.q1 = mlp(obs_dim + act_dim, hidden, out_dim, layer_norm, activation=activation)
            self.q2 = mlp(obs_dim + act_dim, hidden, out_dim, layer_norm, activation=activation)
        else:
            self.heads = ensemble_net(
                kind, obs_dim + act_dim, hidden, out_dim, ensemble=2, expansion=expansion, policy=False
            )

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, action], dim=-1)
        if not self.ensembled:
            return self.q1(x), self.q2(x)
        q = self.heads(x)
        return q[0], q[1]


class ValueNet(nn.Module):
    """State value V(s). obs [B, obs_dim] -> [B]."""

    def __init__(self, obs_dim: int, hidden: tuple[int, ...], layer_norm: bool = False, *, activation: str):
        super().__init__()
        self.net = mlp(obs_dim, hidden, 1, layer_norm, activation=activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs).squeeze(-1)
