"""Update rules, one module per algorithm; `make_off_policy` picks the one for a config."""
from __future__ import annotations


def make_off_policy(cfg, obs_dim: int, act_dim: int):
    """The update rules of an algorithm that runs on the three-role runtime (cfg: OffPolicyConfig)."""
    from pql.algos.pql import PQL
    from pql.algos.pql_d import PQLD
    from pql.algos.sac import SAC

    algos = {"pql": PQL, "pql_d": PQLD, "sac": SAC}
    if cfg.name not in algos:
        raise ValueError(f"algo={cfg.name} does not run on the off-policy runtime; known: {', '.join(algos)}")
    return algos[cfg.name](cfg, obs_dim, act_dim)
