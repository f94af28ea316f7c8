"""Typed configuration for every group, validated once at start: the one home of every default.

Hydra composes cfg/config.yaml, whose defaults come from the nodes `register_configs` stores in
Hydra's ConfigStore (every group but algo as `pql_base`, one `algo` option per algorithm in
ALGORITHMS), with cfg/task/<Task>.yaml on top. `load_config` turns the composed mapping into
these dataclasses and checks every value. A bad value raises `ConfigError` naming the key, the
value and what is allowed; `train.py` prints that one line and exits with code 2. Code past
this point never reads raw dicts. The configuration reference (docs/configuration.md) is
`reference_markdown()`.

Ratios follow the paper's notation β_a:v = 1:beta_av (critic updates per batched actor step,
i.e. per `num_envs` env steps) and β_p:v = 1:beta_pv (critic updates per policy update).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """A config value that is not allowed; str() is the one line shown to the user."""

    def __init__(self, key: str, value: Any, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"config error: {key}={value!r} is not allowed; expected {allowed}")


def _opt(
    default,
    allowed: str | Callable[[], str],
    check: Callable[[Any], bool] = lambda v: True,
    doc: str = "",
    on_device: tuple | None = None,
):
    """A field with its constraint, checked by `_build` (None always passes for Optional fields).

    allowed: what the error line expects (a callable for text built from names defined later);
    doc: what the key means, where `allowed` does not say it (the reference shows both);
    on_device: (on CUDA, on CPU), what null becomes (`apply_device_defaults`); a string names the
    sibling key whose value it takes.
    """
    if on_device is not None:
        allowed = f"{allowed} (null: {_device_text(on_device[0])} on CUDA, {_device_text(on_device[1])} on CPU)"
    metadata = {"allowed": allowed, "check": check, "doc": doc, "on_device": on_device}
    if isinstance(default, (list, tuple)):
        return field(default_factory=lambda: tuple(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _device_text(value) -> str:
    if value is None:
        return "no limit"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"`{value}`"
    return f"{value:,}"


def _allowed(f: dataclasses.Field) -> str:
    allowed = f.metadata["allowed"]
    return allowed() if callable(allowed) else allowed


def _positive(v) -> bool:
    return v > 0


def _non_negative(v) -> bool:
    return v >= 0


def _at_least_one(v) -> bool:
    return v >= 1


def _unit_interval(v) -> bool:
    return 0.0 <= v <= 1.0


def _discount(v) -> bool:
    return 0.0 < v <= 1.0


def _one_of(*choices):
    return lambda v: v in choices


def _layer_widths(v) -> bool:
    return len(v) > 0 and all(h > 0 for h in v)


def _device_name(v) -> bool:
    return v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit())


def _task_names() -> str:
    from tasks import TASK_NAMES  # the one list of tasks lives with the simulators

    return f"one of {', '.join(TASK_NAMES)}, or isaacgym/<Task>"


def _algo_names() -> str:
    return f"one of {', '.join(ALGORITHMS)}"


def _algo_name(default=dataclasses.MISSING):
    """An algorithm config's `name`: `load_config` picks the class by it (ALGORITHMS, below)."""
    return _opt(default, _algo_names, lambda v: v in ALGORITHMS, doc="the algorithm, picked with `algo=<name>`")


@dataclass
class TaskConfig:
    name: str = _opt("Ant", _task_names, doc="the task, picked with `task=<Task>` (docs/tasks.md)")
    num_envs: int | None = _opt(
        None, "an integer > 0", _positive, on_device=(4096, "cpu_num_envs"), doc="training envs"
    )
    backend: str = _opt(
        "auto",
        "one of auto, mujoco, mjwarp",
        _one_of("auto", "mujoco", "mjwarp"),
        doc="the simulator: mujoco (MuJoCo C on CPU threads) or mjwarp (MuJoCo Warp); auto: mjwarp "
        "on CUDA, mujoco on the CPU; Isaac Gym tasks ignore it",
    )
    eval_envs: int = _opt(
        10, "an integer > 0", _positive, doc="evaluation envs (deterministic policy, one episode each)"
    )
    cpu_num_envs: int = _opt(
        128,
        "an integer > 0",
        _positive,
        doc="training envs on CPU when task.num_envs is null (set per task in cfg/task/<Task>.yaml)",
    )
    # Truncated episodes bootstrap, so a value is an infinite-horizon sum: about the reward per
    # step / (1 − γ). Each task file sets the range from its reward's bounds (docs/tasks.md).
    value_min: float = _opt(
        -100.0,
        "a number < task.value_max",
        doc="lowest discounted return the task's values reach (γ = 0.99), what pql_d's "
        "support starts at when algo.v_min is null (set per task in cfg/task/<Task>.yaml)",
    )
    value_max: float = _opt(
        1000.0,
        "a number > task.value_min",
        doc="highest discounted return, pql_d's highest atom when algo.v_max is null",
    )


@dataclass
class NetConfig:
    actor_hidden: tuple = _opt(
        (256, 256), "a non-empty list of positive layer widths", _layer_widths, doc="hidden widths of the policy MLP"
    )
    critic_hidden: tuple = _opt(
        (256, 256),
        "a non-empty list of positive layer widths",
        _layer_widths,
        doc="hidden widths of the critic (value) MLP",
    )
    # ReLU: a critic update costs 20% less than with ELU on a CPU, where ELU's expm1 was a fifth
    # of the update, at no measured loss of return on Ant (docs/tuning.md).
    activation: str = _opt(
        "relu", "one of elu, relu", _one_of("elu", "relu"), doc="the hidden layers' activation, in every network"
    )
    # LayerNorm keeps early Q-learning from diverging when the replay holds few states (MuJoCo
    # Ant on a CPU collapsed without it).
    critic_layer_norm: bool = _opt(True, "true or false", doc="LayerNorm before each hidden activation of the critic")


def _on_policy_net() -> NetConfig:
    """PPO's and IMPALA's nets: narrower than the off-policy ones, no LayerNorm, and ELU (what their
    learning tests were measured with; docs/tuning.md measured ReLU for the off-policy ones only)."""
    return NetConfig(
        actor_hidden=(256, 128, 64), critic_hidden=(256, 128, 64), critic_layer_norm=False, activation="elu"
    )


# Three-step targets keep HalfCheetah upright and Ant ahead on their 1,000-step episodes; on
# Reacher's 50 and Pusher's 100 they lose to one-step targets, which beat SB3's SAC there while
# three-step ones do not (docs/notes/2026-11-27-nstep-default-from-episode-length.md).
SHORT_EPISODE_STEPS = 100


@dataclass
class OffPolicyConfig:
    """The keys shared by the algorithms on the three-role off-policy runtime (pql, pql_d, sac)."""

    # No default: the shared keys are no algorithm of their own.
    name: str = _algo_name()
    gamma: float = _opt(0.99, "a number in (0, 1]", _discount, doc="discount γ")
    nstep: int | None = _opt(
        None,
        "null or an integer >= 1",
        _at_least_one,
        doc="n of the n-step returns; null: 1 for a task whose episodes last at most "
        f"{SHORT_EPISODE_STEPS} steps (Reacher, Pusher), 3 for any other (docs/tuning.md)",
    )
    greedy_nstep: bool = _opt(
        False,
        "true or false",
        doc="the critic's target is the larger of the n-step and the one-step target "
        "(Wang et al., 2021); the replay then keeps each transition's first step too "
        "(no effect with algo.nstep=1)",
    )
    tau: float = _opt(0.05, "a number in (0, 1]", _discount, doc="soft-update rate of the target critic")
    # PQL (Li et al., 2023) scales Ant's reward by 0.01; docs/tuning.md measures what it does here.
    reward_scale: float = _opt(
        1.0,
        "a number > 0",
        _positive,
        doc="the actor multiplies each reward by it before the reward enters the replay, so "
        "the critic learns scaled values, while every logged return is the env's own; "
        "pql_d's support from task.value_min / value_max is scaled with it",
    )
    batch_size: int | None = _opt(
        None, "an integer > 0", _positive, on_device=(8192, 128), doc="transitions sampled per update"
    )
    critic_lr: float = _opt(3e-4, "a number > 0", _positive, doc="Adam learning rate of the critic")
    actor_lr: float = _opt(3e-4, "a number > 0", _positive, doc="Adam learning rate of the policy")
    # 1:16 on every device: on a GPU, 1:8 left HalfCheetah on its back in 7 of 12 runs and 1:16 in
    # none of 6, with Ant no worse at equal wall time (docs/notes/2026-11-27-h100-and-beta-av-16.md).
    beta_av: int = _opt(16, "an integer >= 1 (critic updates per batched actor step, β_a:v = 1:beta_av)", _at_least_one)
    beta_pv: int = _opt(2, "an integer >= 1 (critic updates per policy update, β_p:v = 1:beta_pv)", _at_least_one)
    # Early updates per sample settle HalfCheetah's posture: one-step and greedy targets roll it
    # onto its back at 32 samples per env step and keep it upright at 128 (docs/tuning.md).
    early_beta_av: int | None = _opt(
        None,
        "null or an integer >= 1",
        _at_least_one,
        doc="critic updates per batched actor step during the run's first "
        "algo.early_steps actor steps; null: algo.beta_av throughout",
    )
    early_steps: int = _opt(
        0,
        "an integer >= 0",
        _non_negative,
        doc="batched actor steps at the start of a run (after the warm-up) that algo.early_beta_av applies to",
    )
    warmup_steps: int = _opt(
        32, "an integer >= 0 (batched actor steps with uniform random actions before learning)", _non_negative
    )
    # A per-update rate: τ = 0.001 lagged too far for the short InvertedDoublePendulum and
    # two-replica InvertedPendulum runs of the learning tests (docs/tuning.md); 0.005 does not.
    policy_average: float = _opt(
        0.005,
        "a number in [0, 1]",
        _unit_interval,
        doc="rate τ of the Polyak average θ̄ ← τθ + (1 − τ)θ̄ of the policy, taken at each "
        "policy update (the plain mean until 1/τ updates); the average is the policy "
        "the run evaluates, checkpoints and delivers, while the actor explores with the "
        "latest; 0: the latest policy is delivered",
    )
    net: NetConfig = field(default_factory=NetConfig)


@dataclass
class PQLConfig(OffPolicyConfig):
    name: str = _algo_name("pql")
    exploration: str = _opt(
        "mixed",
        "one of mixed, ape_x",
        _one_of("mixed", "ape_x"),
        doc="mixed: env i's noise std spread evenly over [noise_std_min, noise_std_max]; ape_x: "
        "env l of L gets ε^(1 + α·l/(L−1))",
    )
    noise_std_min: float = _opt(0.05, "a number >= 0", _non_negative, doc="smallest noise std of mixed exploration")
    noise_std_max: float = _opt(
        0.8, "a number >= noise_std_min", _non_negative, doc="largest noise std of mixed exploration"
    )
    ape_x_epsilon: float = _opt(0.4, "a number in (0, 1)", lambda v: 0.0 < v < 1.0, doc="ε of ape_x exploration")
    ape_x_alpha: float = _opt(8.0, "a number >= 0", _non_negative, doc="α of ape_x exploration")
    target_noise: float = _opt(0.2, "a number >= 0", _non_negative, doc="noise std of TD3's target-policy smoothing")
    target_noise_clip: float = _opt(0.5, "a number >= 0", _non_negative, doc="clip of that noise")


@dataclass
class PQLDConfig(PQLConfig):
    """PQL with a categorical distributional critic."""

    name: str = _algo_name("pql_d")
    num_atoms: int = _opt(
        101, "an integer >= 2", lambda v: v >= 2, doc="atoms z_i = v_min + iΔz of the critic's fixed support"
    )
    v_min: float | None = _opt(
        None,
        "a number < v_max, or null: task.value_min × algo.reward_scale",
        doc="lowest atom; the support must cover the task's discounted returns, values outside are clipped onto it",
    )
    v_max: float | None = _opt(
        None, "a number > v_min, or null: task.value_max × algo.reward_scale", doc="highest atom"
    )


@dataclass
class SACConfig(OffPolicyConfig):
    """SAC explores by sampling its own policy and smooths no target, so it has no noise keys."""

    name: str = _algo_name("sac")
    init_alpha: float = _opt(
        0.1, "a number > 0", _positive, doc="initial temperature α, tuned towards the target entropy −act_dim"
    )
    alpha_lr: float = _opt(3e-4, "a number > 0", _positive, doc="Adam learning rate of α")
    # ELU, as measured before: ReLU was measured for PQL only (docs/tuning.md), and SAC's
    # InvertedPendulum test did not solve in its 170 s with ReLU and β_a:v 1:16.
    net: NetConfig = field(default_factory=lambda: NetConfig(activation="elu"))


@dataclass
class PPOConfig:
    """PPO with GAE, in one process: collect horizon × task.num_envs steps, then epochs ×
    minibatches clipped-objective steps."""

    name: str = _algo_name("ppo")
    gamma: float = _opt(0.99, "a number in (0, 1]", _discount, doc="discount γ")
    gae_lambda: float = _opt(0.95, "a number in [0, 1]", _unit_interval, doc="GAE λ")
    horizon: int = _opt(32, "an integer >= 1 (env steps per env per rollout)", _at_least_one)
    epochs: int = _opt(5, "an integer >= 1", _at_least_one, doc="passes over each rollout")
    minibatches: int = _opt(4, "an integer >= 1", _at_least_one, doc="minibatches per pass (the rollout split evenly)")
    clip: float = _opt(0.2, "a number > 0", _positive, doc="ε of the clipped surrogate")
    value_clip: float = _opt(0.2, "a number > 0", _positive, doc="ε_V of the clipped value loss")
    lr: float = _opt(3e-4, "a number > 0", _positive, doc="Adam learning rate")
    entropy_coef: float = _opt(0.0, "a number >= 0", _non_negative, doc="weight of the entropy bonus")
    value_coef: float = _opt(0.5, "a number >= 0", _non_negative, doc="weight of the value loss")
    max_grad_norm: float = _opt(1.0, "a number > 0", _positive, doc="gradient-norm clip")
    init_log_std: float = _opt(-0.5, "a number", doc="initial log σ of the Gaussian policy (actions in [-1, 1])")
    net: NetConfig = field(default_factory=_on_policy_net)


@dataclass
class ImpalaConfig:
    """IMPALA: the actor rolls out unroll-step trajectories with its lagging policy copy into a ring
    of queue_size slots; the learner applies the V-trace actor-critic update."""

    name: str = _algo_name("impala")
    gamma: float = _opt(0.99, "a number in (0, 1]", _discount, doc="discount γ")
    unroll: int = _opt(16, "an integer >= 1 (T, steps per trajectory)", _at_least_one)
    rho_bar: float = _opt(
        1.0, "a number > 0 and >= c_bar", _positive, doc="ρ̄, V-trace's clip on the importance weight of the TD error"
    )
    c_bar: float = _opt(
        1.0, "a number > 0 and <= rho_bar", _positive, doc="c̄, V-trace's clip on the trace-cutting weights"
    )
    lam: float = _opt(1.0, "a number in [0, 1]", _unit_interval, doc="λ of V-trace's traces")
    lr: float = _opt(3e-4, "a number > 0", _positive, doc="Adam learning rate")
    entropy_coef: float = _opt(1e-3, "a number >= 0", _non_negative, doc="weight of the entropy bonus")
    baseline_coef: float = _opt(0.5, "a number >= 0", _non_negative, doc="weight of the baseline loss")
    max_grad_norm: float = _opt(1.0, "a number > 0", _positive, doc="gradient-norm clip")
    init_log_std: float = _opt(-0.5, "a number", doc="initial log σ of the Gaussian policy (actions in [-1, 1])")
    queue_size: int = _opt(2, "an integer >= 1 (trajectory batches in flight)", _at_least_one)
    net: NetConfig = field(default_factory=_on_policy_net)


def _load(target: str):
    module, attribute = target.split(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class Algorithm:
    """An algorithm: its config class, and its update rules and runner as "module:attribute",
    imported on use so that importing pql.config never imports torch."""

    config: type
    rules: str
    runner: str

    def load_rules(self):
        return _load(self.rules)

    def load_runner(self):
        return _load(self.runner)


ALGORITHMS = {
    "pql": Algorithm(PQLConfig, "pql.algos.pql:PQL", "pql.runtime.off_policy.runner:OffPolicyRunner"),
    "pql_d": Algorithm(PQLDConfig, "pql.algos.pql_d:PQLD", "pql.runtime.off_policy.runner:OffPolicyRunner"),
    "sac": Algorithm(SACConfig, "pql.algos.sac:SAC", "pql.runtime.off_policy.runner:OffPolicyRunner"),
    "ppo": Algorithm(PPOConfig, "pql.algos.ppo:PPO", "pql.runtime.on_policy.ppo_runner:PPORunner"),
    "impala": Algorithm(ImpalaConfig, "pql.algos.impala:Impala", "pql.runtime.on_policy.impala_runner:ImpalaRunner"),
}


@dataclass
class ReplayConfig:
    kind: str = _opt(
        "uniform",
        "one of uniform, prioritized",
        _one_of("uniform", "prioritized"),
        doc="how the critic's batches are sampled",
    )
    capacity: int | None = _opt(
        None, "an integer > 0", _positive, on_device=(5_000_000, 1_000_000), doc="transitions the replay holds"
    )
    priority_mode: str = _opt(
        "proportional",
        "one of proportional, rank",
        _one_of("proportional", "rank"),
        doc="proportional p = (|δ| + ε)^α, or rank p = (1/rank)^α",
    )
    rerank_every: int | None = _opt(
        None,
        "an integer >= 1 (rank mode: critic updates between re-ranks; 1: exact "
        "ranks) or null (replay size / batch size)",
        _positive,
        doc="rank mode sorts the whole replay at a re-rank; ranks in between are "
        "estimated against the last sort (docs/kernels.md has the costs)",
    )
    priority_alpha: float = _opt(0.6, "a number >= 0", _non_negative, doc="α of the priorities")
    priority_beta0: float = _opt(
        0.4, "a number in [0, 1]", _unit_interval, doc="β₀ of the importance weights, annealed linearly to 1"
    )
    beta_anneal_updates: int = _opt(100_000, "an integer > 0 (critic updates over which β goes to 1)", _positive)
    priority_eps: float = _opt(1e-6, "a number > 0", _positive, doc="ε of the proportional priorities")
    actor_priorities: bool = _opt(
        False,
        "true or false (true needs replay.kind=prioritized)",
        doc="true: the actor computes new items' priorities with its own critic copy (Ape-X) "
        "where the data is made; false: new items enter at the maximum priority",
    )
    priority_eta: float = _opt(
        0.9,
        "a number in [0, 1]",
        _unit_interval,
        doc="η of the actor's sequence priority η·max|δ| + (1−η)·mean|δ| over the one-step TD "
        "errors of each n-step window",
    )


@dataclass
class ActorConfig:
    precision: str = _opt(
        "fp32",
        "one of fp32, bf16, int8",
        _one_of("fp32", "bf16", "int8"),
        doc="the actor's inference copy of the policy (int8 on CPU only)",
    )


@dataclass
class RuntimeConfig:
    mode: str = _opt(
        "process",
        "one of process, sequential",
        _one_of("process", "sequential"),
        doc="process: each role in a process of its own; sequential: the roles in one process",
    )
    device: str = _opt(
        "auto",
        "auto, cpu, cuda or cuda:<index>",
        _device_name,
        doc="every process of the run makes that GPU its current device; auto: cuda if there is one",
    )
    actor_device: str | None = _opt(
        None,
        "null, auto, cpu, cuda or cuda:<index>",
        _device_name,
        doc="the actor's device (its envs, policy copy and the staging ring); null: runtime.device",
    )
    v_learner_device: str | None = _opt(
        None,
        "null, auto, cpu, cuda or cuda:<index>",
        _device_name,
        doc="the V-learner's device (replay, critic); null: runtime.device",
    )
    p_learner_device: str | None = _opt(
        None,
        "null, auto, cpu, cuda or cuda:<index>",
        _device_name,
        doc="the P-learner's device (observation replay, policy); null: runtime.device",
    )
    seed: int = _opt(0, "an integer >= 0", _non_negative, doc="random seed")
    # On a CPU the budget is wall time: README's command ends in 15 minutes on any machine, and a
    # faster one trains further (docs/tuning.md); the env-step cap there is only a bound.
    max_env_steps: int | None = _opt(
        None,
        "an integer > 0",
        _positive,
        on_device=(20_000_000, 10_000_000),
        doc="env steps of training (under torchrun: of all replicas together)",
    )
    max_time_s: float | None = _opt(
        None,
        "a number > 0",
        _positive,
        on_device=(None, 885.0),
        doc="wall-time limit of training in seconds; with the final evaluation and "
        "checkpoint a run takes about 10 s more",
    )
    stop_at_return: float | None = _opt(
        None,
        "a number or null",
        doc="stop once an evaluation reaches this return (that evaluation is the run's final one)",
    )
    eval_every: int | None = _opt(
        None,
        "an integer > 0",
        _positive,
        on_device=(2_000_000, 50_000),
        doc="env steps between evaluations (one that would end past "
        "runtime.max_time_s, as long as the last, is left to the final one)",
    )
    checkpoint_every: int | None = _opt(
        None, "an integer > 0", _positive, on_device=(5_000_000, 100_000), doc="env steps between checkpoints"
    )
    policy_publish_every: int = _opt(
        1,
        "an integer >= 1",
        _at_least_one,
        doc="policy updates between publications of the policy weights (P-learner; IMPALA's learner)",
    )
    critic_publish_every: int = _opt(
        1, "an integer >= 1", _at_least_one, doc="critic updates between publications of the critic weights (V-learner)"
    )
    actor_pull_every: int = _opt(
        1, "an integer >= 1", _at_least_one, doc="actor steps between the actor's copies of the published weights"
    )
    v_learner_pull_every: int = _opt(
        1, "an integer >= 1", _at_least_one, doc="critic updates between the V-learner's copies of the published policy"
    )
    max_lag: int = _opt(4, "an integer >= 1 (batched actor steps a role may run ahead of the ratio)", _at_least_one)
    max_critic_loss: float | None = _opt(
        None,
        "a number > 0, or null (no bound)",
        _positive,
        doc="a critic loss above it stops the run as diverged (nan and inf "
        "in any loss always do); the scale is the task's, so no default",
    )
    stall_timeout_s: float = _opt(
        600.0,
        "a number > 0 (a role waiting longer than this stops the run)",
        _positive,
        doc="also how long a collective waits for the other replicas under torchrun",
    )
    startup_timeout_s: float = _opt(
        1800.0,
        "a number > 0 (the stall limit until every role has made progress)",
        _positive,
        doc="covers building envs, Warp compiling its kernels cold and CUDA graph capture",
    )
    compile: bool | None = _opt(
        None,
        "true, false or null",
        on_device=(True, False),
        doc="the learners' updates compiled with torch.compile (CUDA graphs on CUDA)",
    )
    mps: str = _opt(
        "auto",
        "one of auto, on, off",
        _one_of("auto", "on", "off"),
        doc="process mode on CUDA: a private MPS daemon lets the role processes run on the GPU at "
        "the same time (auto: when the driver's nvidia-cuda-mps-control is there; on: or stop)",
    )
    eval_max_share: float = _opt(
        0.05,
        "a number in (0, 1] (1: no bound)",
        lambda v: 0 < v <= 1,
        doc="the largest share of the wall time evaluations may take: one starts only "
        "if it and the final one, each as long as the longest so far, fit",
    )
    log_every_s: float = _opt(10.0, "a number > 0", _positive, doc="seconds between console lines and scalar logs")
    torch_threads: int | None = _opt(
        None, "an integer > 0 (null: cores shared out among the roles)", _positive, doc="torch threads per role"
    )


@dataclass
class WandbConfig:
    activate: bool = _opt(False, "true or false", doc="log to Weights & Biases")
    project: str = _opt("pql", "a project name", doc="the wandb project")
    entity: str | None = _opt(None, "a wandb entity or null")
    mode: str = _opt(
        "online",
        "one of online, offline",
        _one_of("online", "offline"),
        doc="offline works with no network (`wandb sync` later)",
    )
    group: str | None = _opt(None, "a group name or null", doc="the wandb run group")


@dataclass
class Config:
    task: TaskConfig = field(default_factory=TaskConfig)
    algo: Any = field(default_factory=PQLConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    checkpoint: str | None = _opt(
        None, "a path to a checkpoint file or null", doc="resume from it (with test=true: evaluate it)"
    )
    test: bool = _opt(False, "true or false (true: evaluate `checkpoint` without training)")
    run_dir: str = _opt(
        ".",
        "a directory",
        doc="where the run writes logs and checkpoints; train.py sets it to "
        "Hydra's run directory (`hydra.run.dir=…` chooses it)",
    )


def _convert(key: str, value: Any, hint: Any, allowed: str) -> Any:
    """Coerce a YAML/CLI scalar to the annotated type, or raise ConfigError."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):  # Optional[T] and T | None
        inner = [a for a in typing.get_args(hint) if a is not type(None)][0]
        return None if value is None else _convert(key, value, inner, allowed)
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(key, value, allowed)
    if hint is int:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value != int(value)
        ):
            raise ConfigError(key, value, allowed)
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(key, value, allowed)
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(key, value, allowed)
        return value
    if hint is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(key, value, allowed)
        return tuple(_convert(key, v, int, allowed) for v in value)
    raise TypeError(f"unsupported config type {hint} for {key}")


def _build(cls, raw: Any, prefix: str, default=None):
    """`default` (cls() if None) with the keys `raw` gives replaced by their checked values; a
    nested group starts from the enclosing default's, so PPO's `net` keeps its own widths."""
    default = cls() if default is None else default
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(prefix, raw, f"a mapping of {cls.__name__} keys")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in known:
            raise ConfigError(f"{prefix}.{key}".lstrip("."), raw[key], f"one of the keys {', '.join(sorted(known))}")
    values = {}
    for name, f in known.items():
        if name not in raw:
            continue
        key = f"{prefix}.{name}".lstrip(".")
        if dataclasses.is_dataclass(hints[name]):
            values[name] = _build(hints[name], raw[name], key, getattr(default, name))
            continue
        allowed = _allowed(f)
        value = _convert(key, raw[name], hints[name], allowed)
        if value is not None:
            try:
                ok = f.metadata.get("check", lambda v: True)(value)
            except TypeError:
                ok = False
            if not ok:
                raise ConfigError(key, raw[name], allowed)
        values[name] = value
    return dataclasses.replace(default, **values)


def _cross_checks(cfg: Config) -> None:
    from tasks import TASK_NAMES

    name = cfg.task.name
    if not (name in TASK_NAMES or name.startswith("isaacgym/")):
        raise ConfigError("task.name", name, _task_names())
    # Isaac Gym allows one simulation per process, and the evaluation envs are one already.
    if name.startswith("isaacgym/") and cfg.runtime.mode != "process":
        raise ConfigError(
            "runtime.mode",
            cfg.runtime.mode,
            "process with an Isaac Gym task (one simulation per "
            "process: the training envs need a process of their own)",
        )
    if name.startswith("isaacgym/") and cfg.algo.name == "ppo":
        raise ConfigError(
            "algo",
            "ppo",
            "pql, pql_d, sac or impala with an Isaac Gym task (PPO steps its training "
            "and evaluation envs in one process; Isaac Gym allows one simulation per process)",
        )
    algo = cfg.algo
    if isinstance(algo, PQLConfig) and algo.noise_std_max < algo.noise_std_min:
        raise ConfigError(
            "algo.noise_std_max", algo.noise_std_max, f"a number >= algo.noise_std_min ({algo.noise_std_min})"
        )
    if cfg.task.value_max <= cfg.task.value_min:
        raise ConfigError("task.value_max", cfg.task.value_max, f"a number > task.value_min ({cfg.task.value_min})")
    if isinstance(algo, PQLDConfig) and algo.v_max <= algo.v_min:
        raise ConfigError("algo.v_max", algo.v_max, f"a number > algo.v_min ({algo.v_min})")
    if cfg.replay.rerank_every is not None and (cfg.replay.kind, cfg.replay.priority_mode) != ("prioritized", "rank"):
        raise ConfigError(
            "replay.rerank_every",
            cfg.replay.rerank_every,
            "null, or an integer >= 1 together with replay.kind=prioritized replay.priority_mode=rank",
        )
    if cfg.replay.actor_priorities and cfg.replay.kind != "prioritized":
        raise ConfigError("replay.actor_priorities", True, "false, or true together with replay.kind=prioritized")
    if isinstance(algo, ImpalaConfig) and algo.c_bar > algo.rho_bar:
        raise ConfigError(
            "algo.c_bar", algo.c_bar, f"a number <= algo.rho_bar ({algo.rho_bar}): IMPALA needs rho_bar >= c_bar"
        )
    if isinstance(cfg.algo, OffPolicyConfig) and (cfg.algo.early_beta_av is None) != (cfg.algo.early_steps == 0):
        if cfg.algo.early_beta_av is None:
            raise ConfigError(
                "algo.early_steps",
                cfg.algo.early_steps,
                "0 without algo.early_beta_av (set it: the critic updates per actor step meanwhile)",
            )
        raise ConfigError(
            "algo.early_beta_av",
            cfg.algo.early_beta_av,
            "null with algo.early_steps=0 (set algo.early_steps > 0: how long it applies)",
        )
    if cfg.test and not cfg.checkpoint:
        raise ConfigError("test", True, "test=true together with checkpoint=PATH")


def load_config(raw: dict) -> Config:
    """Build and validate a Config from a plain (Hydra-composed, resolved) mapping."""
    raw = dict(raw)
    algo_raw = dict(raw.pop("algo", None) or {})
    algo_name = algo_raw.get("name", Config().algo.name)
    if not isinstance(algo_name, str) or algo_name not in ALGORITHMS:
        raise ConfigError("algo.name", algo_name, _algo_names())
    algo = _build(ALGORITHMS[algo_name].config, algo_raw, "algo")
    cfg = _build(Config, raw, "")
    cfg.algo = algo
    if isinstance(algo, OffPolicyConfig) and algo.nstep is None:
        algo.nstep = default_nstep(cfg.task.name)
    if isinstance(algo, PQLDConfig):
        algo.v_min = cfg.task.value_min * algo.reward_scale if algo.v_min is None else algo.v_min
        algo.v_max = cfg.task.value_max * algo.reward_scale if algo.v_max is None else algo.v_max
    _cross_checks(cfg)
    return cfg


def default_nstep(task_name: str) -> int:
    """algo.nstep's null: 1 for a task whose episodes last at most SHORT_EPISODE_STEPS steps, 3 for
    any other, and 3 for an Isaac Gym task, whose limit is known only once its env is made."""
    from tasks import TASKS

    task = TASKS.get(task_name)
    return 1 if task is not None and task.max_episode_steps <= SHORT_EPISODE_STEPS else 3


def to_dict(value):
    """A config (or any of its groups) as plain data, tuples as lists: what checkpoints, logs and
    Hydra's ConfigStore hold."""
    if dataclasses.is_dataclass(value):
        return {f.name: to_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [to_dict(v) for v in value]
    return value


# Sorting more items than this per critic update costs more than the rest of a prioritized update
# (~6 ms on a 2-core CPU, as much as a whole batch-8192 sampler step).
RERANK_WARN_ITEMS_PER_UPDATE = 65_536


ROLE_NAMES = ("actor", "v_learner", "p_learner")  # PQL's roles, placed by runtime.<role>_device
ROLE_DEVICE_KEYS = tuple(f"{name}_device" for name in ROLE_NAMES)


def _resolve_device(value: str, key: str = "runtime.device") -> str:
    """ "auto", "cpu", "cuda" or "cuda:N" -> "cpu" or "cuda:N" of a device this machine has."""
    import torch

    # device_count reads the GPUs through NVML where it can, without initialising CUDA: a process
    # becomes an MPS client only if CUDA starts after the daemon (pql/runtime/mps.py).
    count = torch.cuda.device_count()
    if value == "auto":
        value = "cuda" if count else "cpu"
    if value == "cpu":
        return value
    if not count:
        raise ConfigError(key, value, "cpu or auto: no CUDA device is available")
    index = (
        int(value[5:])
        if value.startswith("cuda:")
        else (torch.cuda.current_device() if torch.cuda.is_initialized() else 0)
    )
    if index >= count:
        raise ConfigError(
            key,
            value,
            f"cpu, auto, cuda or cuda:<index> with index < {count} (this machine has {count} CUDA device(s))",
        )
    return f"cuda:{index}"


def _resolve_role_devices(cfg: Config, device: str) -> None:
    """Each role's device: its own key, or runtime.device. Only PQL's three roles are placed."""
    runtime = cfg.runtime
    for key in ROLE_DEVICE_KEYS:
        value = getattr(runtime, key)
        if value is not None and not isinstance(cfg.algo, OffPolicyConfig):
            raise ConfigError(
                f"runtime.{key}",
                value,
                f"null with algo={cfg.algo.name} (role placement is for pql, pql_d and sac; use runtime.device)",
            )
        setattr(runtime, key, device if value is None else _resolve_device(value, f"runtime.{key}"))
    placed = {getattr(runtime, key) for key in ROLE_DEVICE_KEYS}
    # One process makes one GPU current: Triton launches and streams would land on it for every role.
    if runtime.mode == "sequential" and len(placed) > 1:
        raise ConfigError(
            "runtime.mode",
            "sequential",
            "process when the roles are on different devices ("
            + ", ".join(f"runtime.{key}={getattr(runtime, key)}" for key in ROLE_DEVICE_KEYS)
            + ")",
        )


def _replica_device(cfg: Config, local_rank: int) -> str:
    """Under torchrun each replica runs on one device, cuda:<LOCAL_RANK> or the CPU."""
    runtime = cfg.runtime
    for key in ROLE_DEVICE_KEYS:
        if getattr(runtime, key) is not None:
            raise ConfigError(
                f"runtime.{key}",
                getattr(runtime, key),
                "null under torchrun (each replica runs on one device: cuda:<LOCAL_RANK> or cpu)",
            )
    if runtime.device not in ("auto", "cuda", "cpu"):
        raise ConfigError(
            "runtime.device",
            runtime.device,
            "auto, cuda or cpu under torchrun (replica LOCAL_RANK takes cuda:<LOCAL_RANK>)",
        )
    if _resolve_device(runtime.device) == "cpu":
        return "cpu"
    return _resolve_device(f"cuda:{local_rank}")


def _check_sizes(cfg: Config) -> None:
    """Sizes that cannot work together, once the device's defaults are filled in."""
    from tasks import TASKS

    algo, replay, num_envs = cfg.algo, cfg.replay, cfg.task.num_envs
    if isinstance(algo, OffPolicyConfig):
        # One actor step writes num_envs transitions; a learner samples batch_size of them.
        need = max(algo.batch_size, num_envs)
        if replay.capacity < need:
            raise ConfigError(
                "replay.capacity",
                replay.capacity,
                f"an integer >= {need:,}: at least algo.batch_size ({algo.batch_size:,}) and "
                f"task.num_envs ({num_envs:,}, the transitions one actor step writes)",
            )
        task = TASKS.get(cfg.task.name)
        if task is not None and algo.nstep > task.max_episode_steps:
            raise ConfigError(
                "algo.nstep",
                algo.nstep,
                f"an integer <= {task.max_episode_steps} (the longest {cfg.task.name} episode)",
            )
    if isinstance(algo, PPOConfig) and algo.minibatches > algo.horizon * num_envs:
        raise ConfigError(
            "algo.minibatches",
            algo.minibatches,
            f"at most algo.horizon * task.num_envs = {algo.horizon * num_envs} (one sample per minibatch at least)",
        )


def apply_device_defaults(cfg: Config, local_rank: int | None = None, replicas: int = 1, announce: bool = True):
    """Resolve `device: auto` (to cpu or cuda:N) and the null settings for the device, check what
    the device cannot run, print the settings (unless not `announce`: a check before the run),
    return the device. local_rank: this replica's rank on its machine under torchrun (None without)."""
    import torch

    from pql import __version__

    if local_rank is None:
        device = cfg.runtime.device = _resolve_device(cfg.runtime.device)
    else:
        device = cfg.runtime.device = _replica_device(cfg, local_rank)
    _resolve_role_devices(cfg, device)
    on_gpu = device.startswith("cuda")
    if cfg.runtime.actor_device.startswith("cuda") and cfg.actor.precision == "int8":
        raise ConfigError("actor.precision", "int8", "fp32 or bf16 on CUDA (int8 inference runs on the CPU only)")

    # What fits the device (each field's on_device): a GPU carries thousands of envs and large
    # batches at hundreds of thousands of env steps/s; two CPU cores carry tens of envs at a few hundred.
    for group in (cfg.task, cfg.algo, cfg.replay, cfg.runtime):
        for f in dataclasses.fields(group):
            on_device = f.metadata.get("on_device")
            if on_device is not None and getattr(group, f.name) is None:
                value = on_device[0 if on_gpu else 1]
                setattr(group, f.name, getattr(group, value) if isinstance(value, str) else value)
    _check_sizes(cfg)
    runtime = cfg.runtime
    replay = cfg.replay
    if not announce:
        return torch.device(device)
    if replay.rerank_every is not None and replay.capacity // replay.rerank_every > RERANK_WARN_ITEMS_PER_UPDATE:
        print(
            f"pql: warning: replay.rerank_every={replay.rerank_every} re-sorts all {replay.capacity:,} items every "
            f"{replay.rerank_every} critic updates ({replay.capacity // replay.rerank_every:,} items per update; one "
            "sort of 2^20 items takes ~0.15 s on a 2-core CPU, docs/kernels.md); null re-sorts every "
            "capacity / batch_size updates",
            flush=True,
        )
    per_replica = " (num_envs, batch_size and replay per replica; env steps of all)"
    print(
        f"pql {__version__}: task={cfg.task.name} algo={cfg.algo.name} device={device} num_envs={cfg.task.num_envs} "
        f"mode={cfg.runtime.mode}"
        + (f" replicas={replicas}{per_replica}" if replicas > 1 else "")
        + (f" batch_size={cfg.algo.batch_size}" if hasattr(cfg.algo, "batch_size") else "")
        + (f" nstep={cfg.algo.nstep}" if hasattr(cfg.algo, "nstep") else "")
        + f" replay={cfg.replay.kind}:{cfg.replay.capacity:,} max_env_steps={runtime.max_env_steps:,} "
        f"eval_every={runtime.eval_every:,} checkpoint_every={runtime.checkpoint_every:,}"
        + (f" compile={str(runtime.compile).lower()}" if on_gpu or runtime.compile else "")
        + (
            ""
            if {getattr(runtime, k) for k in ROLE_DEVICE_KEYS} == {device}
            else " placement=" + ",".join(f"{k[: -len('_device')]}:{getattr(runtime, k)}" for k in ROLE_DEVICE_KEYS)
        ),
        flush=True,
    )
    return torch.device(device)


def register_configs() -> None:
    """Store the defaults in Hydra's ConfigStore, where cfg/config.yaml composes them from:
    `pql_base` (every group but algo) and one `algo` option per algorithm. Calling it again
    stores the same nodes again.

    Plain mappings, not the dataclasses: OmegaConf would type-check those with multi-line
    errors of its own, before `load_config` can give its one line.
    """
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    base = to_dict(Config())
    del base["algo"]
    store.store(name="pql_base", node=base)
    for name, algorithm in ALGORITHMS.items():
        store.store(group="algo", name=name, node=to_dict(algorithm.config()))


_REFERENCE_START, _REFERENCE_END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def _default(f: dataclasses.Field):
    return f.default if f.default_factory is dataclasses.MISSING else f.default_factory()


def _yaml(value) -> str:
    """A default as it would be written in YAML or on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return f"[{', '.join(map(str, value))}]"
    if isinstance(value, float):
        return f"{value:g}".replace("e-0", "e-")
    return str(value)


def _rows(key: str, f: dataclasses.Field, value) -> list[str]:
    """Reference table rows of field `f` at `key` with default `value`; a nested group's flattened."""
    if dataclasses.is_dataclass(value):
        return [row for g in dataclasses.fields(value) for row in _rows(f"{key}.{g.name}", g, getattr(value, g.name))]
    meaning = "; ".join(text for text in (f.metadata["doc"], _allowed(f)) if text).replace("|", r"\|")
    return [f"| `{key}` | `{_yaml(value)}` | {meaning} |"]


def _table(title: str, rows: list[str]) -> str:
    return "\n".join([title, "", "| key | default | meaning |", "|---|---|---|", *rows])


def _algo_reference() -> list[str]:
    """The algo group: the keys pql, pql_d and sac share, then per algorithm the keys it adds to
    the nearest class already shown (all its keys if none is)."""
    default = Config().algo
    name = next(f for f in dataclasses.fields(default) if f.name == "name")
    blocks = [
        f"**algo**: {name.metadata['doc']} (`algo.name`, default `{default.name}`): {_allowed(name)}. "
        "Each has its own keys."
    ]
    name_of = {algorithm.config: algo_name for algo_name, algorithm in ALGORITHMS.items()}
    off_policy = [n for cls, n in name_of.items() if issubclass(cls, OffPolicyConfig)]
    tables = [(f"*{', '.join(off_policy[:-1])} and {off_policy[-1]} share*", OffPolicyConfig, None)]
    for cls, algo_name in name_of.items():
        base = next((c for c in cls.__mro__[1:] if c is OffPolicyConfig or c in name_of), None)
        title = (
            f"*{algo_name}*"
            if base is None
            else f"*{algo_name} adds*"
            if base is OffPolicyConfig
            else f"*{algo_name} adds to {name_of[base]}'s*"
        )
        tables.append((title, cls, base))
    for title, cls, base in tables:
        shown = {"name"} | ({f.name for f in dataclasses.fields(base)} if base else set())
        blocks.append(
            _table(
                title,
                [
                    row
                    for f in dataclasses.fields(cls)
                    if f.name not in shown
                    for row in _rows(f"algo.{f.name}", f, _default(f))
                ],
            )
        )
    return blocks


def reference_markdown() -> str:
    """The configuration reference: one table per group, rendered from the fields above (the
    key, its default and its meaning and allowed values)."""
    blocks, top = [], []
    for f in dataclasses.fields(Config):
        value = _default(f)
        if f.name == "algo":
            blocks += _algo_reference()
        elif dataclasses.is_dataclass(value):
            blocks.append(_table(f"**{f.name}**", _rows(f.name, f, value)))
        else:
            top += _rows(f.name, f, value)
    return "\n\n".join([*blocks, _table("**top level**", top)])


def _update_reference(path: str) -> None:
    """Rewrite the text between the reference markers in `path` (docs/configuration.md)."""
    with open(path, encoding="utf-8") as file:
        text = file.read()
    if text.count(_REFERENCE_START) != 1 or text.count(_REFERENCE_END) != 1:
        raise SystemExit(f"{path}: expected one {_REFERENCE_START} and one {_REFERENCE_END}")
    head, rest = text.split(_REFERENCE_START)
    tail = rest.split(_REFERENCE_END)[1]
    with open(path, "w", encoding="utf-8") as file:
        file.write(f"{head}{_REFERENCE_START}\n\n{reference_markdown()}\n\n{_REFERENCE_END}{tail}")


if __name__ == "__main__":
    import sys

    # python -m pql.config: print the reference; python -m pql.config docs/configuration.md: update it there.
    if len(sys.argv) > 1:
        _update_reference(sys.argv[1])
    else:
        print(reference_markdown())
