"""dm_control's reward shapes (dm_control.utils.rewards.tolerance), batched in torch.

`tolerance(x, bounds, margin, sigmoid, value_at_margin)` is 1 where lower <= x <= upper and falls
off outside by `sigmoid` of the distance to the nearer bound in units of `margin`, reaching
`value_at_margin` at one margin; with margin 0 it is the bounds' indicator. The shapes are
dm_control's formulas; the code is written here for tensors of any shape and dtype.
"""

from __future__ import annotations

import math

import torch

SIGMOIDS = ("gaussian", "hyperbolic", "long_tail", "reciprocal", "cosine", "linear", "quadratic", "tanh_squared")
_MAY_REACH_ZERO = ("cosine", "linear", "quadratic")


def _sigmoid(d: torch.Tensor, value_at_1: float, sigmoid: str) -> torch.Tensor:
    """1 at d = 0, value_at_1 at d = 1 (d >= 0: distance to the bounds in margins)."""
    if sigmoid == "gaussian":
        scale = math.sqrt(-2 * math.log(value_at_1))
        return torch.exp(-0.5 * (d * scale).square())
    if sigmoid == "hyperbolic":
        return 1 / torch.cosh(d * math.acosh(1 / value_at_1))
    if sigmoid == "long_tail":
        return 1 / ((d * math.sqrt(1 / value_at_1 - 1)).square() + 1)
    if sigmoid == "reciprocal":
        return 1 / (d.abs() * (1 / value_at_1 - 1) + 1)
    if sigmoid == "cosine":
        scaled = d * (math.acos(2 * value_at_1 - 1) / math.pi)
        return torch.where(scaled.abs() < 1, (1 + torch.cos(math.pi * scaled)) / 2, 0.0)
    if sigmoid == "linear":
        scaled = d * (1 - value_at_1)
        return torch.where(scaled.abs() < 1, 1 - scaled, 0.0)
    if sigmoid == "quadratic":
        scaled = d * math.sqrt(1 - value_at_1)
        return torch.where(scaled.abs() < 1, 1 - scaled.square(), 0.0)
    # tanh_squared
    return 1 - torch.tanh(d * math.atanh(math.sqrt(1 - value_at_1))).square()


def tolerance(
    x: torch.Tensor,
    bounds: tuple[float, float] = (0.0, 0.0),
    margin: float = 0.0,
    sigmoid: str = "gaussian",
    value_at_margin: float = 0.1,
) -> torch.Tensor:
    """In [0, 1], shaped like x: 1 inside bounds (inclusive), `sigmoid` of the distance outside."""
    lower, upper = bounds
    if lower > upper or margin < 0 or sigmoid not in SIGMOIDS:
        raise ValueError(f"tolerance needs lower <= upper, margin >= 0 and a sigmoid of {SIGMOIDS}")
    low_ok = 0 <= value_at_margin < 1 if sigmoid in _MAY_REACH_ZERO else 0 < value_at_margin < 1
    if margin > 0 and not low_ok:
        raise ValueError(f"value_at_margin {value_at_margin} is out of range for the {sigmoid} sigmoid")
    inside = (x >= lower) & (x <= upper)
    if margin == 0:
        return inside.to(x.dtype)
    distance = torch.where(x < lower, lower - x, x - upper) / margin
    return torch.where(inside, 1.0, _sigmoid(distance, value_at_margin, sigmoid))
