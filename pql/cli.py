"""Command-line handling that runs before Hydra composes a job (and before torch is imported).

Hydra rejects an override of a key that does not exist with a multi-line message and exit
code 1; pql promises one line naming the key, the value and what is allowed, and exit code 2,
for every bad config. So overrides are checked here against the composed defaults first.

`task=isaacgym/<Task>` is not a file under cfg/task/: `expand_isaacgym_task` turns it into the
`isaacgym` group option plus `task.name`, and `import_isaacgym_first` loads Isaac Gym before
anything imports torch. This module imports neither torch nor hydra at import time.
"""
from __future__ import annotations

import contextlib
import itertools
import os

from pql.config import ConfigError

ISAACGYM_OPTION = "isaacgym"  # cfg/task/isaacgym.yaml
ISAACGYM_PREFIX = ISAACGYM_OPTION + "/"  # as in tasks.make("isaacgym/Ant", ...)


def expand_isaacgym_task(argv: list[str]) -> list[str]:
    """argv with `task=isaacgym/<Task>` (or a sweep `task=isaacgym/A,isaacgym/B`) written as
    `task=isaacgym task.name=isaacgym/<Task>`, the group option Hydra can compose; other
    arguments unchanged. Raises ConfigError for a sweep that mixes Isaac Gym and other tasks."""
    out = []
    for arg in argv:
        if not arg.startswith("task=") or ISAACGYM_PREFIX not in arg:
            out.append(arg)
            continue
        choices = arg[len("task="):].split(",")
        if not all(c.startswith(ISAACGYM_PREFIX) for c in choices):
            raise ConfigError("task", arg[len("task="):],
                              f"either {ISAACGYM_PREFIX}<Task> choices or other tasks in one sweep, not both")
        out += [f"task={ISAACGYM_OPTION}", f"task.name={','.join(choices)}"]
    return out


def wants_isaacgym(argv: list[str]) -> bool:
    """Whether argv picks an Isaac Gym task, as typed or as expand_isaacgym_task wrote it."""
    return any(arg.startswith((f"task={ISAACGYM_OPTION}", f"task.name={ISAACGYM_PREFIX}")) for arg in argv)


def import_isaacgym_first(argv: list[str]) -> None:
    """Import isaacgym if argv picks an Isaac Gym task: it refuses to load once torch is imported.

    Call it before anything imports torch. If the import fails, tasks.make imports it again
    when it builds the envs and turns the failure into a one-line TaskError.
    """
    if not wants_isaacgym(argv):
        return
    with contextlib.suppress(ImportError):  # reported by tasks.make, in one line, when it builds the envs
        import isaacgym  # noqa: F401


def quiet_replica(argv: list[str]) -> list[str]:
    """argv for this process: under torchrun, a replica of rank > 0 writes nothing (rank 0
    writes the run directory), so Hydra gets no run directory, config copy or log file of its
    own there (which would be a second, near-empty run directory)."""
    from pql.runtime.distributed import Replicas  # imports torch: only when called

    if Replicas.from_env().lead:
        return argv
    return [arg for arg in argv if not arg.startswith(("hydra.run.dir=", "hydra.output_subdir="))] + [
        "hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]


def _overrides(argv: list[str]) -> list[tuple[str, str]]:
    """The plain `key=value` overrides (not flags, `+`/`~` edits or hydra's own keys)."""
    out = []
    for arg in argv:
        if arg.startswith(("-", "+", "~", "hydra/")) or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        if not key.startswith("hydra."):
            out.append((key, value))
    return out


def _group_options(key: str, config_dir: str) -> list[str] | None:
    """The options of config group `key`: YAML files in cfg/<key>/ and ConfigStore nodes
    (pql.config.register_configs); None if `key` is no group."""
    from hydra.core.config_store import ConfigStore

    options, found = set(), False
    group_dir = os.path.join(config_dir, key)
    if os.path.isdir(group_dir):
        options |= {f[:-len(".yaml")] for f in os.listdir(group_dir) if f.endswith(".yaml")}
        found = True
    with contextlib.suppress(OSError):  # ConfigStore.list: `key` is no group there
        options |= {o[:-len(".yaml")] for o in ConfigStore.instance().list(key) if o.endswith(".yaml")}
        found = True
    return sorted(options) if found else None


def check_overrides(argv: list[str], config_dir: str, config_name: str = "config") -> None:
    """Raise ConfigError for an override of an unknown key or a missing group option.

    Keys are checked against every combination of the group choices a sweep names: an
    algorithm's keys are its own (`algo=pql,sac algo.exploration=ape_x` fails for sac)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from pql.config import register_configs

    register_configs()
    overrides = _overrides(argv)
    groups = {}
    for key, value in overrides:
        options = _group_options(key, config_dir)
        if options is None:
            continue
        for choice in value.split(","):
            if choice not in options:
                shown = [ISAACGYM_PREFIX + "<Task>" if (key, o) == ("task", ISAACGYM_OPTION) else o for o in options]
                raise ConfigError(key, choice, f"one of {', '.join(shown)}")
        groups[key] = value.split(",")
    for choices in itertools.product(*([f"{key}={choice}" for choice in values] for key, values in groups.items())):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            cfg = compose(config_name, overrides=list(choices))
        GlobalHydra.instance().clear()
        tree = OmegaConf.to_container(cfg, resolve=False)
        picked = f" with {' '.join(choices)}" if choices else ""
        for key, value in overrides:
            if key in groups:
                continue
            node, parts = tree, key.split(".")
            for i, part in enumerate(parts):
                if not isinstance(node, dict) or part not in node:
                    where = ".".join(parts[:i]) or "the top level"
                    known = ", ".join(sorted(node)) if isinstance(node, dict) else "none (not a mapping)"
                    raise ConfigError(key, value, f"an existing key{picked}; keys under {where}: {known}")
                node = node[part]
