"""PPO in one process: collect horizon × num_envs steps, then epochs × minibatches updates."""

from __future__ import annotations

from pql.algos.ppo import PPO
from pql.config import PPOConfig
from pql.envs import ObsLayout, build_env
from pql.runtime.on_policy.learner import OnPolicyRunner
from pql.runtime.on_policy.rollout import RolloutWorker, trajectory_spec
from pql.runtime.settings import OnPolicySettings
from pql.runtime.shared import alloc_tensors


class PPORunner(OnPolicyRunner):
    learner_cls = PPO

    def __init__(self, settings: OnPolicySettings, device, obs: ObsLayout, act_dim: int, resume: dict | None):
        envs, algo = settings.envs, settings.algo
        assert isinstance(algo, PPOConfig)
        self.algo = algo
        T, N = algo.horizon, envs.num_envs
        super().__init__(settings, device, obs, act_dim, resume)
        self.env_steps = self.resumed["env_steps"]
        self.env = build_env(envs.task, N, device, envs.seed)
        self.worker = RolloutWorker(self.env, obs, self.normalizer, self.group, self.resumed["episodes"])
        self.rollout = alloc_tensors(trajectory_spec(obs.width, act_dim), (T, N), device)
        self.agreed = 0  # the stop code the replicas agreed on (pql/runtime/stopping.py)

    def run(self, monitor) -> None:
        settings, algo = self.settings, self.algo
        while not self.replicas.budget_spent(self.env_steps, settings.max_env_steps):
            self.agreed = self.group.agree(monitor.stop_code())  # the replicas agree on stopping early
            if self.agreed:
                break
            self.worker.collect(self.learner.policy, self.rollout)
            info = self.learner.update(self.obs.split_rollout(self.rollout))
            self.env_steps += algo.horizon * settings.envs.num_envs
            self.updates += algo.epochs * algo.minibatches
            self._learned(info)
            monitor.tick()
        monitor.tick(final=True)

    def progress(self) -> tuple[int, int]:
        return self.env_steps, self.worker.episodes.episodes

    def finished_by(self) -> int:
        return self.agreed

    def scalars(self) -> dict:
        return {**self.info, **self.worker.episodes.pop()}

    def close(self) -> None:
        self.env.close()
