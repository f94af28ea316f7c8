"""IMPALA (Espeholt et al., 2018): an actor and a learner joined by a queue of trajectory slots.

runtime.mode=process: the actor runs in its own process under the process supervisor (a role
that raises or dies stops the run with its error within seconds); the learner, evaluation,
logging and checkpoints run in the main process. runtime.mode=sequential: the actor fills a
slot, then the learner learns from it, in turn: one process, deterministic for a seed, zero
policy lag.

The ring is `algo.queue_size` slots of T-step trajectories from N envs ([slots, T, N, ...],
shared memory on CPU, CUDA IPC on GPU), each with the policy version μ that made it.
"""

from __future__ import annotations

import torch

from pql.algos.impala import Impala
from pql.algos.ppo import make_gaussian_policy
from pql.config import ImpalaConfig
from pql.envs import ObsLayout, build_env
from pql.nets import ObsNormalizer
from pql.runtime.contracts import NORMALIZER, POLICY
from pql.runtime.device import synchronize, use_device
from pql.runtime.distributed import role_group
from pql.runtime.episodes import latest_episode_scalars
from pql.runtime.on_policy.learner import OnPolicyRunner
from pql.runtime.on_policy.rollout import RolloutWorker, trajectory_spec
from pql.runtime.settings import OnPolicySettings, Waits
from pql.runtime.shared import RunCounters, RunStats, SharedState, make_shared_state
from pql.runtime.supervisor import ProcessRuntime, exit_without_teardown, role, role_context, role_process
from pql.runtime.waiting import Waiter
from pql.runtime.weight_sync import SharedWeights, WeightsReader


class QueueCounters(RunCounters):
    """published: trajectory batches the actor has put in the queue (writer: actor); taken: those
    the learner has taken out (writer: learner)."""

    published: int
    taken: int
    progress = ("published", "taken")


class TrajectoryQueue:
    """IMPALA's schedule: the actor may fill a slot while one is free, the learner may take one
    while one is full. No ratio: the queue's size bounds how far the actor runs ahead."""

    def __init__(self, counters: QueueCounters, slots: int):
        self.counters, self.slots = counters, slots

    def slot_free(self) -> bool:
        return self.counters.published - self.counters.taken < self.slots

    def slot_full(self) -> bool:
        return self.counters.taken < self.counters.published

    def started(self) -> bool:
        return self.counters.published > 0 and self.counters.taken > 0


def trajectory_ring_spec(obs_dim: int, act_dim: int) -> dict:
    """A trajectory and, for each step, the version of the policy μ that chose its action (one
    version per slot: the actor's copy does not change within a rollout)."""
    return {**trajectory_spec(obs_dim, act_dim), "behaviour_version": ((), torch.int64)}


WAITING_ROLES = ("actor", "learner")  # the actor process, and the learner in the main process


ImpalaShared = SharedState[QueueCounters, RunStats]  # what IMPALA's actor and learner share


def impala_section(settings: OnPolicySettings) -> ImpalaConfig:
    assert isinstance(settings.algo, ImpalaConfig)
    return settings.algo


def make_waiter(waits: Waits, shared: ImpalaShared, queue: TrajectoryQueue, role: str) -> Waiter:
    assert shared.wakeup is not None, "IMPALA's actor and learner wait on the wakeup the runner made"
    return Waiter(shared.counters, shared.wakeup, role, waits.stall_s, waits.startup_s, queue.started)


class ImpalaActor:
    """Rolls out T-step trajectories into free queue slots with its lagging policy copy μ. With
    several replicas, the actors agree before each trajectory on whether, and why, to finish."""

    def __init__(self, settings: OnPolicySettings, shared: ImpalaShared, queue: TrajectoryQueue, device):
        self.settings, self.shared, self.queue, self.device = settings, shared, queue, device
        self.unroll = impala_section(settings).unroll
        self.group = role_group(settings.process.replicas, "actor", device, settings.process.waits.stall_s)
        self.finished = False
        envs = settings.envs
        env = build_env(envs.task, envs.num_envs, device, envs.seed)
        obs = ObsLayout.of(env, envs.task.privileged_critic)
        self.policy = make_gaussian_policy(settings.algo, obs.policy_dim, env.act_dim).to(device)
        self.policy_reader = WeightsReader(shared.weights[POLICY], self.policy)
        normalizer = ObsNormalizer(obs.width).to(device)
        WeightsReader(shared.weights[NORMALIZER], normalizer).pull_latest()  # the statistics of a resumed run
        self.worker = RolloutWorker(env, obs, normalizer, self.group, shared.counters.episodes)

    def done(self) -> bool:
        return self.finished or self.group.replicas.budget_spent(
            self.shared.counters.env_steps, self.settings.max_env_steps
        )

    def ready(self) -> bool:
        if self.done():  # the learner takes every slot published before it stops
            self.shared.counters.actor_done = 1
            self.shared.wake()
            return False
        return self.queue.slot_free()

    @torch.no_grad()
    def step(self) -> None:
        shared, c = self.shared, self.shared.counters
        if agreed := self.group.agree(c.finish):
            c.finished_by = agreed
            self.finished = True  # ready() reports it
            return
        self.policy_reader.pull()
        slot = c.published % self.queue.slots
        self.worker.collect(self.policy, {k: v[slot] for k, v in shared.ring.items()})
        shared.ring["behaviour_version"][slot] = self.policy_reader.version
        shared.weights[NORMALIZER].publish(self.worker.normalizer)
        self.worker.episodes.report(shared)
        synchronize(self.device)  # the slot is whole before it is published: one wait per trajectory
        c.env_steps += self.unroll * self.settings.envs.num_envs
        shared.add("published")


def actor_main(settings: OnPolicySettings, shared: ImpalaShared) -> None:
    """Entry point of the actor process (its actor lives in serve_actor, as role_main's role does).
    The learner runs in the main process: the actor gets half the cores."""
    process = settings.process
    with role_process("actor", shared, process.threads.per_process(2), process.log_path):
        serve_actor(settings, shared)
    exit_without_teardown()


def serve_actor(settings: OnPolicySettings, shared: ImpalaShared) -> None:
    """Build the IMPALA actor and fill trajectory slots until the run stops."""
    device = use_device(settings.device)
    # A resumed run does not replay the noise of the first launch.
    torch.manual_seed(settings.process.seed + 1 + shared.counters.env_steps)
    queue = TrajectoryQueue(shared.counters, impala_section(settings).queue_size)
    actor = ImpalaActor(settings, shared, queue, device)
    waiter = make_waiter(settings.process.waits, shared, queue, "actor")
    while waiter.wait(actor.ready, lambda: None, "a free trajectory slot"):
        actor.step()
    actor.worker.close()  # before the process exits without the interpreter's teardown (exit_without_teardown)


class ImpalaRunner(OnPolicyRunner):
    learner_cls = Impala

    def __init__(self, settings: OnPolicySettings, device, obs: ObsLayout, act_dim: int, resume: dict | None):
        super().__init__(settings, device, obs, act_dim, resume)
        algo = impala_section(settings)
        self.ctx = role_context([device], actor_main) if settings.process_mode else None
        self.shared = make_shared_state(
            QueueCounters(),
            RunStats(),
            trajectory_ring_spec(obs.width, act_dim),
            (algo.queue_size, algo.unroll, settings.envs.num_envs),
            device,
            {POLICY: SharedWeights(self.learner.policy, device), NORMALIZER: SharedWeights(self.normalizer, device)},
            WAITING_ROLES,
            self.ctx,
        )
        self.counters = self.shared.counters
        self.counters.load({k: self.resumed[k] for k in ("env_steps", "episodes")})
        self.shared.weights[POLICY].publish(self.learner.policy, wait=True)
        self.shared.weights[NORMALIZER].publish(self.normalizer, wait=True)
        self.normalizer_reader = WeightsReader(self.shared.weights[NORMALIZER], self.normalizer)
        self.queue = TrajectoryQueue(self.counters, algo.queue_size)
        self.lag_sum = self.lag_count = 0
        self.processes: ProcessRuntime | None = None

    def run(self, monitor) -> None:
        if self.ctx is None:
            actor = ImpalaActor(self.settings, self.shared, self.queue, self.device)
            try:
                self._learn(monitor, lambda: actor.ready() and actor.step())
            finally:
                actor.worker.close()
            return
        self.processes = processes = ProcessRuntime(
            self.shared,
            {"actor": role(self.ctx, "actor", actor_main, (self.settings, self.shared))},
        )
        processes.start()
        waiter = make_waiter(self.settings.process.waits, self.shared, self.queue, "learner")

        def fill() -> None:
            processes.check()
            if not waiter.wait(
                lambda: self.queue.slot_full() or bool(self.counters.actor_done),
                processes.check,
                "a trajectory from the actor",
            ):
                processes.check()  # stopped: only a failing actor stops the run early

        self._learn(monitor, fill)

    def _learn(self, monitor, fill) -> None:
        """fill() makes a trajectory available (or returns once the actor is done). The learner
        takes every trajectory the actor made, so every replica's learner updates as often."""
        while True:
            if code := monitor.stop_code():
                self.counters.finish = code  # the actor finishes before its next trajectory
            fill()
            if not self.queue.slot_full():  # the actor is done and every trajectory it made was learnt from
                break
            self._learned(self._update())
            self.normalizer_reader.pull()
            monitor.tick()
        self.normalizer_reader.pull_latest()
        monitor.tick(final=True)

    def _update(self) -> dict:
        """Take the oldest trajectory out of the queue and apply the V-trace update to it."""
        shared = self.shared
        slot = self.counters.taken % self.queue.slots
        traj = {k: v[slot].clone() for k, v in shared.ring.items()}
        # Policy lag: the learner's version minus the version μ that made the trajectory.
        self.lag_sum += shared.weights[POLICY].current_version() - int(traj.pop("behaviour_version")[0, 0])
        self.lag_count += 1
        synchronize(self.device)  # the copy is done before the slot is freed: one wait per trajectory
        shared.add("taken")
        info = self.learner.update(self.obs.split_rollout(traj))
        self.updates += 1
        if self.updates % self.settings.publish_every == 0:
            shared.weights[POLICY].publish(self.learner.policy)
        return info

    def progress(self) -> tuple[int, int]:
        return self.counters.env_steps, self.counters.episodes

    def finished_by(self) -> int:
        return self.counters.finished_by

    def scalars(self) -> dict:
        lag = self.lag_sum / max(self.lag_count, 1)  # mean policy lag since the last call
        self.lag_sum = self.lag_count = 0
        return {
            **self.info,
            "policy/version_lag": lag,
            **latest_episode_scalars(self.shared.stats),
            "train/episodes": self.counters.episodes,
        }

    def close(self) -> None:
        if self.processes is not None:
            self.processes.stop()
