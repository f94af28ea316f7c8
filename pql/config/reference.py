"""The configuration reference in docs/configuration.md, rendered from the fields' metadata: one
table per group, each key with its default, its meaning and its allowed values.

python -m pql.config.reference prints it; python -m pql.config.reference docs/configuration.md
rewrites it there, between the reference markers.
"""

from __future__ import annotations

import dataclasses
import sys

from pql.config.algorithms import ALGORITHMS
from pql.config.fields import allowed_text
from pql.config.schema import Config, OffPolicyConfig
from pql.generated_docs import rewrite_section

_REFERENCE_START, _REFERENCE_END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def _default(f: dataclasses.Field):
    return f.default if f.default_factory is dataclasses.MISSING else f.default_factory()


def _yaml(value) -> str:
    """A default as it would be written in YAML or on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return f"[{', '.join(map(str, value))}]"
    if isinstance(value, float):
        return f"{value:g}".replace("e-0", "e-")
    return str(value)


def _rows(key: str, f: dataclasses.Field, value) -> list[str]:
    """Reference table rows of field `f` at `key` with default `value`; a nested group's flattened."""
    if dataclasses.is_dataclass(value):
        return [row for g in dataclasses.fields(value) for row in _rows(f"{key}.{g.name}", g, getattr(value, g.name))]
    meaning = "; ".join(text for text in (f.metadata["doc"], allowed_text(f)) if text).replace("|", r"\|")
    return [f"| `{key}` | `{_yaml(value)}` | {meaning} |"]


def _table(title: str, rows: list[str]) -> str:
    return "\n".join([title, "", "| key | default | meaning |", "|---|---|---|", *rows])


def _algo_reference() -> list[str]:
    """The algo group: the keys pql, pql_d and sac share, then per algorithm the keys it adds to
    the nearest class already shown or sets otherwise (all its keys if none is)."""
    default = Config().algo
    name = next(f for f in dataclasses.fields(default) if f.name == "name")
    blocks = [
        f"**algo**: {name.metadata['doc']} (`algo.name`, default `{default.name}`): {allowed_text(name)}. "
        "Each has its own keys."
    ]
    name_of = {algorithm.config_class(): algo_name for algo_name, algorithm in ALGORITHMS.items()}
    off_policy = [n for cls, n in name_of.items() if issubclass(cls, OffPolicyConfig)]
    tables: list[tuple[str, type, type | None]] = [
        (f"*{', '.join(off_policy[:-1])} and {off_policy[-1]} share*", OffPolicyConfig, None)
    ]
    for cls, algo_name in name_of.items():
        base = next((c for c in cls.__mro__[1:] if c is OffPolicyConfig or c in name_of), None)
        title = (
            f"*{algo_name}*"
            if base is None
            else f"*{algo_name} adds, or sets otherwise*"
            if base is OffPolicyConfig
            else f"*{algo_name} adds to {name_of[base]}'s, or sets otherwise*"
        )
        tables.append((title, cls, base))
    for title, cls, base in tables:
        shown = set(_class_rows(base)) if base else set()
        blocks.append(_table(title, [row for row in _class_rows(cls) if row not in shown]))
    return blocks


def _class_rows(cls: type) -> list[str]:
    """The rows of an algorithm config class's keys (but its name) at its defaults."""
    return [row for f in dataclasses.fields(cls) if f.name != "name" for row in _rows(f"algo.{f.name}", f, _default(f))]


def reference_markdown() -> str:
    """The configuration reference: one table per group of Config (the key, its default and its
    meaning and allowed values)."""
    blocks, top = [], []
    for f in dataclasses.fields(Config):
        value = _default(f)
        if f.name == "algo":
            blocks += _algo_reference()
        elif dataclasses.is_dataclass(value):
            blocks.append(_table(f"**{f.name}**", _rows(f.name, f, value)))
        else:
            top += _rows(f.name, f, value)
    return "\n\n".join([*blocks, _table("**top level**", top)])


if __name__ == "__main__":
    if len(sys.argv) > 1:
        rewrite_section(sys.argv[1], _REFERENCE_START, _REFERENCE_END, reference_markdown())
    else:
        print(reference_markdown())
