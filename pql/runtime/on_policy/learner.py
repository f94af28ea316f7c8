"""What PPO's and IMPALA's runners share: one learner in the main process."""

from __future__ import annotations

from torch import nn

from pql.algos.ppo import make_gaussian_policy
from pql.envs import ObsLayout
from pql.nets import ObsNormalizer
from pql.runtime.contracts import Runner
from pql.runtime.device import host_values
from pql.runtime.distributed import role_group
from pql.runtime.divergence import check_values
from pql.runtime.settings import OnPolicySettings


class OnPolicyRunner(Runner):
    """The learner (a GaussianActorCritic of class `learner_cls`, its policy and value reading
    `obs`'s columns) and the observation normaliser (of all of them), restored from a checkpoint;
    the learner's update count is its policy's version. With several replicas the learners start
    from rank 0's networks and average their gradients (`group`). A subclass builds its actor side
    and provides `progress()` -> (this replica's env steps, training episodes) so far, `run`,
    `scalars` and `close`."""

    learner_cls: type
    trains_elsewhere = False  # the learner updates in the main process

    @staticmethod
    def make_policy(algo, obs_dim: int, act_dim: int) -> nn.Module:
        return make_gaussian_policy(algo, obs_dim, act_dim)

    def __init__(self, settings: OnPolicySettings, device, obs: ObsLayout, act_dim: int, resume: dict | None):
        self.settings, self.device, self.obs = settings, device, obs
        self.replicas = settings.process.replicas
        self.group = role_group(self.replicas, "learner", device, settings.process.waits.stall_s)
        self.learner = self.learner_cls(
            settings.algo, obs.policy_dim, act_dim, device, self.group.average_gradients, obs.critic_dim
        )
        self.group.broadcast(self.learner.policy)
        self.group.broadcast(self.learner.critic)
        self.normalizer = ObsNormalizer(obs.width).to(device)
        self.resumed = {"env_steps": 0, "episodes": 0, "updates": 0}  # the counters this launch starts from
        if resume is not None:
            learner = resume["roles"]["learner"]
            self.learner.load_state_dict(learner)
            # The statistics of every observation column; a checkpoint that predates the critic's
            # columns kept them as the policy's only.
            self.normalizer.load_state_dict(learner.get("normalizer", resume["normalizer"]))
            self.resumed = resume["counters"]
        self.updates = self.resumed["updates"]
        self.info: dict = {}  # the latest update's scalars

    def progress(self) -> tuple[int, int]:
        """(this replica's env steps, training episodes) so far."""
        raise NotImplementedError

    def _learned(self, info: dict) -> None:
        """Keep the scalars of the update just made, after checking its losses (Diverged)."""
        losses = {k: v for k, v in info.items() if k.startswith("loss/")}
        check_values("learner", dict(zip(losses, host_values(*losses.values()))), f"update {self.updates:,}")
        self.info = info

    def counts(self) -> dict:
        return {"env_steps": self.progress()[0] * self.replicas.world, "learner": self.updates}

    def policy_version(self) -> int:
        return self.updates

    def latest_policy(self) -> tuple:
        return self.learner.policy, self.normalizer.head(self.obs.policy_dim), self.updates

    def checkpoint(self) -> dict:
        env_steps, episodes = self.progress()
        return {
            "counters": {"env_steps": env_steps, "episodes": episodes, "updates": self.updates},
            "policy": self.learner.policy.state_dict(),
            "normalizer": self.normalizer.head(self.obs.policy_dim).state_dict(),
            "roles": {"learner": {**self.learner.state_dict(), "normalizer": self.normalizer.state_dict()}},
        }
