"""Layers of the normalized networks (pql/nets/hyperspherical.py, pql/nets/batchnorm.py): linear
maps over an ensemble of E members run as one batched matmul, and the projections that hold their
weights' norms fixed after each optimiser step.

Every layer here maps [E, B, in] -> [E, B, out]: the two heads of a double critic are one ensemble
of two (one bmm per layer instead of two matmuls), a policy an ensemble of one."""

from __future__ import annotations

import math

import torch
from torch import nn

EPS = 1e-8


def l2_normalize(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """x / ‖x‖ over dimension `dim` (the features), the norm floored at EPS."""
    return x / torch.linalg.vector_norm(x, dim=dim, keepdim=True).clamp_min(EPS)


class EnsembleLinear(nn.Module):
    """x W_e (+ b_e) for each member e, W_e [in, out]: one column per output feature, so that the
    gradient has the weight's own layout (a transposed weight's gradient is not contiguous, which
    fused Adam on the CPU reads wrongly in torch 2.13). unit: the columns are unit vectors, kept so
    by `project` after each optimiser step (SimbaV2, FlashSAC); they start orthogonal. Otherwise
    the weights start N(0, init_std²) (a policy's output layer: near-zero first actions)."""

    def __init__(self, ensemble: int, in_dim: int, out_dim: int, *, bias: bool, unit: bool, init_std: float = 0.0):
        super().__init__()
        self.unit = unit
        self.weight = nn.Parameter(torch.empty(ensemble, in_dim, out_dim))
        for w in self.weight.data:
            if unit:
                nn.init.orthogonal_(w)
            else:
                nn.init.normal_(w, std=init_std)
        self.bias = nn.Parameter(torch.zeros(ensemble, 1, out_dim)) if bias else None
        if unit:
            self.project()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.bmm(x, self.weight)
        return y if self.bias is None else y + self.bias

    @torch.no_grad()
    def project(self) -> None:
        if self.unit:
            self.weight.copy_(l2_normalize(self.weight, dim=1))


class Scaler(nn.Module):
    """x ⊙ s with a learned per-feature scale s that starts at `init`. SimbaV2's
    reparameterization: the parameter is stored at magnitude `scale` and multiplied by init/scale,
    so that Adam's steps, about the learning rate in size, are a chosen share of it."""

    def __init__(self, ensemble: int, dim: int, init: float, scale: float):
        super().__init__()
        self.factor = init / scale
        self.weight = nn.Parameter(torch.full((ensemble, 1, dim), scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (self.weight * self.factor)


class BatchNorm(nn.Module):
    """Batch normalization over the batch dimension of [E, B, d], per member, with an affine map
    (γ, β) whose joint norm ‖(γ, β)‖ is held at √d by `project` (FlashSAC). In training mode it
    uses the batch's statistics and folds them into running ones (momentum 0.01); in eval mode
    (the actor's, the evaluation's and a learner's copy of the other's network) the running ones."""

    running_mean: torch.Tensor
    running_var: torch.Tensor

    def __init__(self, ensemble: int, dim: int, momentum: float = 0.01, eps: float = 1e-5):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.weight = nn.Parameter(torch.ones(ensemble, 1, dim))
        self.bias = nn.Parameter(torch.zeros(ensemble, 1, dim))
        self.register_buffer("running_mean", torch.zeros(ensemble, 1, dim))
        self.register_buffer("running_var", torch.ones(ensemble, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            mean = x.mean(dim=1, keepdim=True)
            var = x.var(dim=1, correction=0, keepdim=True)
            with torch.no_grad():
                n = x.shape[1]
                self.running_mean.lerp_(mean, self.momentum)
                self.running_var.lerp_(var * (n / max(n - 1, 1)), self.momentum)
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias

    @torch.no_grad()
    def project(self) -> None:
        dim = self.weight.shape[-1]
        norm = (self.weight.pow(2) + self.bias.pow(2)).sum(-1, keepdim=True).add(EPS).sqrt()
        factor = math.sqrt(dim) / norm
        self.weight.mul_(factor)
        self.bias.mul_(factor)


class RMSNorm(nn.Module):
    """x / rms(x) ⊙ g over the features, with ‖g‖ held at √d by `project` (FlashSAC's last
    normalization before the head)."""

    def __init__(self, ensemble: int, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(ensemble, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    @torch.no_grad()
    def project(self) -> None:
        dim = self.weight.shape[-1]
        self.weight.mul_(math.sqrt(dim) / self.weight.pow(2).sum(-1, keepdim=True).add(EPS).sqrt())


Projected = EnsembleLinear | BatchNorm | RMSNorm


def projected_layers(module: nn.Module) -> list[Projected]:
    """The layers of `module` whose weights `project` re-normalizes (none in a plain MLP)."""
    return [
        m for m in module.modules() if isinstance(m, (BatchNorm, RMSNorm)) or (isinstance(m, EnsembleLinear) and m.unit)
    ]
