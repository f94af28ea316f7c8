"""The config's groups as typed dataclasses: the one home of every default.

Each key is an `option` (pql/config/fields.py) carrying its constraint and meaning. Ratios
follow the paper's notation β_a:v = 1:beta_av (critic updates per batched actor step, i.e. per
`num_envs` env steps) and β_p:v = 1:beta_pv (critic updates per policy update).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pql.config.algorithms import ALGORITHMS
from pql.config.fields import (
    at_least_one,
    device_name,
    discount,
    layer_widths,
    non_negative,
    one_of,
    option,
    positive,
    unit_interval,
)


def task_names() -> str:
    """What task.name allows."""
    # The one list of tasks lives with the simulators, which import torch: read on use, so that
    # importing pql.config never imports torch.
    from tasks import TASK_NAMES

    return f"one of {', '.join(TASK_NAMES)}, dmc/<domain>-<task>, or gym:<EnvId>, <module>:<factory> or isaacgym/<Task>"


def algo_names() -> str:
    """What algo.name allows."""
    return f"one of {', '.join(ALGORITHMS)}"


def _algo_name(default=dataclasses.MISSING):
    """An algorithm config's `name`: `load_config` picks the class by it (pql/config/algorithms.py)."""
    return option(default, algo_names, lambda v: v in ALGORITHMS, doc="the algorithm, picked with `algo=<name>`")


@dataclass
class TaskConfig:
    name: str = option("Ant", task_names, doc="the task, picked with `task=<Task>` (docs/tasks.md)")
    num_envs: int | None = option(
        None, "an integer > 0", positive, on_device=(4096, "cpu_num_envs"), doc="training envs"
    )
    backend: str = option(
        "auto",
        "one of auto, mujoco, mjwarp",
        one_of("auto", "mujoco", "mjwarp"),
        doc="the simulator: mujoco (MuJoCo C on CPU threads) or mjwarp (MuJoCo Warp); auto: mjwarp "
        "on CUDA, mujoco on the CPU; Isaac Gym tasks ignore it",
    )
    eval_envs: int = option(
        10, "an integer > 0", positive, doc="evaluation envs (deterministic policy, one episode each)"
    )
    cpu_num_envs: int = option(
        128,
        "an integer > 0",
        positive,
        doc="training envs on CPU when task.num_envs is null (set per task in cfg/task/<Task>.yaml)",
    )
    # Truncated episodes bootstrap, so a value is an infinite-horizon sum: about the reward per
    # step / (1 − γ). Each task file sets the range from its reward's bounds (docs/tasks.md).
    value_min: float = option(
        -100.0,
        "a number < task.value_max",
        doc="lowest discounted return the task's values reach (γ = 0.99), what pql_d's "
        "support starts at when algo.v_min is null (set per task in cfg/task/<Task>.yaml)",
    )
    value_max: float = option(
        1000.0,
        "a number > task.value_min",
        doc="highest discounted return, pql_d's highest atom when algo.v_max is null",
    )
    # The user's own envs (docs/own_env.md); pql's tasks take none of these.
    kwargs: dict = option(
        {},
        "a mapping of keyword arguments",
        doc="keyword arguments for a gym:<EnvId> env (gym.make's) or a <module>:<factory> factory, "
        "given as task.kwargs.<name>=<value>",
    )
    action_repeat: int = option(
        1,
        "an integer > 0 (> 1 for dmc/<domain>-<task> tasks only)",
        positive,
        doc="control steps each action is applied for, their rewards summed; episodes keep their "
        "control steps (1,000 for dmc/ tasks: 500 actions at 2, the published scores' setting)",
    )
    import_module: str | None = option(
        None,
        "a module name such as gymnasium_robotics",
        doc="a module a gym:<EnvId> task imports first, where a package registers its ids",
    )
    policy_group: str | None = option(
        None,
        "an observation group's name such as policy or actor",
        doc="the observation group the policy sees, of a <module>:<factory> env with groups (an rsl_rl "
        "VecEnv's TensorDict); null: policy where the env has it, else actor",
    )
    critic_group: str | None = option(
        None,
        "an observation group's name such as critic",
        doc="the observation group the critic sees, of a <module>:<factory> env with groups; null: critic "
        "where the env has it, else the policy's",
    )
    privileged_critic: bool = option(
        True,
        "true or false",
        doc="whether the critic reads the observations an env offers it beside the policy's (a critic group: "
        "asymmetric actor-critic); false: it reads the policy's",
    )
    vectorization: str = option(
        "async",
        "one of async, sync",
        one_of("async", "sync"),
        doc="how a gym:<EnvId> task steps its copies: async (a subprocess each) or sync (in the process)",
    )


@dataclass
class NetConfig:
    actor_hidden: tuple = option(
        (256, 256), "a non-empty list of positive layer widths", layer_widths, doc="hidden widths of the policy MLP"
    )
    critic_hidden: tuple = option(
        (256, 256),
        "a non-empty list of positive layer widths",
        layer_widths,
        doc="hidden widths of the critic (value) MLP",
    )
    # ReLU: a critic update costs 20% less than with ELU on a CPU, where ELU's expm1 was a fifth
    # of the update, at no measured loss of return on Ant (docs/tuning.md).
    activation: str = option(
        "relu", "one of elu, relu", one_of("elu", "relu"), doc="the hidden layers' activation, in every network"
    )
    # LayerNorm keeps early Q-learning from diverging when the replay holds few states (MuJoCo
    # Ant on a CPU collapsed without it).
    critic_layer_norm: bool = option(
        True, "true or false", doc="LayerNorm before each hidden activation of an mlp critic"
    )
    kind: str = option(
        "mlp",
        "one of mlp, hyperspherical, batchnorm",
        one_of("mlp", "hyperspherical", "batchnorm"),
        doc="the policy's and the critic's network: mlp, linear layers and activations; "
        "hyperspherical, SimbaV2's residual net on the unit sphere; batchnorm, FlashSAC's "
        "batch-normalized residual net (the residual kinds: one block per entry of the hidden "
        "widths, all equal; weights re-projected after each step; off-policy algorithms only)",
    )
    expansion: int = option(
        4, "an integer >= 1", at_least_one, doc="how much a residual block's inner layer widens its width"
    )


def _on_policy_net() -> NetConfig:
    """PPO's and IMPALA's nets: narrower than the off-policy ones, no LayerNorm, and ELU (what their
    learning tests were measured with; docs/tuning.md measured ReLU for the off-policy ones only)."""
    return NetConfig(
        actor_hidden=(256, 128, 64), critic_hidden=(256, 128, 64), critic_layer_norm=False, activation="elu"
    )


# Three-step targets keep HalfCheetah upright and Ant ahead on their 1,000-step episodes; on
# Reacher's 50 and Pusher's 100 they lose to one-step targets, which beat SB3's SAC there while
# three-step ones do not (docs/tuning.md, algo.nstep).
SHORT_EPISODE_STEPS = 100


@dataclass
class OffPolicyConfig:
    """The keys shared by the algorithms on the three-role off-policy runtime (pql, pql_d, sac)."""

    # No default: the shared keys are no algorithm of their own.
    name: str = _algo_name()
    gamma: float | None = option(
        None,
        "null or a number in (0, 1]",
        discount,
        doc="discount γ; null: the task's (0.97 for Anymal), 0.99 for any other",
    )
    nstep: int | None = option(
        None,
        "null or an integer >= 1",
        at_least_one,
        doc="n of the n-step returns; null: 1 for a task whose episodes last at most "
        f"{SHORT_EPISODE_STEPS} steps (Reacher, Pusher), 3 for any other (docs/tuning.md)",
    )
    greedy_nstep: bool = option(
        False,
        "true or false",
        doc="the critic's target is the larger of the n-step and the one-step target "
        "(Wang et al., 2021); the replay then keeps each transition's first step too "
        "(no effect with algo.nstep=1)",
    )
    tau: float = option(0.05, "a number in (0, 1]", discount, doc="soft-update rate of the target critic")
    # PQL (Li et al., 2023) scales Ant's reward by 0.01; docs/tuning.md measures what it does here.
    reward_scale: float = option(
        1.0,
        "a number > 0",
        positive,
        doc="the actor multiplies each reward by it before the reward enters the replay, so "
        "the critic learns scaled values, while every logged return is the env's own; "
        "pql_d's support from task.value_min / value_max is scaled with it",
    )
    batch_size: int | None = option(
        None, "an integer > 0", positive, on_device=(8192, 128), doc="transitions sampled per update"
    )
    critic_lr: float = option(3e-4, "a number > 0", positive, doc="Adam learning rate of the critic")
    actor_lr: float = option(3e-4, "a number > 0", positive, doc="Adam learning rate of the policy")
    # 1:16 on every device: on a GPU, 1:8 left HalfCheetah on its back in 7 of 12 runs and 1:16 in
    # none of 6, with Ant no worse at equal wall time (docs/tuning.md, algo.beta_av).
    beta_av: int = option(
        16, "an integer >= 1 (critic updates per batched actor step, β_a:v = 1:beta_av)", at_least_one
    )
    beta_pv: int = option(2, "an integer >= 1 (critic updates per policy update, β_p:v = 1:beta_pv)", at_least_one)
    # Early updates per sample settle HalfCheetah's posture: one-step and greedy targets roll it
    # onto its back at 32 samples per env step and keep it upright at 128 (docs/tuning.md).
    early_beta_av: int | None = option(
        None,
        "null or an integer >= 1",
        at_least_one,
        doc="critic updates per batched actor step during the run's first "
        "algo.early_steps actor steps; null: algo.beta_av throughout",
    )
    early_steps: int = option(
        0,
        "an integer >= 0",
        non_negative,
        doc="batched actor steps at the start of a run (after the warm-up) that algo.early_beta_av applies to",
    )
    warmup_steps: int = option(
        32, "an integer >= 0 (batched actor steps with uniform random actions before learning)", non_negative
    )
    # A per-update rate: τ = 0.001 lagged too far for the short InvertedDoublePendulum and
    # two-replica InvertedPendulum runs of the learning tests (docs/tuning.md); 0.005 does not.
    policy_average: float = option(
        0.005,
        "a number in [0, 1]",
        unit_interval,
        doc="rate τ of the Polyak average θ̄ ← τθ + (1 − τ)θ̄ of the policy, taken at each "
        "policy update (the plain mean until 1/τ updates); the average is the policy "
        "the run evaluates, checkpoints and delivers, while the actor explores with the "
        "latest; 0: the latest policy is delivered",
    )
    value: str = option(
        "scalar",
        "one of scalar, categorical, hl_gauss",
        one_of("scalar", "categorical", "hl_gauss"),
        doc="the critic's heads: scalar, one Q each with a squared TD error; categorical, "
        "algo.num_atoms logits each over a fixed support, trained by cross-entropy to the "
        "projected target (C51); hl_gauss, the same heads trained by cross-entropy to the "
        "scalar target spread over the atoms as a normal of σ = 0.75 atom spacings (HL-Gauss)",
    )
    num_atoms: int = option(
        101,
        "an integer >= 2",
        lambda v: v >= 2,
        doc="atoms z_i = v_min + iΔz of a categorical or hl_gauss critic's support",
    )
    v_min: float | None = option(
        None,
        "a number < v_max, or null",
        doc="a categorical critic's lowest atom; null: with algo.return_scaling 0 for a task "
        "whose task.value_min >= 0 (every DMC task), else −algo.return_bound; without it "
        "task.value_min × algo.reward_scale. Values outside the support are clipped onto it",
    )
    v_max: float | None = option(
        None,
        "a number > v_min, or null",
        doc="its highest atom; null: with algo.return_scaling 0 for a task whose "
        "task.value_max <= 0, else algo.return_bound; without it task.value_max × algo.reward_scale",
    )
    return_scaling: bool = option(
        False,
        "true or false",
        doc="the critic learns rewards divided by a running scale of the discounted return, "
        "max(σ_G, max G / algo.v_max, min G / algo.v_min) (SimbaV2, FlashSAC; an end at 0 "
        "takes no part), so that its values stay within the support [v_min, v_max] on every "
        "task; the actor tracks G per env, every role reads its latest statistics",
    )
    return_bound: float = option(
        5.0,
        "a number > 0",
        positive,
        doc="the largest |return| algo.return_scaling lets the critic see: the ends of "
        "its support when algo.v_min and algo.v_max are null",
    )
    noise_hold: int = option(
        0,
        "an integer >= 0",
        non_negative,
        doc="the longest an exploration draw is held: each env keeps its draw for k steps, "
        "k ~ Zeta(algo.noise_hold_mu) on 1..noise_hold (FlashSAC: 16); 0: a fresh draw every step",
    )
    noise_hold_mu: float = option(
        2.0, "a number > 1", lambda v: v > 1, doc="μ of the hold lengths' Zeta distribution, P(k) ∝ k^−μ"
    )
    mirror: bool | None = option(
        None,
        "null, true or false (true needs a task with a mirror symmetry: Anymal)",
        doc="each learner batch is joined by its mirror image (the task's left-right symmetry, "
        "as rsl_rl and FastSAC augment legged robots): the critic and the policy train on "
        "twice the batch, half of it mirrored; null: on for a task that trains better so (Anymal)",
    )
    net: NetConfig = field(default_factory=NetConfig)


@dataclass
class PQLConfig(OffPolicyConfig):
    name: str = _algo_name("pql")
    exploration: str = option(
        "mixed",
        "one of mixed, ape_x",
        one_of("mixed", "ape_x"),
        doc="mixed: env i's noise std spread evenly over [noise_std_min, noise_std_max]; ape_x: "
        "env l of L gets ε^(1 + α·l/(L−1))",
    )
    noise_std_min: float = option(0.05, "a number >= 0", non_negative, doc="smallest noise std of mixed exploration")
    noise_std_max: float = option(
        0.8, "a number >= noise_std_min", non_negative, doc="largest noise std of mixed exploration"
    )
    ape_x_epsilon: float = option(0.4, "a number in (0, 1)", lambda v: 0.0 < v < 1.0, doc="ε of ape_x exploration")
    ape_x_alpha: float = option(8.0, "a number >= 0", non_negative, doc="α of ape_x exploration")
    target_noise: float = option(0.2, "a number >= 0", non_negative, doc="noise std of TD3's target-policy smoothing")
    target_noise_clip: float = option(0.5, "a number >= 0", non_negative, doc="clip of that noise")


@dataclass
class PQLDConfig(PQLConfig):
    """PQL with a categorical distributional critic."""

    name: str = _algo_name("pql_d")
    value: str = option(
        "categorical",
        "one of scalar, categorical, hl_gauss",
        one_of("scalar", "categorical", "hl_gauss"),
        doc="the critic's heads (pql_d: categorical; scalar makes it pql)",
    )


@dataclass
class SACConfig(OffPolicyConfig):
    """SAC explores by sampling its own policy and smooths no target, so it has no noise keys."""

    name: str = _algo_name("sac")
    init_alpha: float = option(
        0.1, "a number > 0", positive, doc="initial temperature α, tuned towards the target entropy −act_dim"
    )
    alpha_lr: float = option(3e-4, "a number > 0", positive, doc="Adam learning rate of α")
    target_entropy_std: float | None = option(
        None,
        "null or a number > 0",
        positive,
        doc="the target entropy: null, SAC's −act_dim; σ, that of a Gaussian of std σ in every action "
        "dimension, act_dim/2·log(2πeσ²) (FlashSAC: 0.15)",
    )
    # ELU, as measured before: ReLU was measured for PQL only (docs/tuning.md), and SAC's
    # InvertedPendulum test did not solve in its 170 s with ReLU and β_a:v 1:16.
    net: NetConfig = field(default_factory=lambda: NetConfig(activation="elu"))


@dataclass
class PPOConfig:
    """PPO with GAE, in one process: collect horizon × task.num_envs steps, then epochs ×
    minibatches clipped-objective steps."""

    name: str = _algo_name("ppo")
    gamma: float = option(0.99, "a number in (0, 1]", discount, doc="discount γ")
    gae_lambda: float = option(0.95, "a number in [0, 1]", unit_interval, doc="GAE λ")
    horizon: int = option(32, "an integer >= 1 (env steps per env per rollout)", at_least_one)
    epochs: int = option(5, "an integer >= 1", at_least_one, doc="passes over each rollout")
    minibatches: int = option(4, "an integer >= 1", at_least_one, doc="minibatches per pass (the rollout split evenly)")
    clip: float = option(0.2, "a number > 0", positive, doc="ε of the clipped surrogate")
    value_clip: float = option(0.2, "a number > 0", positive, doc="ε_V of the clipped value loss")
    lr: float = option(3e-4, "a number > 0", positive, doc="Adam learning rate")
    entropy_coef: float = option(0.0, "a number >= 0", non_negative, doc="weight of the entropy bonus")
    value_coef: float = option(0.5, "a number >= 0", non_negative, doc="weight of the value loss")
    max_grad_norm: float = option(1.0, "a number > 0", positive, doc="gradient-norm clip")
    init_log_std: float = option(-0.5, "a number", doc="initial log σ of the Gaussian policy (actions in [-1, 1])")
    net: NetConfig = field(default_factory=_on_policy_net)


@dataclass
class ImpalaConfig:
    """IMPALA: the actor rolls out unroll-step trajectories with its lagging policy copy into a ring
    of queue_size slots; the learner applies the V-trace actor-critic update."""

    name: str = _algo_name("impala")
    gamma: float = option(0.99, "a number in (0, 1]", discount, doc="discount γ")
    unroll: int = option(16, "an integer >= 1 (T, steps per trajectory)", at_least_one)
    rho_bar: float = option(
        1.0, "a number > 0 and >= c_bar", positive, doc="ρ̄, V-trace's clip on the importance weight of the TD error"
    )
    c_bar: float = option(
        1.0, "a number > 0 and <= rho_bar", positive, doc="c̄, V-trace's clip on the trace-cutting weights"
    )
    lam: float = option(1.0, "a number in [0, 1]", unit_interval, doc="λ of V-trace's traces")
    lr: float = option(3e-4, "a number > 0", positive, doc="Adam learning rate")
    entropy_coef: float = option(1e-3, "a number >= 0", non_negative, doc="weight of the entropy bonus")
    baseline_coef: float = option(0.5, "a number >= 0", non_negative, doc="weight of the baseline loss")
    max_grad_norm: float = option(1.0, "a number > 0", positive, doc="gradient-norm clip")
    init_log_std: float = option(-0.5, "a number", doc="initial log σ of the Gaussian policy (actions in [-1, 1])")
    queue_size: int = option(2, "an integer >= 1 (trajectory batches in flight)", at_least_one)
    net: NetConfig = field(default_factory=_on_policy_net)


@dataclass
class ReplayConfig:
    kind: str = option(
        "uniform",
        "one of uniform, prioritized",
        one_of("uniform", "prioritized"),
        doc="how the critic's batches are sampled",
    )
    capacity: int | None = option(
        None, "an integer > 0", positive, on_device=(5_000_000, 1_000_000), doc="transitions the replay holds"
    )
    priority_mode: str = option(
        "proportional",
        "one of proportional, rank",
        one_of("proportional", "rank"),
        doc="proportional p = (|δ| + ε)^α, or rank p = (1/rank)^α",
    )
    rerank_every: int | None = option(
        None,
        "an integer >= 1 (rank mode: critic updates between re-ranks; 1: exact "
        "ranks) or null (replay size / batch size)",
        positive,
        doc="rank mode sorts the whole replay at a re-rank; ranks in between are "
        "estimated against the last sort (docs/kernels.md has the costs)",
    )
    priority_alpha: float = option(0.6, "a number >= 0", non_negative, doc="α of the priorities")
    priority_beta0: float = option(
        0.4, "a number in [0, 1]", unit_interval, doc="β₀ of the importance weights, annealed linearly to 1"
    )
    beta_anneal_updates: int = option(100_000, "an integer > 0 (critic updates over which β goes to 1)", positive)
    priority_eps: float = option(1e-6, "a number > 0", positive, doc="ε of the proportional priorities")
    actor_priorities: bool = option(
        False,
        "true or false (true needs replay.kind=prioritized)",
        doc="true: the actor computes new items' priorities with its own critic copy (Ape-X) "
        "where the data is made; false: new items enter at the maximum priority",
    )
    priority_eta: float = option(
        0.9,
        "a number in [0, 1]",
        unit_interval,
        doc="η of the actor's sequence priority η·max|δ| + (1−η)·mean|δ| over the one-step TD "
        "errors of each n-step window",
    )


@dataclass
class ActorConfig:
    precision: str = option(
        "fp32",
        "one of fp32, bf16, int8",
        one_of("fp32", "bf16", "int8"),
        doc="the actor's inference copy of the policy (int8 on CPU only)",
    )


# The roles of the three-role off-policy runtime, each placed by runtime.<role>_device below.
MPS_MODES = ("auto", "on", "off")  # runtime.mps (pql/runtime/mps.py)
VIDEO_SECONDS = 10.0  # runtime.video_every: a video's longest, in the env's simulated seconds
ROLE_NAMES = ("actor", "v_learner", "p_learner")
ROLE_DEVICE_KEYS = tuple(f"{name}_device" for name in ROLE_NAMES)


@dataclass
class RuntimeConfig:
    mode: str = option(
        "process",
        "one of process, sequential",
        one_of("process", "sequential"),
        doc="process: each role in a process of its own; sequential: the roles in one process",
    )
    device: str = option(
        "auto",
        "auto, cpu, cuda or cuda:<index>",
        device_name,
        doc="every process of the run makes that GPU its current device; auto: cuda if there is one",
    )
    actor_device: str | None = option(
        None,
        "null, auto, cpu, cuda or cuda:<index>",
        device_name,
        doc="the actor's device (its envs, policy copy and the staging ring); null: runtime.device",
    )
    v_learner_device: str | None = option(
        None,
        "null, auto, cpu, cuda or cuda:<index>",
        device_name,
        doc="the V-learner's device (replay, critic); null: runtime.device",
    )
    p_learner_device: str | None = option(
        None,
        "null, auto, cpu, cuda or cuda:<index>",
        device_name,
        doc="the P-learner's device (observation replay, policy); null: runtime.device",
    )
    seed: int = option(0, "an integer >= 0", non_negative, doc="random seed")
    # On a CPU the budget is wall time: README's command ends in 15 minutes on any machine, and a
    # faster one trains further (docs/tuning.md); the env-step cap there is only a bound.
    max_env_steps: int | None = option(
        None,
        "an integer > 0",
        positive,
        on_device=(20_000_000, 10_000_000),
        doc="env steps of training (under torchrun: of all replicas together)",
    )
    max_time_s: float | None = option(
        None,
        "a number > 0",
        positive,
        on_device=(None, 885.0),
        doc="wall-time limit of training in seconds; with the final evaluation and "
        "checkpoint a run takes about 10 s more",
    )
    stop_at_return: float | None = option(
        None,
        "a number or null",
        doc="stop once an evaluation reaches this return (that evaluation is the run's final one)",
    )
    eval_every: int | None = option(
        None,
        "an integer > 0",
        positive,
        on_device=(2_000_000, 50_000),
        doc="env steps between evaluations (one that would end past "
        "runtime.max_time_s, as long as the last, is left to the final one)",
    )
    checkpoint_every: int | None = option(
        None, "an integer > 0", positive, on_device=(5_000_000, 100_000), doc="env steps between checkpoints"
    )
    checkpoint_replay: bool = option(
        True,
        "true or false",
        doc="checkpoints hold the off-policy learners' replay, beside checkpoint.pt, so that a resume continues "
        "where the run stopped (docs/checkpoints.md); a checkpoint without room for it on the disk leaves it out",
    )
    policy_publish_every: int = option(
        1,
        "an integer >= 1",
        at_least_one,
        doc="policy updates between publications of the policy weights (P-learner; IMPALA's learner)",
    )
    critic_publish_every: int = option(
        1, "an integer >= 1", at_least_one, doc="critic updates between publications of the critic weights (V-learner)"
    )
    actor_pull_every: int = option(
        1, "an integer >= 1", at_least_one, doc="actor steps between the actor's copies of the published weights"
    )
    v_learner_pull_every: int = option(
        1, "an integer >= 1", at_least_one, doc="critic updates between the V-learner's copies of the published policy"
    )
    max_lag: int = option(4, "an integer >= 1 (batched actor steps a role may run ahead of the ratio)", at_least_one)
    max_critic_loss: float | None = option(
        None,
        "a number > 0, or null (no bound)",
        positive,
        doc="a critic loss above it stops the run as diverged (nan and inf "
        "in any loss always do); the scale is the task's, so no default",
    )
    stall_timeout_s: float = option(
        600.0,
        "a number > 0 (a role waiting longer than this stops the run)",
        positive,
        doc="also how long a collective waits for the other replicas under torchrun",
    )
    startup_timeout_s: float = option(
        1800.0,
        "a number > 0 (the stall limit until every role has made progress)",
        positive,
        doc="covers building envs, Warp compiling its kernels cold and CUDA graph capture",
    )
    compile: bool | None = option(
        None,
        "true, false or null",
        on_device=(True, False),
        doc="each learner's whole update compiled as one graph by torch.compile (a CUDA graph on CUDA; "
        "on the CPU a C++ compiler is needed, and without one the updates run eagerly)",
    )
    mps: str = option(
        "auto",
        "one of " + ", ".join(MPS_MODES),
        one_of(*MPS_MODES),
        doc="process mode on CUDA: a private MPS daemon lets the role processes run on the GPU at "
        "the same time (auto: when the driver's nvidia-cuda-mps-control is there; on: or stop)",
    )
    eval_max_share: float = option(
        0.05,
        "a number in (0, 1] (1: no bound)",
        lambda v: 0 < v <= 1,
        doc="the largest share of the wall time evaluations may take: one starts only "
        "if it and the final one, each as long as the longest so far, fit",
    )
    video_every: int = option(
        0,
        "an integer >= 0 (0: none)",
        non_negative,
        doc="every k-th evaluation also records env 0's first episode, at most "
        f"{VIDEO_SECONDS:.0f} s of it, as a video: <run>/videos/eval_<env steps>.mp4, TensorBoard's "
        "eval/video and wandb (its time counts as the evaluation's; needs an env that renders: "
        "docs/deploy.md)",
    )
    export: bool = option(
        True,
        "true or false",
        doc="a run that ends (not one stopped by a signal) exports its policy: <run>/exported/policy.pt, "
        "and policy.onnx with pql[export] (pql.export, docs/deploy.md)",
    )
    log_every_s: float = option(10.0, "a number > 0", positive, doc="seconds between console lines and scalar logs")
    torch_threads: int | None = option(
        None, "an integer > 0 (null: cores shared out among the roles)", positive, doc="torch threads per role"
    )


@dataclass
class WandbConfig:
    activate: bool = option(False, "true or false", doc="log to Weights & Biases")
    project: str = option("pql", "a project name", doc="the wandb project")
    entity: str | None = option(None, "a wandb entity or null")
    mode: str = option(
        "online",
        "one of online, offline",
        one_of("online", "offline"),
        doc="offline works with no network (`wandb sync` later)",
    )
    group: str | None = option(None, "a group name or null", doc="the wandb run group")


CHECKPOINT_AUTO = "auto"  # checkpoint=auto: resume the run directory's checkpoint if there is one


@dataclass
class Config:
    task: TaskConfig = field(default_factory=TaskConfig)
    algo: Any = field(default_factory=PQLConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    checkpoint: str | None = option(
        None,
        f"a path to a checkpoint file, {CHECKPOINT_AUTO} or null",
        doc="resume from it (with test=true: evaluate it); auto: the run directory's checkpoint.pt if "
        "there is one, else start fresh (with `hydra.run.dir=runs/NAME`: Hydra's default directory is "
        "new at every launch; not with test=true)",
    )
    test: bool = option(False, "true or false (true: evaluate `checkpoint` without training)")
    run_dir: str = option(
        ".",
        "a directory",
        doc="where the run writes logs and checkpoints; train.py sets it to "
        "Hydra's run directory (`hydra.run.dir=…` chooses it)",
    )
