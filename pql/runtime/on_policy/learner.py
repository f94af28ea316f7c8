"""What PPO's and IMPALA's runners share: one learner in the main process."""
from __future__ import annotations

from pql.algos.ppo import make_gaussian_policy
from pql.nets import ObsNormalizer


class OnPolicyRunner:
    """The learner (a GaussianActorCritic of class `learner_cls`) and its observation normaliser,
    restored from a checkpoint; the learner's update count is its policy's version. A subclass
    builds its actor side and provides `progress()` -> (env steps, training episodes) so far,
    `run`, `scalars` and `close`."""

    learner_cls: type

    @staticmethod
    def make_policy(cfg, obs_dim: int, act_dim: int):
        return make_gaussian_policy(cfg.algo, obs_dim, act_dim)

    def __init__(self, cfg, device, obs_dim: int, act_dim: int, resume: dict | None):
        self.cfg, self.device = cfg, device
        self.learner = self.learner_cls(cfg.algo, obs_dim, act_dim, device)
        self.normalizer = ObsNormalizer(obs_dim).to(device)
        self.resumed = {"env_steps": 0, "episodes": 0, "updates": 0}  # the counters this launch starts from
        if resume is not None:
            self.learner.load_state_dict(resume["roles"]["learner"])
            self.normalizer.load_state_dict(resume["normalizer"])
            self.resumed = resume["counters"]
        self.updates = self.resumed["updates"]
        self.info: dict = {}  # the latest update's scalars

    def counts(self) -> dict:
        return {"env_steps": self.progress()[0], "learner": self.updates}

    def policy_version(self) -> int:
        return self.updates

    def latest_policy(self) -> tuple:
        return self.learner.policy, self.normalizer, self.updates

    def checkpoint(self) -> dict:
        env_steps, episodes = self.progress()
        return {"counters": {"env_steps": env_steps, "episodes": episodes, "updates": self.updates},
                "policy": self.learner.policy.state_dict(), "normalizer": self.normalizer.state_dict(),
                "roles": {"learner": self.learner.state_dict()}}
