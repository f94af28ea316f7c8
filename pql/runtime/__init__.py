"""The runtime: roles, processes, ratios and schedules. `train(cfg)` runs the algorithm that
cfg.algo names, on the runner that algorithm needs."""
from __future__ import annotations


def train(cfg) -> dict:
    """Train (or, with cfg.test, evaluate cfg.checkpoint). -> the final scalars ("eval/return" included).

    pql, pql_d, sac: the three-role runtime (pql/runtime/off_policy_runner.py); ppo: one process
    (ppo_runner.py); impala: an actor and a learner (impala_runner.py).
    """
    if cfg.algo.name == "ppo":
        from pql.runtime.ppo_runner import train_ppo

        return train_ppo(cfg)
    if cfg.algo.name == "impala":
        from pql.runtime.impala_runner import train_impala

        return train_impala(cfg)
    from pql.runtime.off_policy_runner import train_off_policy

    return train_off_policy(cfg)
