"""The settings each part of a run reads, built once from the resolved config by `run_settings`.

This is the one module under pql/runtime that reads a `Config`: `train` hands it the config, and
every part below gets only the small frozen value it reads (a role its `ActorSettings`, the
monitor its `MonitorSettings`, ...), so a part's signature says what it depends on. Where a part
hands a config section on unread to the package that owns it (the task's section to `build_env`,
the replay's to the sampler, the algorithm's own section to its update rules), the section is
the setting.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from pql.algos.off_policy import UpdateSettings
from pql.checkpoint import FILE_NAME as CHECKPOINT_FILE
from pql.checkpoint import software
from pql.config import (
    ALGORITHMS,
    CHECKPOINT_AUTO,
    Config,
    ImpalaConfig,
    OffPolicyConfig,
    PPOConfig,
    ReplayConfig,
    TaskConfig,
    given,
    to_dict,
)
from pql.logging import WandbSettings
from pql.logging.console_log import TRAIN_LOG
from pql.replay.nstep import keeps_first_step
from pql.runtime.contracts import DELIVERED, POLICY
from pql.runtime.distributed import Replicas

STAGING_SLOTS_EXTRA = 2  # ring slots beyond max_lag, so a learner copying a slot never blocks the actor
EVAL_SEED_OFFSET = 10_000  # evaluation envs draw other initial states than the training envs


@dataclass(frozen=True)
class EnvSettings:
    """What `pql.envs.build_env` needs for one batch of envs."""

    task: TaskConfig
    num_envs: int
    seed: int


@dataclass(frozen=True)
class Waits:
    """How long a waiting role tolerates no progress: runtime.stall_timeout_s, and
    runtime.startup_timeout_s until every role has counted once."""

    stall_s: float
    startup_s: float


@dataclass(frozen=True)
class Threads:
    """Torch threads per busy process: runtime.torch_threads, or on a CPU the cores shared out
    among the processes and the replicas on this machine (on a GPU the work is the device's)."""

    fixed: int | None
    on_cpu: bool
    local_world: int

    def per_process(self, processes: int) -> int:
        if self.fixed:
            return self.fixed
        if not self.on_cpu:
            return 1
        return max(1, (os.cpu_count() or 1) // (processes * self.local_world))


@dataclass(frozen=True)
class ProcessSettings:
    """What a process of a replica needs for itself: the replica it belongs to (torchrun's
    environment, read once by train), its threads, where it copies what it prints (rank 0: the
    run's train.log; None elsewhere), how long it waits, and the replica's seed."""

    replicas: Replicas
    threads: Threads
    log_path: str | None
    waits: Waits
    seed: int


@dataclass(frozen=True)
class RatioSettings:
    """The update ratios PQL controls (pql/runtime/control.py)."""

    beta_av: int
    beta_pv: int
    max_lag: int
    early_beta_av: int | None
    early_steps: int


@dataclass(frozen=True)
class ActorSettings:
    """The actor's: its envs, its budget, how often it refreshes its networks, and how it folds
    transitions. priority_eta: Ape-X's η when the actor computes priorities (None: it does not).
    return_support: the support (algo.v_min, algo.v_max) the return's scale keeps the scaled
    returns in, where the actor keeps the return's statistics (algo.return_scaling; None: it
    does not)."""

    device: torch.device
    envs: EnvSettings
    max_env_steps: int
    pull_every: int
    precision: str
    nstep: int
    gamma: float
    priority_eta: float | None
    keeps_first_step: bool
    reward_scale: float
    return_support: tuple[float, float] | None


@dataclass(frozen=True)
class LearnerSettings:
    """What both learners read: their replay's capacity and batch, and how often they publish."""

    device: torch.device
    seed: int
    capacity: int
    batch_size: int
    mirror: bool  # each batch joined by its mirror image (algo.mirror)
    publish_every: int
    snapshot_dir: str | None  # where checkpoints write this learner's replay (None: they leave it out)


@dataclass(frozen=True)
class VLearnerSettings(LearnerSettings):
    """The V-learner's, beyond a learner's: the replay's sampling (its section), the n-step
    layout, whether new items take the actor's priorities, the critic's update, and whether its
    rewards are divided by the return's scale (algo.return_scaling: its support; None: no)."""

    replay: ReplayConfig
    keeps_first_step: bool
    staged_priorities: bool
    pull_every: int
    max_critic_loss: float | None
    return_support: tuple[float, float] | None


@dataclass(frozen=True)
class PLearnerSettings(LearnerSettings):
    """The P-learner's: a learner's."""


@dataclass(frozen=True)
class OffPolicySettings:
    """PQL's, PQL-D's and SAC's runner: the algorithm's section for its update rules and how its
    updates run, how the three roles run and share their data, and each role's own settings."""

    algo: OffPolicyConfig
    updates: UpdateSettings
    process_mode: bool
    warmup_steps: int
    ring_slots: int
    delivered: str  # the shared weights the run evaluates and checkpoints: POLICY, or DELIVERED (its average)
    ratios: RatioSettings
    process: ProcessSettings
    actor: ActorSettings
    v_learner: VLearnerSettings
    p_learner: PLearnerSettings

    def role(self, name: str) -> ActorSettings | LearnerSettings:
        roles: dict[str, ActorSettings | LearnerSettings] = {
            "actor": self.actor,
            "v_learner": self.v_learner,
            "p_learner": self.p_learner,
        }
        return roles[name]


@dataclass(frozen=True)
class OnPolicySettings:
    """PPO's and IMPALA's runner: the algorithm's section, its envs and budget, and how its
    actor process (IMPALA in process mode) runs."""

    algo: PPOConfig | ImpalaConfig
    device: torch.device
    process_mode: bool
    envs: EnvSettings
    max_env_steps: int
    publish_every: int
    process: ProcessSettings


@dataclass(frozen=True)
class MonitorSettings:
    """The main process's schedule (pql/runtime/run.py `Monitor`) and what a checkpoint records
    besides the runner's state."""

    eval_every: int
    eval_max_share: float
    checkpoint_every: int
    log_every_s: float
    max_time_s: float | None
    stop_at_return: float | None
    run_dir: str
    header: dict  # {"algo", "task", "config", "software"} of every checkpoint
    video_every: int  # every k-th evaluation records a video (0: none)
    export: bool  # the run's end exports its policy (pql.export)


@dataclass(frozen=True)
class LoggerSettings:
    """What `pql.logging.RunLogger` is built with."""

    run_dir: str
    config: dict
    max_env_steps: int
    wandb: WandbSettings | None
    progress_every_s: float
    max_time_s: float | None


@dataclass(frozen=True)
class ResumeSettings:
    """The checkpoint to resume or evaluate (None: start fresh) and what it must have been
    written by; `auto`: it is the run directory's, found by checkpoint=auto (None: none there)."""

    checkpoint: str | None
    algo: str
    task: str
    test: bool
    auto: bool = False


@dataclass(frozen=True)
class RunSettings:
    """Everything `train` reads, and the runner's settings it hands on."""

    algo: str
    device: torch.device
    eval_envs: EnvSettings
    resume: ResumeSettings
    logger: LoggerSettings
    monitor: MonitorSettings
    runner: OffPolicySettings | OnPolicySettings


def run_settings(cfg: Config, device: torch.device, replicas: Replicas) -> RunSettings:
    """The settings of a run of the resolved `cfg` on `device`, for this replica."""
    runtime = cfg.runtime
    config = to_dict(cfg)  # what the logs and every checkpoint record
    threads = Threads(runtime.torch_threads, runtime.device == "cpu", replicas.local_world)
    process = ProcessSettings(
        replicas,
        threads,
        os.path.join(cfg.run_dir, TRAIN_LOG) if replicas.lead else None,
        Waits(runtime.stall_timeout_s, runtime.startup_timeout_s),
        replicas.seed(runtime.seed),
    )
    return RunSettings(
        algo=cfg.algo.name,
        device=device,
        eval_envs=EnvSettings(cfg.task, cfg.task.eval_envs if replicas.lead else 1, runtime.seed + EVAL_SEED_OFFSET),
        resume=resume_settings(cfg),
        logger=LoggerSettings(
            cfg.run_dir,
            config,
            given(runtime.max_env_steps),
            WandbSettings(**vars(cfg.wandb)) if cfg.wandb.activate else None,
            runtime.log_every_s,
            runtime.max_time_s,
        ),
        monitor=MonitorSettings(
            given(runtime.eval_every),
            runtime.eval_max_share,
            given(runtime.checkpoint_every),
            runtime.log_every_s,
            runtime.max_time_s,
            runtime.stop_at_return,
            cfg.run_dir,
            {"algo": cfg.algo.name, "task": cfg.task.name, "config": config, "software": software()},
            runtime.video_every,
            runtime.export,
        ),
        runner=(
            off_policy_settings(cfg, process)
            if isinstance(cfg.algo, OffPolicyConfig)
            else on_policy_settings(cfg, device, process)
        ),
    )


def resume_settings(cfg: Config) -> ResumeSettings:
    """checkpoint=auto is looked up here, once: the run directory's checkpoint if there is one."""
    if cfg.checkpoint != CHECKPOINT_AUTO:
        return ResumeSettings(cfg.checkpoint, cfg.algo.name, cfg.task.name, cfg.test)
    path = os.path.join(cfg.run_dir, CHECKPOINT_FILE)
    return ResumeSettings(path if os.path.exists(path) else None, cfg.algo.name, cfg.task.name, cfg.test, auto=True)


def off_policy_settings(cfg: Config, process: ProcessSettings) -> OffPolicySettings:
    algo, runtime, replay = cfg.algo, cfg.runtime, cfg.replay
    assert isinstance(algo, OffPolicyConfig)
    first_step = keeps_first_step(algo)
    seed, capacity, batch_size = process.seed, given(replay.capacity), given(algo.batch_size)
    snapshot_dir = cfg.run_dir if runtime.checkpoint_replay else None
    return_support = (given(algo.v_min), given(algo.v_max)) if algo.return_scaling else None
    return OffPolicySettings(
        algo=algo,
        updates=UpdateSettings(algo.tau, algo.policy_average, given(runtime.compile)),
        process_mode=runtime.mode == "process",
        warmup_steps=algo.warmup_steps,
        ring_slots=runtime.max_lag + STAGING_SLOTS_EXTRA,
        delivered=DELIVERED if algo.policy_average else POLICY,
        ratios=RatioSettings(algo.beta_av, algo.beta_pv, runtime.max_lag, algo.early_beta_av, algo.early_steps),
        process=process,
        actor=ActorSettings(
            device=torch.device(given(runtime.actor_device)),
            envs=EnvSettings(cfg.task, given(cfg.task.num_envs), process.seed),
            max_env_steps=given(runtime.max_env_steps),
            pull_every=runtime.actor_pull_every,
            precision=cfg.actor.precision,
            nstep=given(algo.nstep),
            gamma=given(algo.gamma),
            priority_eta=replay.priority_eta if replay.actor_priorities else None,
            keeps_first_step=first_step,
            reward_scale=algo.reward_scale,
            return_support=return_support,
        ),
        v_learner=VLearnerSettings(
            device=torch.device(given(runtime.v_learner_device)),
            seed=seed,
            capacity=capacity,
            batch_size=batch_size,
            mirror=given(algo.mirror),
            publish_every=runtime.critic_publish_every,
            snapshot_dir=snapshot_dir,
            replay=replay,
            keeps_first_step=first_step,
            staged_priorities=replay.actor_priorities,
            pull_every=runtime.v_learner_pull_every,
            max_critic_loss=runtime.max_critic_loss,
            return_support=return_support,
        ),
        p_learner=PLearnerSettings(
            device=torch.device(given(runtime.p_learner_device)),
            seed=seed,
            capacity=capacity,
            batch_size=batch_size,
            mirror=given(algo.mirror),
            publish_every=runtime.policy_publish_every,
            snapshot_dir=snapshot_dir,
        ),
    )


def on_policy_settings(cfg: Config, device: torch.device, process: ProcessSettings) -> OnPolicySettings:
    runtime = cfg.runtime
    assert isinstance(cfg.algo, (PPOConfig, ImpalaConfig))
    return OnPolicySettings(
        algo=cfg.algo,
        device=device,
        process_mode=runtime.mode == "process",
        envs=EnvSettings(cfg.task, given(cfg.task.num_envs), process.seed),
        max_env_steps=given(runtime.max_env_steps),
        publish_every=runtime.policy_publish_every,
        process=process,
    )


def load_runner(algo: str):
    """The runner class of algorithm `algo` (pql.config.ALGORITHMS)."""
    return ALGORITHMS[algo].load_runner()
