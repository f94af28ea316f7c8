"""The one registry of algorithms: for each `algo=` name, its config class, its update rules and
its runner."""

from __future__ import annotations

import importlib
from dataclasses import dataclass


def _load(target: str):
    module, attribute = target.split(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class Algorithm:
    """An algorithm: its config class, update rules and runner as "module:attribute", imported on
    use: the rules and runner so that importing pql.config never imports torch, the config class
    so that pql/config/schema.py, whose algo.name is checked against this registry, can import it."""

    config: str
    rules: str
    runner: str

    def config_class(self) -> type:
        return _load(self.config)

    def load_rules(self):
        return _load(self.rules)

    def load_runner(self):
        return _load(self.runner)


_OFF_POLICY = "pql.runtime.off_policy.runner:OffPolicyRunner"
ALGORITHMS = {
    "pql": Algorithm("pql.config.schema:PQLConfig", "pql.algos.pql:PQL", _OFF_POLICY),
    "pql_d": Algorithm("pql.config.schema:PQLDConfig", "pql.algos.pql:PQL", _OFF_POLICY),
    "sac": Algorithm("pql.config.schema:SACConfig", "pql.algos.sac:SAC", _OFF_POLICY),
    "ppo": Algorithm("pql.config.schema:PPOConfig", "pql.algos.ppo:PPO", "pql.runtime.on_policy.ppo_runner:PPORunner"),
    "impala": Algorithm(
        "pql.config.schema:ImpalaConfig", "pql.algos.impala:Impala", "pql.runtime.on_policy.impala_runner:ImpalaRunner"
    ),
}
