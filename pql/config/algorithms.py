"""The one registry of algorithms: for each `algo=` name, its config class, its update rules and
its runner."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from pql.config.schema import ImpalaConfig, PPOConfig, PQLConfig, PQLDConfig, SACConfig


def _load(target: str):
    module, attribute = target.split(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class Algorithm:
    """An algorithm: its config class, and its update rules and runner as "module:attribute",
    imported on use so that importing pql.config never imports torch."""

    config: type
    rules: str
    runner: str

    def load_rules(self):
        return _load(self.rules)

    def load_runner(self):
        return _load(self.runner)


ALGORITHMS = {
    "pql": Algorithm(PQLConfig, "pql.algos.pql:PQL", "pql.runtime.off_policy.runner:OffPolicyRunner"),
    "pql_d": Algorithm(PQLDConfig, "pql.algos.pql:PQL", "pql.runtime.off_policy.runner:OffPolicyRunner"),
    "sac": Algorithm(SACConfig, "pql.algos.sac:SAC", "pql.runtime.off_policy.runner:OffPolicyRunner"),
    "ppo": Algorithm(PPOConfig, "pql.algos.ppo:PPO", "pql.runtime.on_policy.ppo_runner:PPORunner"),
    "impala": Algorithm(ImpalaConfig, "pql.algos.impala:Impala", "pql.runtime.on_policy.impala_runner:ImpalaRunner"),
}
