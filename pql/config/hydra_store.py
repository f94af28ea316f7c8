"""The defaults as Hydra's ConfigStore nodes, which cfg/config.yaml composes."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from pql.config.algorithms import ALGORITHMS
from pql.config.build import to_dict
from pql.config.schema import Config


def register_configs() -> None:
    """Store the defaults in Hydra's ConfigStore, where cfg/config.yaml composes them from:
    `pql_base` (every group but algo) and one `algo` option per algorithm, and register the
    `path_part` resolver that cfg/config.yaml names run directories with. Calling it again
    stores the same nodes again.

    Plain mappings, not the dataclasses: OmegaConf would type-check those with multi-line
    errors of its own, before `load_config` can give its one line.
    """
    # A run directory's name holds the task's: one directory, not one per "/" of dmc/cheetah-run.
    OmegaConf.register_new_resolver("path_part", lambda name: str(name).replace("/", "-"), replace=True)
    store = ConfigStore.instance()
    base = to_dict(Config())
    del base["algo"]
    store.store(name="pql_base", node=base)
    for name, algorithm in ALGORITHMS.items():
        store.store(group="algo", name=name, node=to_dict(algorithm.config_class()()))
