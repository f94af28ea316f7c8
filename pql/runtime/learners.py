"""The two learner roles. The V-learner owns the replay, the critic and its target; the
P-learner owns the policy and an observation replay. Each keeps a local copy of the other's
network, refreshed from the versioned shared weights."""
from __future__ import annotations

import copy

import torch

from pql.algos.common import soft_update
from pql.nets import ObsNormalizer
from pql.replay import ReplayBuffer
from pql.runtime.control import C, RatioController, S
from pql.runtime.shared import transition_spec

STATS_EVERY = 50  # updates between stats reports (each report is a host sync on CUDA)


def make_sampler(replay_cfg, capacity: int, device):
    if replay_cfg.kind == "uniform":
        return None
    from pql.replay.prioritized import PrioritizedSampler

    return PrioritizedSampler(capacity, device, mode=replay_cfg.priority_mode, alpha=replay_cfg.priority_alpha,
                              beta0=replay_cfg.priority_beta0, beta_anneal_updates=replay_cfg.beta_anneal_updates,
                              eps=replay_cfg.priority_eps,
                              # On a GPU each check is a host sync per update; the CPU checks for free.
                              validate=torch.device(device).type == "cpu")


class _Learner:
    """What both learners share: ingesting the staging ring and the normaliser copy."""

    consumed_slot: C
    fields: tuple
    staged_priorities = False  # whether new items take the priorities the actor staged

    def __init__(self, cfg, shared, algo, device, ctrl: RatioController, obs_dim: int, spec: dict, sampler, seed: int):
        self.cfg, self.shared, self.algo, self.device, self.ctrl = cfg, shared, algo, device, ctrl
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.replay = ReplayBuffer(cfg.replay.capacity, spec, device, sampler, self.generator)
        self.normalizer = ObsNormalizer(obs_dim).to(device)
        self.normalizer_version = -1
        self.updates = 0

    def idle(self) -> None:
        self.ingest()

    def ingest(self) -> None:
        """Copy every staged batch this learner has not seen into its replay."""
        c, ring = self.shared.counters, self.shared.ring
        while c[self.consumed_slot] < c[C.ACTOR_STEPS]:
            slot = int(c[self.consumed_slot]) % self.shared.ring_slots
            self.replay.add({k: ring[k][slot] for k in self.fields},
                            ring["priority"][slot] if self.staged_priorities else None)
            c[self.consumed_slot] += 1

    def _sample(self, batch_size: int):
        self.normalizer_version = self.shared.normalizer.pull(self.normalizer, self.normalizer_version)
        batch, indices, weights = self.replay.sample(batch_size)
        for k in ("obs", "next_obs"):
            if k in batch:
                batch[k] = self.normalizer(batch[k])
        return batch, indices, weights


class VLearner(_Learner):
    name = "v_learner"
    consumed_slot = C.CONSUMED_V
    fields = ("obs", "action", "reward", "next_obs", "discount")

    def __init__(self, cfg, shared, algo, device, ctrl, obs_dim: int, act_dim: int):
        sampler = make_sampler(cfg.replay, cfg.replay.capacity, device)
        super().__init__(cfg, shared, algo, device, ctrl, obs_dim, transition_spec(obs_dim, act_dim), sampler,
                         cfg.runtime.seed + 2)
        self.staged_priorities = cfg.replay.actor_priorities
        self.critic = algo.make_critic().to(device)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.policy = algo.make_policy().to(device).requires_grad_(False)
        self.policy_version = -1
        self.optim = torch.optim.Adam(self.critic.parameters(), lr=cfg.algo.critic_lr)
        shared.critic.publish(self.critic)

    def ready(self) -> bool:
        return self.ctrl.critic_may_update()

    def step(self) -> None:
        self.ingest()
        if self.updates % self.cfg.runtime.policy_sync_every == 0:
            self.policy_version = self.shared.policy.pull(self.policy, self.policy_version)
        batch, indices, weights = self._sample(self.cfg.algo.batch_size)
        loss, td_abs, info = self.algo.critic_loss(self.critic, self.target_critic, self.policy, batch, weights)
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        self.optim.step()
        soft_update(self.target_critic, self.critic, self.cfg.algo.tau)
        self.replay.update_priorities(indices, td_abs)
        self.updates += 1
        if self.updates % self.cfg.runtime.critic_sync_every == 0:
            self.shared.critic.publish(self.critic)
        if self.updates % STATS_EVERY == 0:
            self.shared.stats[S.CRITIC_LOSS] = float(info["critic/loss"])
            self.shared.stats[S.Q_MEAN] = float(info["critic/q"])
            self.shared.stats[S.POLICY_VERSION_LAG] = self.shared.policy.current_version() - self.policy_version
        self.ctrl.advance(C.CRITIC_UPDATES)

    def state_dict(self) -> dict:
        return {"critic": self.critic.state_dict(), "target_critic": self.target_critic.state_dict(),
                "optim": self.optim.state_dict(), "sampler": self.replay.sampler.state_dict(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.critic.load_state_dict(state["critic"])
        self.target_critic.load_state_dict(state["target_critic"])
        self.optim.load_state_dict(state["optim"])
        self.generator.set_state(state["generator"])
        self.shared.critic.publish(self.critic)


class PLearner(_Learner):
    name = "p_learner"
    consumed_slot = C.CONSUMED_P
    fields = ("obs",)

    def __init__(self, cfg, shared, algo, device, ctrl, obs_dim: int, act_dim: int):
        super().__init__(cfg, shared, algo, device, ctrl, obs_dim, {"obs": ((obs_dim,), torch.float32)}, None,
                         cfg.runtime.seed + 3)
        self.policy = algo.make_policy().to(device)
        self.critic = algo.make_critic().to(device).requires_grad_(False)
        self.critic_version = -1
        self.optim = torch.optim.Adam(algo.policy_optim_params(self.policy))
        shared.policy.publish(self.policy)

    def ready(self) -> bool:
        return self.ctrl.policy_may_update()

    def step(self) -> None:
        self.ingest()
        self.critic_version = self.shared.critic.pull(self.critic, self.critic_version)
        batch, _, _ = self._sample(self.cfg.algo.batch_size)
        loss, info = self.algo.policy_loss(self.policy, self.critic, batch["obs"])
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        self.optim.step()
        self.updates += 1
        if self.updates % self.cfg.runtime.policy_sync_every == 0:
            self.shared.policy.publish(self.policy)
        if self.updates % STATS_EVERY == 0:
            self.shared.stats[S.POLICY_LOSS] = float(info["policy/loss"])
        self.ctrl.advance(C.POLICY_UPDATES)

    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(), "optim": self.optim.state_dict(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optim.load_state_dict(state["optim"])
        self.generator.set_state(state["generator"])
        self.shared.policy.publish(self.policy)
