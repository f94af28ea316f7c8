"""The two learner roles. The V-learner owns the replay, the critic and its target; the
P-learner owns the policy and an observation replay. Each keeps a local copy of the other's
network, refreshed from the versioned shared weights. With several replicas each learner
starts from rank 0's network and averages its gradients with the same learner of every other
replica before each step, so the replicas' networks stay identical."""

from __future__ import annotations

import torch

from pql.algos.off_policy import OffPolicyAlgorithm, Part
from pql.bulk import disk_size, fits_disk, nbytes, read_bulk, stem_of, write_bulk
from pql.envs import ObsLayout
from pql.nets import ObsNormalizer, ReturnScale
from pql.replay import ReplayBuffer, UniformSampler, make_sampler, replay_layout, sampler_layout_kind
from pql.replay.mirror import MirrorAugment
from pql.replay.nstep import transition_spec
from pql.runtime.contracts import CRITIC, DELIVERED, NORMALIZER, POLICY, RETURN_SCALE, Role
from pql.runtime.control import PQLShared, RatioController
from pql.runtime.device import InFlight, host_values
from pql.runtime.distributed import ReplicaGroup
from pql.runtime.divergence import check_values
from pql.runtime.settings import LearnerSettings, OffPolicySettings, PLearnerSettings, VLearnerSettings
from pql.runtime.weight_sync import WeightsReader

LOSS_REPORT_EVERY = 50  # updates between reports of the losses (a host sync on CUDA)


def observation_spec(obs_dim: int) -> dict:
    """What the P-learner's replay holds: observations only."""
    return {"obs": ((obs_dim,), torch.float32)}


def replay_layouts(settings: OffPolicySettings, obs_dim: int, act_dim: int) -> dict[str, dict]:
    """Each learner's replay layout (pql.replay.replay_layout) under `settings`."""
    v = settings.v_learner
    return {
        "v_learner": replay_layout(
            v.capacity, transition_spec(obs_dim, act_dim, v.keeps_first_step), sampler_layout_kind(v.replay)
        ),
        "p_learner": replay_layout(settings.p_learner.capacity, observation_spec(obs_dim), UniformSampler.kind),
    }


class _Learner(Role):
    """What both learners share: ingesting the staging ring, the normaliser copy, sampling batches
    of normalised observations split into the policy's and the critic's (`obs`), and their state:
    the part of the algorithm they train (`part`: its networks and optimiser), the generator, and
    on loading, a publication of the networks this learner owns (`publishes`, each under its
    attribute's name in the algorithm and in shared.weights) so that every copy starts from them."""

    name: str
    consumed_counter: str  # the counter of staged batches this learner has copied
    update_counter: str  # the counter of this learner's updates
    fields: tuple[str, ...]
    publishes: tuple[str, ...]
    copied_networks: tuple[str, ...]
    part: Part
    publish_every: int
    staged_priorities = False  # whether new items take the priorities the actor staged

    def __init__(
        self,
        settings: LearnerSettings,
        shared: PQLShared,
        algorithm: OffPolicyAlgorithm,
        ratios: RatioController,
        obs: ObsLayout,
        spec: dict,
        sampler,
        seed_offset: int,
        group: ReplicaGroup,
    ):
        self.shared, self.algorithm, self.ratios, self.group = shared, algorithm, ratios, group
        self.obs_layout = obs
        self.device = device = settings.device
        self.batch_size, self.publish_every = settings.batch_size, settings.publish_every
        self.snapshot_dir = settings.snapshot_dir
        self.replay_size_told = False
        self.generator = torch.Generator(device=device).manual_seed(settings.seed + seed_offset)
        self.replay = ReplayBuffer(settings.capacity, spec, device, sampler, self.generator)
        self.augment = None if obs.mirror is None or not settings.mirror else MirrorAugment(obs.mirror, device)
        self.normalizer = ObsNormalizer(obs.width).to(device)
        self.normalizer_reader = WeightsReader(shared.weights[NORMALIZER], self.normalizer)
        self.updates = 0
        self.ingested = getattr(shared.counters, self.consumed_counter)  # staged batches whose copy is queued
        self.copies = InFlight(device, wait=group.ordered)  # copies out of the ring not landed yet

    def idle(self) -> None:
        self.ingest()

    def ingest(self) -> None:
        """Queue a copy of every staged batch not yet taken into the replay. A ring slot counts as
        consumed (free for the actor to overwrite) only once its copy has landed."""
        ring = self.shared.ring
        staged = self.shared.counters.actor_steps
        while self.ingested < staged:
            slot = self.ingested % self.shared.ring_slots
            self.replay.add(
                {k: ring[k][slot] for k in self.fields}, ring["priority"][slot] if self.staged_priorities else None
            )
            self.copies.mark()
            self.ingested += 1
        landed = self.copies.landed()
        if landed:
            self.shared.add(self.consumed_counter, landed)

    def _sample(self, batch_size: int):
        """A batch of `batch_size` transitions, with algo.mirror `2 batch_size` (its mirror images
        after it), normalized and split; the replay's indices [batch_size] and weights [as the batch]."""
        self.normalizer_reader.pull()
        batch, indices, weights = self.replay.sample(batch_size)
        if self.augment is not None:
            batch, weights = self.augment(batch), weights.repeat(2)
        for k in ("obs", "next_obs", "next_obs1"):
            if k in batch:
                batch[k] = self.normalizer(batch[k])
        return self.obs_layout.split(batch), indices, weights

    def step(self) -> None:
        """One update (`_update`), then the publication and the loss report when due, then count it."""
        self.ingest()
        info = self._update()
        if self.updates % self.publish_every == 0:
            for name in self.publishes:
                self.shared.weights[name].publish(getattr(self.algorithm, name))
        if self.updates % LOSS_REPORT_EVERY == 0:
            self._report(info)
        self.shared.add(self.update_counter)

    def _update(self) -> dict:
        """One update of this learner's network from a sampled batch, counted. -> its scalars."""
        raise NotImplementedError

    def _report(self, info: dict) -> None:
        """Post the update's losses to the shared statistics, checked (Diverged)."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {
            **self.algorithm.state_dict(self.part),
            "generator": self.generator.get_state(),
            "updates": self.updates,
            "copies": {name: getattr(self, f"{name}_reader").state_dict() for name in self.copied_networks},
            "replay": self._save_replay(),
        }

    def _save_replay(self) -> dict | None:
        """The replay's plain state, its bulk written beside the checkpoint (None: left out, by
        runtime.checkpoint_replay=false or for want of disk space)."""
        if self.snapshot_dir is None:
            return None
        small, bulk = self.replay.state()
        size = nbytes(bulk)
        if not fits_disk(self.snapshot_dir, size):
            print(
                f"pql: warning: {self.name}: no room for its replay ({disk_size(size)}, twice that free needed) "
                f"in {self.snapshot_dir}: this checkpoint leaves it out, and a resume from it refills the replay",
                flush=True,
            )
            return None
        if not self.replay_size_told:
            self.replay_size_told = True
            free = self.replay.capacity - self.replay.size
            full = size + sum(free * v[0].numel() * v.element_size() for v in self.replay.storage.values())
            print(
                f"pql: {self.name}: checkpoints hold its replay, about {disk_size(full)} when full "
                f"({disk_size(size)} now; runtime.checkpoint_replay=false leaves it out)",
                flush=True,
            )
        try:
            stem = stem_of(f"replay-{self.name}", self.group.replicas.rank)
            return {**small, "bulk": write_bulk(self.snapshot_dir, stem, bulk)}
        except OSError as e:  # a full disk, as for the checkpoint itself: training goes on
            print(f"pql: warning: {self.name}: could not write its replay ({e}); this checkpoint leaves it out")
            return None

    def load_state_dict(self, state: dict) -> None:
        self.algorithm.load_state_dict(state, self.part)
        self.generator.set_state(state["generator"])
        self.updates = state["updates"]
        for name, copy_state in state["copies"].items():
            getattr(self, f"{name}_reader").load_state_dict(copy_state)
        if state["replay"] is not None:
            replay = state["replay"]
            read_bulk(replay["bulk"]["file"], replay["bulk"], self.replay.load_targets(replay))
            self.replay.load_state(replay)
        for name in self.publishes:
            self.shared.weights[name].publish(getattr(self.algorithm, name), wait=True)


class VLearner(_Learner):
    name = "v_learner"
    consumed_counter, update_counter = "consumed_v", "critic_updates"
    publishes = (CRITIC,)
    copied_networks: tuple[str, ...] = ("normalizer", "policy")
    part = "critic"

    def __init__(
        self,
        settings: VLearnerSettings,
        shared: PQLShared,
        algorithm: OffPolicyAlgorithm,
        ratios: RatioController,
        obs: ObsLayout,
        act_dim: int,
        group: ReplicaGroup,
    ):
        device = settings.device
        sampler = make_sampler(settings.replay, settings.capacity, device)
        spec = transition_spec(obs.width, act_dim, settings.keeps_first_step)
        self.fields = tuple(spec)
        super().__init__(settings, shared, algorithm, ratios, obs, spec, sampler, 2, group)
        self.settings = settings
        self.staged_priorities = settings.staged_priorities
        group.broadcast(algorithm.critic)  # before its target is made from it
        self.policy_reader = WeightsReader(shared.weights[POLICY], algorithm.policy)
        # algo.return_scaling: the rewards divided by the return's scale, the actor's latest.
        support = settings.return_support
        self.return_scale = None if support is None else ReturnScale(*support).to(device)
        if self.return_scale is not None:
            self.return_scale_reader = WeightsReader(shared.weights[RETURN_SCALE], self.return_scale)
            self.copied_networks = (*self.copied_networks, "return_scale")
        algorithm.prepare(self.part)
        shared.weights[CRITIC].publish(algorithm.critic, wait=True)

    def ready(self) -> bool:
        return self.ratios.critic_may_update()

    def _update(self) -> dict:
        if self.updates % self.settings.pull_every == 0:
            self.policy_reader.pull()
        batch, indices, weights = self._sample(self.batch_size)
        if self.return_scale is not None:
            self.return_scale_reader.pull()
            for k in ("reward", "reward1"):
                if k in batch:
                    batch[k] = self.return_scale(batch[k])
        td_abs, info = self.algorithm.update_critic(batch, weights)
        self.updates += 1
        if self.augment is not None:  # a transition's priority: its and its image's mean |δ|
            td_abs = td_abs.view(2, -1).mean(dim=0)
        self.replay.update_priorities(indices, td_abs)
        return info

    def _report(self, info: dict) -> None:
        stats = self.shared.stats
        scale = torch.ones((), device=self.device) if self.return_scale is None else self.return_scale.scale()
        stats.critic_loss, stats.q_mean, stats.return_scale = host_values(
            info["critic/loss"], info["critic/q"] * scale, scale
        )
        check_values(
            self.name,
            {"critic loss": stats.critic_loss, "mean Q": stats.q_mean},
            f"critic update {self.updates:,}",
            {"critic loss": self.settings.max_critic_loss},
        )
        stats.policy_version_lag = self.shared.weights[POLICY].current_version() - self.policy_reader.version


class PLearner(_Learner):
    name = "p_learner"
    consumed_counter, update_counter = "consumed_p", "policy_updates"
    fields = ("obs",)
    publishes: tuple[str, ...] = (POLICY,)
    copied_networks = ("normalizer", "critic")
    part = "policy"

    def __init__(
        self,
        settings: PLearnerSettings,
        shared: PQLShared,
        algorithm: OffPolicyAlgorithm,
        ratios: RatioController,
        obs: ObsLayout,
        group: ReplicaGroup,
    ):
        super().__init__(settings, shared, algorithm, ratios, obs, observation_spec(obs.width), None, 3, group)
        group.broadcast(algorithm.policy)
        self.critic_reader = WeightsReader(shared.weights[CRITIC], algorithm.critic)
        if algorithm.policy_average:
            self.publishes = (POLICY, DELIVERED)
        algorithm.prepare(self.part)
        for name in self.publishes:
            shared.weights[name].publish(getattr(algorithm, name), wait=True)

    def ready(self) -> bool:
        return self.ratios.policy_may_update()

    def _update(self) -> dict:
        self.critic_reader.pull()
        batch, _, _ = self._sample(self.batch_size)
        info = self.algorithm.update_policy(batch["obs"], batch["critic_obs"])
        self.updates += 1
        return info

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.algorithm.resume_policy_count(self.updates)

    def _report(self, info: dict) -> None:
        stats = self.shared.stats
        if "policy/alpha" in info:  # SAC's
            stats.policy_loss, stats.alpha, stats.entropy = host_values(
                info["policy/loss"], info["policy/alpha"], info["policy/entropy"]
            )
        else:
            (stats.policy_loss,) = host_values(info["policy/loss"])
        check_values(self.name, {"policy loss": stats.policy_loss}, f"policy update {self.updates:,}")
