"""The two learner roles. The V-learner owns the replay, the critic and its target; the
P-learner owns the policy and an observation replay. Each keeps a local copy of the other's
network, refreshed from the versioned shared weights."""
from __future__ import annotations

import copy

import torch

from pql.algos.common import adam, soft_update
from pql.nets import ObsNormalizer
from pql.replay import ReplayBuffer
from pql.runtime.control import C, RatioController, S
from pql.runtime.device import InFlight, host_values
from pql.runtime.shared import transition_spec
from pql.runtime.weight_sync import WeightsReader

STATS_EVERY = 50  # updates between stats reports (each report is a host sync on CUDA)


def make_sampler(replay_cfg, capacity: int, device):
    if replay_cfg.kind == "uniform":
        return None
    from pql.replay.prioritized import PrioritizedSampler

    return PrioritizedSampler(capacity, device, mode=replay_cfg.priority_mode, alpha=replay_cfg.priority_alpha,
                              beta0=replay_cfg.priority_beta0, beta_anneal_updates=replay_cfg.beta_anneal_updates,
                              eps=replay_cfg.priority_eps, rerank_every=replay_cfg.rerank_every,
                              # On a GPU each check is a host sync per update; the CPU checks for free.
                              validate=torch.device(device).type == "cpu")


def compile_update(fn, enabled: bool, device: torch.device):
    """`fn` (a learner's loss, fixed shapes) compiled when `enabled`: on CUDA as CUDA graphs
    (torch.compile's "reduce-overhead": the forward and backward replay as one graph launch each
    instead of dozens of kernel launches), on the CPU with inductor's default fusion."""
    if not enabled:
        return fn
    compiled = torch.compile(fn, mode="reduce-overhead" if device.type == "cuda" else "default", dynamic=False)

    def call(*args):
        # One call is one training step: the outputs of the previous step's graphs may be reused.
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(*args)

    return call


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
        self.normalizer_reader = WeightsReader(shared.normalizer, self.normalizer)
        self.updates = 0
        self.ingested = int(shared.counters[self.consumed_slot])  # staged batches whose copy is queued
        self.copies = InFlight(device)  # copies out of the ring not landed yet

    def idle(self) -> None:
        self.ingest()

    def ingest(self) -> None:
        """Queue a copy of every staged batch not yet taken into the replay. A ring slot counts as
        consumed (free for the actor to overwrite) only once its copy has landed."""
        c, ring = self.shared.counters, self.shared.ring
        staged = int(c[C.ACTOR_STEPS])
        while self.ingested < staged:
            slot = self.ingested % self.shared.ring_slots
            self.replay.add({k: ring[k][slot] for k in self.fields},
                            ring["priority"][slot] if self.staged_priorities else None)
            self.copies.mark()
            self.ingested += 1
        landed = self.copies.landed()
        if landed:
            self.ctrl.advance(self.consumed_slot, landed)

    def _sample(self, batch_size: int):
        self.normalizer_reader.pull()
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
        self.policy_reader = WeightsReader(shared.policy, self.policy)
        self.optim = adam(self.critic.parameters(), cfg.algo.critic_lr)
        self.critic_loss = compile_update(
            lambda batch, weights: algo.critic_loss(self.critic, self.target_critic, self.policy, batch, weights),
            cfg.runtime.compile, device)
        shared.critic.publish(self.critic, wait=True)

    def ready(self) -> bool:
        return self.ctrl.critic_may_update()

    def step(self) -> None:
        self.ingest()
        if self.updates % self.cfg.runtime.policy_sync_every == 0:
            self.policy_reader.pull()
        batch, indices, weights = self._sample(self.cfg.algo.batch_size)
        loss, td_abs, info = self.critic_loss(batch, weights)
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        self.optim.step()
        soft_update(self.target_critic, self.critic, self.cfg.algo.tau)
        self.replay.update_priorities(indices, td_abs)
        self.updates += 1
        if self.updates % self.cfg.runtime.critic_sync_every == 0:
            self.shared.critic.publish(self.critic)
        if self.updates % STATS_EVERY == 0:
            self.shared.stats[S.CRITIC_LOSS], self.shared.stats[S.Q_MEAN] = host_values(
                info["critic/loss"], info["critic/q"])
            self.shared.stats[S.POLICY_VERSION_LAG] = self.shared.policy.current_version() - self.policy_reader.version
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
        self.shared.critic.publish(self.critic, wait=True)


class PLearner(_Learner):
    name = "p_learner"
    consumed_slot = C.CONSUMED_P
    fields = ("obs",)

    def __init__(self, cfg, shared, algo, device, ctrl, obs_dim: int, act_dim: int):
        super().__init__(cfg, shared, algo, device, ctrl, obs_dim, {"obs": ((obs_dim,), torch.float32)}, None,
                         cfg.runtime.seed + 3)
        self.policy = algo.make_policy().to(device)
        self.critic = algo.make_critic().to(device).requires_grad_(False)
        self.critic_reader = WeightsReader(shared.critic, self.critic)
        self.optim = adam(algo.policy_optim_params(self.policy))
        self.policy_loss = compile_update(lambda obs: algo.policy_loss(self.policy, self.critic, obs),
                                          cfg.runtime.compile, device)
        shared.policy.publish(self.policy, wait=True)

    def ready(self) -> bool:
        return self.ctrl.policy_may_update()

    def step(self) -> None:
        self.ingest()
        self.critic_reader.pull()
        batch, _, _ = self._sample(self.cfg.algo.batch_size)
        loss, info = self.policy_loss(batch["obs"])
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        self.optim.step()
        self.updates += 1
        if self.updates % self.cfg.runtime.policy_sync_every == 0:
            self.shared.policy.publish(self.policy)
        if self.updates % STATS_EVERY == 0:
            self.shared.stats[S.POLICY_LOSS], = host_values(info["policy/loss"])
        self.ctrl.advance(C.POLICY_UPDATES)

    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(), "optim": self.optim.state_dict(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optim.load_state_dict(state["optim"])
        self.generator.set_state(state["generator"])
        self.shared.policy.publish(self.policy, wait=True)
