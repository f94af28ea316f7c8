"""What PPO and IMPALA share: the rollout worker that steps the training envs with a Gaussian
policy, and the trajectory layout it fills."""

from __future__ import annotations

import torch

from pql.envs import ObsLayout, to_env_action
from pql.nets import GaussianActor, ObsNormalizer
from pql.runtime.distributed import ReplicaGroup
from pql.runtime.divergence import finite_actions
from pql.runtime.episodes import EpisodeStats


def trajectory_spec(obs_dim: int, act_dim: int) -> dict:
    """What a rollout records per env step. obs and final_obs are normalised, every column of them
    (pql.envs.ObsLayout: the policy's and the critic's); final_obs is info["final_obs"] (s_{t+1}
    of the same episode, the bootstrap state)."""
    return {
        "obs": ((obs_dim,), torch.float32),
        "action": ((act_dim,), torch.float32),
        "log_prob": ((), torch.float32),
        "reward": ((), torch.float32),
        "terminated": ((), torch.bool),
        "truncated": ((), torch.bool),
        "final_obs": ((obs_dim,), torch.float32),
    }


class RolloutWorker:
    """Steps the training envs with a Gaussian policy (reading `obs`'s policy columns) and records
    T-step trajectories. Owns the envs' current observations, the observation normaliser (updated
    with every observation, as in rsl_rl, merged over the replicas) and the statistics of the
    training episodes."""

    def __init__(self, env, obs: ObsLayout, normalizer: ObsNormalizer, group: ReplicaGroup, episodes: int = 0):
        """group: the replicas' collectives (the statistics merge); episodes: training episodes
        finished before (a resumed run continues its count)."""
        self.env, self.layout, self.normalizer, self.group = env, obs, normalizer, group
        self.obs = env.reset()
        self.episodes = EpisodeStats(env.num_envs, env.device, episodes, env.episode_metrics)

    def close(self) -> None:
        """Close the envs (Gymnasium's subprocesses, if any)."""
        self.env.close()

    @torch.no_grad()
    def collect(self, policy: GaussianActor, out: dict) -> None:
        """Fill every out[field][t] of `trajectory_spec` (tensors [T, N, ...]) with the next T steps."""
        for t in range(out["reward"].shape[0]):
            self.group.update_normalizer(self.normalizer, self.obs)
            obs = self.normalizer(self.obs)
            dist = policy.distribution(self.layout.policy(obs))
            action = dist.sample()
            # The envs get the sample clipped to the action box; the log-prob is of the raw sample.
            with finite_actions("actor", f"rollout step {t}"):
                next_obs, reward, terminated, truncated, info = self.env.step(
                    to_env_action(action.clamp(-1.0, 1.0), self.env)
                )
            out["obs"][t] = obs
            out["action"][t] = action
            out["log_prob"][t] = dist.log_prob(action).sum(-1)
            out["reward"][t] = reward
            out["terminated"][t] = terminated
            out["truncated"][t] = truncated
            out["final_obs"][t] = self.normalizer(info["final_obs"])
            self.episodes.track(reward, terminated | truncated, info)
            self.obs = next_obs
