"""The runtime: what every runner shares at this level (ratio counting, waiting, weight sync, the
shared state and its ring, the process supervisor, the run skeleton), and one package per kind of
runner: off_policy/ (PQL, PQL-D, SAC: actor, V-learner, P-learner) and on_policy/ (PPO, IMPALA).
`train(cfg)` runs the runner that pql.config.ALGORITHMS names for cfg.algo."""

from pql.runtime.run import train

__all__ = ["train"]
