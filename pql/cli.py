"""Command-line checks that run before Hydra composes a job.

Hydra rejects an override of a key that does not exist with a multi-line message and exit
code 1; pql promises one line naming the key, the value and what is allowed, and exit code 2,
for every bad config. So overrides are checked here against the composed defaults first.
"""
from __future__ import annotations

import os

from pql.config import ConfigError


def _overrides(argv: list[str]) -> list[tuple[str, str]]:
    """The plain `key=value` overrides (not flags, `+`/`~` edits or hydra's own keys)."""
    out = []
    for arg in argv:
        if arg.startswith(("-", "+", "~")) or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        if not key.startswith("hydra."):
            out.append((key, value))
    return out


def check_overrides(argv: list[str], config_dir: str, config_name: str = "config") -> None:
    """Raise ConfigError for an override of an unknown key or a missing group option."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    overrides = _overrides(argv)
    groups = {}
    for key, value in overrides:
        group_dir = os.path.join(config_dir, key)
        if os.path.isdir(group_dir):
            options = sorted(f[:-5] for f in os.listdir(group_dir) if f.endswith(".yaml"))
            for choice in value.split(","):
                if choice not in options:
                    raise ConfigError(key, choice, f"one of {', '.join(options)}")
            groups[key] = value.split(",")[0]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name, overrides=[f"{k}={v}" for k, v in groups.items()])
    GlobalHydra.instance().clear()
    tree = OmegaConf.to_container(cfg, resolve=False)
    for key, value in overrides:
        if key in groups:
            continue
        node, parts = tree, key.split(".")
        for i, part in enumerate(parts):
            if not isinstance(node, dict) or part not in node:
                where = ".".join(parts[:i]) or "the top level"
                known = ", ".join(sorted(node)) if isinstance(node, dict) else "none (not a mapping)"
                raise ConfigError(key, value, f"an existing key; keys under {where}: {known}")
            node = node[part]
