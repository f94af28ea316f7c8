"""Stopping a run whose numbers have gone wrong, before it writes them into a checkpoint.

Learners check what they report anyway (losses and mean Q, read back every few dozen updates,
so no extra host sync): a value that is nan or ±inf, or a critic loss above
runtime.max_critic_loss (if set: how large a loss is depends on the task's reward scale),
raises `Diverged` naming the role, the quantity and the update. The run stops as for any failing
role (exit 1); the checkpoint already written stays as it was, and `check_state` keeps a
checkpoint with non-finite numbers from ever replacing it.
"""

from __future__ import annotations

import contextlib
import math

import torch


class Diverged(RuntimeError):
    """Training produced non-finite numbers or a loss past its bound; str() says where."""


def check_values(role: str, values: dict, at: str, bounds: dict | None = None) -> None:
    """values: {quantity: float}; bounds: {quantity: largest allowed value or None}; at: "critic
    update 1,200", say."""
    for quantity, value in values.items():
        bound = (bounds or {}).get(quantity)
        if not math.isfinite(value):
            raise Diverged(f"{role} diverged: {quantity} is {value} at {at}")
        if bound is not None and value > bound:
            raise Diverged(
                f"{role} diverged: {quantity} is {value:.4g} at {at}, above the bound {bound:g} "
                "(runtime.max_critic_loss)"
            )


@contextlib.contextmanager
def finite_actions(role: str, at: str):
    """Around a step of the envs: actions with nan or inf (the envs refuse them) mean the policy
    diverged; say so as such."""
    from tasks.base import NonFiniteActions

    try:
        yield
    except NonFiniteActions as e:
        raise Diverged(f"{role} diverged: the policy's {e} at {at}") from e


def check_state(state, where: str = "") -> None:
    """Raise Diverged if any floating-point tensor in a (nested) checkpoint state is not finite."""
    if isinstance(state, torch.Tensor):
        if state.is_floating_point() and not bool(torch.isfinite(state).all()):
            raise Diverged(f"checkpoint not written: {where.lstrip('/')} holds nan or inf (the run diverged)")
    elif isinstance(state, dict):
        for key, value in state.items():
            check_state(value, f"{where}/{key}")
    elif isinstance(state, (list, tuple)):
        for i, value in enumerate(state):
            check_state(value, f"{where}/{i}")
