"""PPO in one process: collect horizon × num_envs steps, then epochs × minibatches updates."""
from __future__ import annotations

from pql.algos.ppo import PPO, make_gaussian_policy
from pql.config import ConfigError
from pql.envs import build_env
from pql.nets import ObsNormalizer
from pql.runtime.on_policy.rollout import RolloutWorker, trajectory_spec
from pql.runtime.shared import alloc_tensors


class PPORunner:
    @staticmethod
    def make_policy(cfg, obs_dim: int, act_dim: int):
        return make_gaussian_policy(cfg.algo, obs_dim, act_dim)

    def __init__(self, cfg, device, obs_dim: int, act_dim: int, resume: dict | None):
        T, N = cfg.algo.horizon, cfg.task.num_envs
        if cfg.algo.minibatches > T * N:
            raise ConfigError("algo.minibatches", cfg.algo.minibatches,
                              f"at most algo.horizon * task.num_envs = {T * N} (one sample per minibatch at least)")
        self.cfg = cfg
        self.ppo = PPO(cfg.algo, obs_dim, act_dim, device)
        self.normalizer = ObsNormalizer(obs_dim).to(device)
        counters = {"env_steps": 0, "episodes": 0, "updates": 0}
        if resume is not None:
            self.ppo.load_state_dict(resume["roles"]["learner"])
            self.normalizer.load_state_dict(resume["normalizer"])
            counters = resume["counters"]
        self.env_steps, self.updates = counters["env_steps"], counters["updates"]
        self.env = build_env(cfg.task, N, device, cfg.runtime.seed)
        self.worker = RolloutWorker(self.env, self.normalizer, counters["episodes"])
        self.rollout = alloc_tensors(trajectory_spec(obs_dim, act_dim), (T, N), device)
        self.info: dict = {}

    def run(self, monitor) -> None:
        cfg = self.cfg
        while self.env_steps < cfg.runtime.max_env_steps and not monitor.should_stop():
            self.worker.collect(self.ppo.policy, self.rollout)
            self.info = self.ppo.update(self.rollout)
            self.env_steps += cfg.algo.horizon * cfg.task.num_envs
            self.updates += cfg.algo.epochs * cfg.algo.minibatches
            monitor.tick()
        monitor.tick(final=True)

    def counts(self) -> dict:
        return {"env_steps": self.env_steps, "learner": self.updates}

    def scalars(self) -> dict:
        return {**self.info, **self.worker.episodes.pop()}

    def policy_version(self) -> int:
        return self.updates  # the learner's update count is its policy's version

    def latest_policy(self) -> tuple:
        return self.ppo.policy, self.normalizer, self.updates

    def checkpoint(self) -> dict:
        counters = {"env_steps": self.env_steps, "episodes": self.worker.episodes.episodes, "updates": self.updates}
        return {"counters": counters,
                "policy": self.ppo.policy.state_dict(), "normalizer": self.normalizer.state_dict(),
                "roles": {"learner": self.ppo.state_dict()}}

    def close(self) -> None:
        self.env.close()
