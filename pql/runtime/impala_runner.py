"""`train_impala(cfg)`: IMPALA (Espeholt et al., 2018), an actor and a learner joined by a ring
of trajectory slots.

runtime.mode=process: the actor runs in its own spawn process, supervised by the main process
with the PQL runtime's `ProcessRuntime` (a role that raises or dies stops the run with its error
within seconds); the learner, evaluation, logging and checkpoints run in the main process.
runtime.mode=sequential: the actor fills a slot, then the learner learns from it, in turn: one
process, deterministic for a seed, zero policy lag.

The ring is `algo.queue_size` slots of T-step trajectories from N envs ([slots, T, N, ...],
shared memory on CPU, CUDA IPC on GPU) with the policy version μ that made each. It is counted
in the shared counters of pql.runtime.control: C.ACTOR_STEPS = trajectories published,
C.CONSUMED_V = trajectories the learner has taken. The actor waits while every slot is full, the
learner while none is; both block on a Condition, with runtime.stall_timeout_s as the limit.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from pql.algos.impala import Impala
from pql.algos.ppo import make_gaussian_policy
from pql.checkpoint import save_checkpoint
from pql.envs import make_env
from pql.nets import ObsNormalizer
from pql.runtime.control import C, NUM_COUNTERS, NUM_STATS, RatioController, S
from pql.runtime.device import synchronize, use_device
from pql.runtime.launch import ProcessRuntime, threads_per_process
from pql.runtime.monitor import make_logger
from pql.runtime.ppo_runner import (OnPolicyMonitor, RolloutWorker, alloc_trajectories, checkpoint_state,
                                    evaluate_checkpoint, setup_run, trajectory_spec)
from pql.runtime.roles import role_process
from pql.runtime.weight_sync import SharedWeights, WeightsReader


@dataclass
class ImpalaShared:
    """Everything the actor and the learner share, made by the main process before the actor starts."""

    counters: torch.Tensor           # [NUM_COUNTERS] int64, slots of pql.runtime.control.C
    stats: torch.Tensor              # [NUM_STATS] float64: S.TRAIN_RETURN, S.TRAIN_LENGTH (writer: actor)
    ring: dict                       # {field: [queue_size, T, N, ...]} of trajectory_spec
    behaviour_version: torch.Tensor  # [queue_size] int64: the policy version μ of each slot
    policy: SharedWeights            # published by the learner
    normalizer: SharedWeights        # published by the actor
    condition: object = None         # multiprocessing Condition (None in sequential mode)
    errors: object = None            # queue of (role, traceback) from a failing actor


def make_shared(cfg, obs_dim: int, act_dim: int, device, ctx=None) -> ImpalaShared:
    """ctx: a multiprocessing context for process mode, None for sequential mode."""
    algo = cfg.algo
    ring = alloc_trajectories(trajectory_spec(obs_dim, act_dim), (algo.queue_size, algo.unroll, cfg.task.num_envs), device)
    if torch.device(device).type == "cpu":
        for t in ring.values():
            t.share_memory_()
    return ImpalaShared(
        counters=torch.zeros(NUM_COUNTERS, dtype=torch.int64).share_memory_(),
        stats=torch.zeros(NUM_STATS, dtype=torch.float64).share_memory_(),
        ring=ring,
        behaviour_version=torch.zeros(algo.queue_size, dtype=torch.int64).share_memory_(),
        policy=SharedWeights(make_gaussian_policy(algo, obs_dim, act_dim), device),
        normalizer=SharedWeights(ObsNormalizer(obs_dim), device),
        condition=ctx.Condition() if ctx else None,
        errors=ctx.Queue() if ctx else None,
    )


def make_waiter(cfg, shared: ImpalaShared) -> RatioController:
    """The PQL runtime's blocking wait and counting over the shared counters. The ring needs no
    ratio: each side's ready() is its own predicate, so the β arguments are unused."""
    return RatioController(shared.counters, shared.condition, 1, 1, cfg.algo.queue_size, cfg.runtime.stall_timeout_s,
                           cfg.runtime.startup_timeout_s)


class ImpalaActor:
    """Rolls out T-step trajectories into free ring slots with its lagging policy copy μ."""

    def __init__(self, cfg, shared: ImpalaShared, waiter: RatioController, device):
        self.cfg, self.shared, self.waiter, self.device = cfg, shared, waiter, device
        env = make_env(cfg.task, cfg.task.num_envs, device, cfg.runtime.seed)
        self.policy = make_gaussian_policy(cfg.algo, env.obs_dim, env.act_dim).to(device)
        self.policy_reader = WeightsReader(shared.policy, self.policy)
        normalizer = ObsNormalizer(env.obs_dim).to(device)
        WeightsReader(shared.normalizer, normalizer).pull_latest()  # the statistics of a resumed run
        self.worker = RolloutWorker(env, normalizer)

    def done(self) -> bool:
        return int(self.shared.counters[C.ENV_STEPS]) >= self.cfg.runtime.max_env_steps

    def ready(self) -> bool:
        c = self.shared.counters
        return not self.done() and int(c[C.ACTOR_STEPS] - c[C.CONSUMED_V]) < self.cfg.algo.queue_size

    @torch.no_grad()
    def step(self) -> None:
        c, shared = self.shared.counters, self.shared
        self.policy_reader.pull()
        slot = int(c[C.ACTOR_STEPS]) % self.cfg.algo.queue_size
        self.worker.collect(self.policy, {k: v[slot] for k, v in shared.ring.items()})
        shared.behaviour_version[slot] = self.policy_reader.version
        shared.normalizer.publish(self.worker.normalizer)
        stats = self.worker.episodes.pop()
        if "train/return" in stats:
            shared.stats[S.TRAIN_RETURN], shared.stats[S.TRAIN_LENGTH] = stats["train/return"], stats["train/length"]
        c[C.EPISODES] = stats["train/episodes"]
        synchronize(self.device)  # the slot is whole before it is published: one wait per trajectory
        c[C.ENV_STEPS] += self.cfg.algo.unroll * self.cfg.task.num_envs
        self.waiter.advance(C.ACTOR_STEPS)
        if self.done():  # after the publication: the learner takes every slot before it stops
            c[C.ACTOR_DONE] = 1
            self.waiter.notify()


class ImpalaLearner:
    """Takes trajectories from the ring, applies the V-trace actor-critic update, publishes π."""

    def __init__(self, cfg, shared: ImpalaShared, waiter: RatioController, impala: Impala, device, updates: int):
        self.cfg, self.shared, self.waiter, self.impala, self.device = cfg, shared, waiter, impala, device
        self.updates = updates
        self.lag_sum = self.lag_count = 0
        shared.policy.publish(impala.policy, wait=True)

    def ready(self) -> bool:
        c = self.shared.counters
        return int(c[C.CONSUMED_V]) < int(c[C.ACTOR_STEPS])

    def step(self) -> dict:
        c, shared = self.shared.counters, self.shared
        slot = int(c[C.CONSUMED_V]) % self.cfg.algo.queue_size
        traj = {k: v[slot].clone() for k, v in shared.ring.items()}
        # Policy lag: the learner's version minus the version μ that made the trajectory.
        self.lag_sum += shared.policy.current_version() - int(shared.behaviour_version[slot])
        self.lag_count += 1
        synchronize(self.device)  # the copy is done before the slot is freed: one wait per trajectory
        self.waiter.advance(C.CONSUMED_V)
        info = self.impala.update(traj)
        self.updates += 1
        if self.updates % self.cfg.runtime.policy_sync_every == 0:
            shared.policy.publish(self.impala.policy)
        c[C.CRITIC_UPDATES] += 1  # one learner update is one baseline and one policy update
        self.waiter.advance(C.POLICY_UPDATES)
        return info

    def lag(self) -> dict:
        """Mean policy lag since the last call."""
        lag = self.lag_sum / max(self.lag_count, 1)
        self.lag_sum = self.lag_count = 0
        return {"policy/version_lag": lag}


def actor_main(cfg, shared: ImpalaShared, threads: int) -> None:
    """Entry point of the actor process."""
    with role_process("actor", shared, threads):
        device = use_device(cfg.runtime.device)
        # A resumed run does not replay the noise of the first launch.
        torch.manual_seed(cfg.runtime.seed + 1 + int(shared.counters[C.ENV_STEPS]))
        waiter = make_waiter(cfg, shared)
        actor = ImpalaActor(cfg, shared, waiter, device)
        while waiter.wait(actor.ready, lambda: None, "a free trajectory slot"):
            actor.step()


def train_impala(cfg) -> dict:
    """Train IMPALA (or, with cfg.test, evaluate cfg.checkpoint). -> the final scalars, "eval/return" included."""
    device, eval_env, impala, normalizer, resume = setup_run(cfg, Impala)
    if cfg.test:
        return evaluate_checkpoint(cfg, eval_env, impala, normalizer)
    ctx = None
    if cfg.runtime.mode == "process":
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
    shared = make_shared(cfg, eval_env.obs_dim, eval_env.act_dim, device, ctx)
    shared.normalizer.publish(normalizer, wait=True)
    c = shared.counters
    c[C.ENV_STEPS] = resume["env_steps"] if resume else 0
    waiter = make_waiter(cfg, shared)
    learner = ImpalaLearner(cfg, shared, waiter, impala, device, resume["updates"] if resume else 0)
    normalizer_reader = WeightsReader(shared.normalizer, normalizer)

    def save(path: str) -> None:
        save_checkpoint(path, checkpoint_state(cfg, impala, normalizer, int(c[C.ENV_STEPS]), learner.updates))

    info: dict = {}

    def scalars() -> dict:
        s = shared.stats
        return {**info, **learner.lag(), "train/return": float(s[S.TRAIN_RETURN]),
                "train/length": float(s[S.TRAIN_LENGTH]), "train/episodes": int(c[C.EPISODES])}

    logger = make_logger(cfg)
    try:
        monitor = OnPolicyMonitor(cfg, logger, eval_env, impala.policy, normalizer, save, int(c[C.ENV_STEPS]),
                                  learner.updates)

        def learn(fill) -> None:
            """fill() makes a trajectory available (or returns once the actor is done)."""
            nonlocal info
            while not monitor.should_stop():
                fill()
                if not learner.ready():  # the actor is done and every trajectory it made was learnt from
                    break
                info = learner.step()
                normalizer_reader.pull()
                monitor.tick(int(c[C.ENV_STEPS]), learner.updates, scalars)
            normalizer_reader.pull_latest()
            monitor.tick(int(c[C.ENV_STEPS]), learner.updates, scalars, final=True)

        try:
            if ctx is None:
                actor = ImpalaActor(cfg, shared, waiter, device)
                learn(lambda: actor.ready() and actor.step())
            else:
                # The learner runs in this process: the actor gets half the cores.
                runtime = ProcessRuntime(shared, {"actor": ctx.Process(
                    target=actor_main, name="pql-actor", daemon=True,
                    args=(cfg, shared, threads_per_process(cfg, 2)))})
                runtime.start()

                def fill() -> None:
                    runtime.check()
                    if not waiter.wait(lambda: learner.ready() or bool(c[C.ACTOR_DONE]), runtime.check,
                                       "a trajectory from the actor"):
                        runtime.check()  # stopped: only a failing actor stops the run early

                try:
                    learn(fill)
                finally:
                    runtime.stop()
        except KeyboardInterrupt:
            monitor.save_interrupted()  # the learner's state lives in this process
            raise
    finally:
        logger.close()
    return monitor.report_done(int(c[C.ENV_STEPS]), monitor.latest)
