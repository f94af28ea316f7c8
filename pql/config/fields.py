"""A config key as a dataclass field that carries its constraint, and the checks the keys use.

Each field's metadata holds what the error line expects (`allowed`), its check, its meaning
(`doc`) and, for a key whose default depends on the device, what null becomes (`on_device`).
`pql.config.build` checks the values, `pql.config.resolve` fills the on_device nulls and
`pql.config.reference` renders the docs from the same metadata.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import field
from typing import Any, TypeVar


class ConfigError(ValueError):
    """A config value that is not allowed; str() is the one line shown to the user."""

    def __init__(self, key: str, value: Any, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"config error: {key}={value!r} is not allowed; expected {allowed}")


def option(
    default,
    allowed: str | Callable[[], str],
    check: Callable[[Any], bool] = lambda v: True,
    doc: str = "",
    on_device: tuple | None = None,
):
    """A field with its constraint, checked when a config is built (None always passes for
    Optional fields).

    allowed: what the error line expects (a callable for text built from names that importing
    here would make a cycle of, or would import torch);
    doc: what the key means, where `allowed` does not say it (the reference shows both);
    on_device: (on CUDA, on CPU), what null becomes once the device is known (`resolve`); a
    string names the sibling key whose value it takes.
    """
    if on_device is not None:
        allowed = f"{allowed} (null: {_device_text(on_device[0])} on CUDA, {_device_text(on_device[1])} on CPU)"
    metadata = {"allowed": allowed, "check": check, "doc": doc, "on_device": on_device}
    if isinstance(default, (list, tuple)):
        return field(default_factory=lambda: tuple(default), metadata=metadata)
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _device_text(value) -> str:
    if value is None:
        return "no limit"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"`{value}`"
    return f"{value:,}"


def allowed_text(f: dataclasses.Field) -> str:
    """What field `f` allows, as its error line and the reference write it."""
    allowed = f.metadata["allowed"]
    return allowed() if callable(allowed) else allowed


def positive(v) -> bool:
    return v > 0


def non_negative(v) -> bool:
    return v >= 0


def at_least_one(v) -> bool:
    return v >= 1


def unit_interval(v) -> bool:
    return 0.0 <= v <= 1.0


def discount(v) -> bool:
    return 0.0 < v <= 1.0


def one_of(*choices):
    return lambda v: v in choices


def layer_widths(v) -> bool:
    return len(v) > 0 and all(h > 0 for h in v)


def device_name(v) -> bool:
    return v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit())


T = TypeVar("T")


def given(value: T | None) -> T:
    """A field that is null until pql fills it in (a default chosen for the device, or from the
    task), read where it is filled by then: after load_config (nstep, v_min, v_max) or resolve
    (the on_device fields and the devices)."""
    assert value is not None, "read before pql filled it in"
    return value
