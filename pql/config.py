"""Typed configuration for every group, validated once at start.

Hydra composes YAML (cfg/); `load_config` turns the composed mapping into these dataclasses and
checks every value. A bad value raises `ConfigError` naming the key, the value and what is
allowed; `train.py` prints that one line and exits with code 2. Code past this point never
reads raw dicts.

Ratios follow the paper's notation β_a:v = 1:beta_av (critic updates per batched actor step,
i.e. per `num_envs` env steps) and β_p:v = 1:beta_pv (critic updates per policy update).
"""
from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Optional


class ConfigError(ValueError):
    """A config value that is not allowed; str() is the one line shown to the user."""

    def __init__(self, key: str, value: Any, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"config error: {key}={value!r} is not allowed; expected {allowed}")


def _opt(default, allowed: str, check: Callable[[Any], bool] = lambda v: True):
    """A field with its constraint, checked by `_build` (None always passes for Optional fields)."""
    if isinstance(default, (list, tuple)):
        return field(default_factory=lambda: tuple(default), metadata={"allowed": allowed, "check": check})
    return field(default=default, metadata={"allowed": allowed, "check": check})


def _positive(v) -> bool:
    return v > 0


def _non_negative(v) -> bool:
    return v >= 0


def _unit_interval(v) -> bool:
    return 0.0 <= v <= 1.0


def _one_of(*choices):
    return lambda v: v in choices


@dataclass
class TaskConfig:
    name: str = _opt("Ant", "a task name (see tasks.TASK_NAMES) or isaacgym/<Task>")
    num_envs: Optional[int] = _opt(None, "an integer > 0 (null: 4096 on CUDA, a CPU-sized default on CPU)", _positive)
    backend: str = _opt("auto", "one of auto, mujoco, mjwarp", _one_of("auto", "mujoco", "mjwarp"))
    eval_envs: int = _opt(10, "an integer > 0", _positive)
    # Per-task CPU default for num_envs; set in cfg/task/<Task>.yaml.
    cpu_num_envs: int = _opt(64, "an integer > 0", _positive)


@dataclass
class NetConfig:
    actor_hidden: tuple = _opt((256, 256), "a non-empty list of positive layer widths", lambda v: len(v) > 0 and all(h > 0 for h in v))
    critic_hidden: tuple = _opt((256, 256), "a non-empty list of positive layer widths", lambda v: len(v) > 0 and all(h > 0 for h in v))
    # LayerNorm before each hidden activation of the critic: keeps early Q-learning from
    # diverging when the replay holds few states (MuJoCo Ant on a CPU collapsed without it).
    critic_layer_norm: bool = _opt(True, "true or false")


@dataclass
class OffPolicyConfig:
    """PQL and the algorithms that run on its three-role runtime (pql, pql_d, sac)."""

    name: str = _opt("pql", "one of pql, pql_d, sac, ppo, impala")
    gamma: float = _opt(0.99, "a number in (0, 1]", lambda v: 0.0 < v <= 1.0)
    nstep: int = _opt(3, "an integer >= 1", lambda v: v >= 1)
    tau: float = _opt(0.05, "a number in (0, 1]", lambda v: 0.0 < v <= 1.0)
    batch_size: Optional[int] = _opt(None, "an integer > 0 (null: 8192 on CUDA, 256 on CPU)", _positive)
    critic_lr: float = _opt(3e-4, "a number > 0", _positive)
    actor_lr: float = _opt(3e-4, "a number > 0", _positive)
    beta_av: int = _opt(8, "an integer >= 1 (critic updates per batched actor step, β_a:v = 1:beta_av)", lambda v: v >= 1)
    beta_pv: int = _opt(2, "an integer >= 1 (critic updates per policy update, β_p:v = 1:beta_pv)", lambda v: v >= 1)
    exploration: str = _opt("mixed", "one of mixed, ape_x", _one_of("mixed", "ape_x"))
    noise_std_min: float = _opt(0.05, "a number >= 0", _non_negative)
    noise_std_max: float = _opt(0.8, "a number >= noise_std_min", _non_negative)
    ape_x_epsilon: float = _opt(0.4, "a number in (0, 1)", lambda v: 0.0 < v < 1.0)
    ape_x_alpha: float = _opt(8.0, "a number >= 0", _non_negative)
    target_noise: float = _opt(0.2, "a number >= 0", _non_negative)
    target_noise_clip: float = _opt(0.5, "a number >= 0", _non_negative)
    warmup_steps: int = _opt(32, "an integer >= 0 (batched actor steps with uniform random actions)", _non_negative)
    # Distributional critic (pql_d).
    num_atoms: int = _opt(51, "an integer >= 2", lambda v: v >= 2)
    v_min: float = _opt(-10.0, "a number < v_max")
    v_max: float = _opt(10.0, "a number > v_min")
    # SAC.
    init_alpha: float = _opt(0.1, "a number > 0", _positive)
    alpha_lr: float = _opt(3e-4, "a number > 0", _positive)
    net: NetConfig = field(default_factory=NetConfig)


@dataclass
class PPOConfig:
    name: str = _opt("ppo", "one of pql, pql_d, sac, ppo, impala")
    gamma: float = _opt(0.99, "a number in (0, 1]", lambda v: 0.0 < v <= 1.0)
    gae_lambda: float = _opt(0.95, "a number in [0, 1]", _unit_interval)
    horizon: int = _opt(32, "an integer >= 1 (env steps per env per rollout)", lambda v: v >= 1)
    epochs: int = _opt(5, "an integer >= 1", lambda v: v >= 1)
    minibatches: int = _opt(4, "an integer >= 1", lambda v: v >= 1)
    clip: float = _opt(0.2, "a number > 0", _positive)
    value_clip: float = _opt(0.2, "a number > 0", _positive)
    lr: float = _opt(3e-4, "a number > 0", _positive)
    entropy_coef: float = _opt(0.0, "a number >= 0", _non_negative)
    value_coef: float = _opt(0.5, "a number >= 0", _non_negative)
    max_grad_norm: float = _opt(1.0, "a number > 0", _positive)
    init_log_std: float = _opt(-0.5, "a number")
    net: NetConfig = field(default_factory=NetConfig)


@dataclass
class ImpalaConfig:
    name: str = _opt("impala", "one of pql, pql_d, sac, ppo, impala")
    gamma: float = _opt(0.99, "a number in (0, 1]", lambda v: 0.0 < v <= 1.0)
    unroll: int = _opt(16, "an integer >= 1 (T, steps per trajectory)", lambda v: v >= 1)
    rho_bar: float = _opt(1.0, "a number > 0 and >= c_bar", _positive)
    c_bar: float = _opt(1.0, "a number > 0 and <= rho_bar", _positive)
    lam: float = _opt(1.0, "a number in [0, 1]", _unit_interval)
    lr: float = _opt(3e-4, "a number > 0", _positive)
    entropy_coef: float = _opt(1e-3, "a number >= 0", _non_negative)
    baseline_coef: float = _opt(0.5, "a number >= 0", _non_negative)
    max_grad_norm: float = _opt(1.0, "a number > 0", _positive)
    init_log_std: float = _opt(-0.5, "a number")
    queue_size: int = _opt(2, "an integer >= 1 (trajectory batches in flight)", lambda v: v >= 1)
    net: NetConfig = field(default_factory=NetConfig)


ALGO_CONFIGS = {"pql": OffPolicyConfig, "pql_d": OffPolicyConfig, "sac": OffPolicyConfig,
                "ppo": PPOConfig, "impala": ImpalaConfig}


@dataclass
class ReplayConfig:
    kind: str = _opt("uniform", "one of uniform, prioritized", _one_of("uniform", "prioritized"))
    capacity: Optional[int] = _opt(None, "an integer > 0 (null: 5,000,000 on CUDA, 1,000,000 on CPU)", _positive)
    priority_mode: str = _opt("proportional", "one of proportional, rank", _one_of("proportional", "rank"))
    # Rank mode sorts the whole replay at a re-rank; between re-ranks new and updated items get
    # ranks estimated against the last sort (docs/kernels.md has the costs).
    rerank_every: Optional[int] = _opt(None, "an integer >= 1 (rank mode: critic updates between re-ranks; 1: exact "
                                             "ranks) or null (replay size / batch size)", _positive)
    priority_alpha: float = _opt(0.6, "a number >= 0", _non_negative)
    priority_beta0: float = _opt(0.4, "a number in [0, 1]", _unit_interval)
    beta_anneal_updates: int = _opt(100_000, "an integer > 0 (critic updates over which β goes to 1)", _positive)
    priority_eps: float = _opt(1e-6, "a number > 0", _positive)
    # Ape-X: the actor computes each new transition's priority where the data is made, with its
    # own critic copy, as the sequence priority eta·max|δ| + (1−eta)·mean|δ| over the one-step TD
    # errors of the steps its n-step window folds; false: new items enter at the max priority.
    actor_priorities: bool = _opt(False, "true or false (true needs replay.kind=prioritized)")
    priority_eta: float = _opt(0.9, "a number in [0, 1]", _unit_interval)


@dataclass
class ActorConfig:
    precision: str = _opt("fp32", "one of fp32, bf16, int8", _one_of("fp32", "bf16", "int8"))


@dataclass
class RuntimeConfig:
    mode: str = _opt("process", "one of process, sequential", _one_of("process", "sequential"))
    device: str = _opt("auto", "auto, cpu, cuda or cuda:<index>",
                       lambda v: v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit()))
    seed: int = _opt(0, "an integer >= 0", _non_negative)
    max_env_steps: Optional[int] = _opt(None, "an integer > 0 (null: 20M on CUDA, 300k on CPU)", _positive)
    max_time_s: Optional[float] = _opt(None, "a number > 0 (null: no wall-time limit)", _positive)
    stop_at_return: Optional[float] = _opt(None, "a number or null (stop once an evaluation reaches it)")
    eval_every: Optional[int] = _opt(None, "an integer > 0 (env steps between evaluations; null: 2M on CUDA, 20k on CPU)", _positive)
    checkpoint_every: Optional[int] = _opt(None, "an integer > 0 (env steps between checkpoints; null: 5M on CUDA, 100k on CPU)", _positive)
    policy_sync_every: int = _opt(1, "an integer >= 1 (policy updates between publications and actor steps between copies)", lambda v: v >= 1)
    critic_sync_every: int = _opt(1, "an integer >= 1 (critic updates between publications)", lambda v: v >= 1)
    max_lag: int = _opt(4, "an integer >= 1 (batched actor steps a role may run ahead of the ratio)", lambda v: v >= 1)
    stall_timeout_s: float = _opt(600.0, "a number > 0 (a role waiting longer than this stops the run)", _positive)
    # Until every role has made progress once: envs built, Warp kernels compiled, graphs captured.
    startup_timeout_s: float = _opt(1800.0, "a number > 0 (the stall limit until every role has made progress)",
                                    _positive)
    compile: Optional[bool] = _opt(None, "true, false or null (null: true on CUDA, false on CPU)")
    log_every_s: float = _opt(10.0, "a number > 0", _positive)
    torch_threads: Optional[int] = _opt(None, "an integer > 0 (null: cores shared out among the roles)", _positive)


@dataclass
class WandbConfig:
    activate: bool = _opt(False, "true or false")
    project: str = _opt("pql", "a project name")
    entity: Optional[str] = _opt(None, "a wandb entity or null")
    mode: str = _opt("online", "one of online, offline", _one_of("online", "offline"))
    group: Optional[str] = _opt(None, "a group name or null")


@dataclass
class Config:
    task: TaskConfig = field(default_factory=TaskConfig)
    algo: Any = field(default_factory=OffPolicyConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    checkpoint: Optional[str] = _opt(None, "a path to a checkpoint file or null")
    test: bool = _opt(False, "true or false (true: evaluate `checkpoint` without training)")
    run_dir: str = _opt(".", "a directory")


def _convert(key: str, value: Any, hint: Any, allowed: str) -> Any:
    """Coerce a YAML/CLI scalar to the annotated type, or raise ConfigError."""
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        inner = [a for a in typing.get_args(hint) if a is not type(None)][0]
        return None if value is None else _convert(key, value, inner, allowed)
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(key, value, allowed)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
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


def _build(cls, raw: Any, prefix: str):
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
        key = f"{prefix}.{name}".lstrip(".")
        if dataclasses.is_dataclass(hints[name]) and name in raw:
            values[name] = _build(hints[name], raw[name], key)
            continue
        if name not in raw:
            continue
        allowed = f.metadata.get("allowed", str(hints[name]))
        value = _convert(key, raw[name], hints[name], allowed)
        if value is not None:
            try:
                ok = f.metadata.get("check", lambda v: True)(value)
            except TypeError:
                ok = False
            if not ok:
                raise ConfigError(key, raw[name], allowed)
        values[name] = value
    return cls(**values)


def _cross_checks(cfg: Config) -> None:
    from tasks import TASK_NAMES  # the one list of tasks lives with the simulators

    name = cfg.task.name
    if not (name in TASK_NAMES or name.startswith("isaacgym/")):
        raise ConfigError("task.name", name, f"one of {', '.join(TASK_NAMES)} or isaacgym/<Task>")
    # Isaac Gym allows one simulation per process, and the evaluation envs are one already.
    if name.startswith("isaacgym/") and cfg.runtime.mode != "process":
        raise ConfigError("runtime.mode", cfg.runtime.mode, "process with an Isaac Gym task (one simulation per "
                                                            "process: the training envs need a process of their own)")
    if name.startswith("isaacgym/") and cfg.algo.name == "ppo":
        raise ConfigError("algo", "ppo", "pql, pql_d, sac or impala with an Isaac Gym task (PPO steps its training "
                                         "and evaluation envs in one process; Isaac Gym allows one simulation per process)")
    algo = cfg.algo
    if isinstance(algo, OffPolicyConfig):
        if algo.noise_std_max < algo.noise_std_min:
            raise ConfigError("algo.noise_std_max", algo.noise_std_max, f"a number >= algo.noise_std_min ({algo.noise_std_min})")
        if algo.v_max <= algo.v_min:
            raise ConfigError("algo.v_max", algo.v_max, f"a number > algo.v_min ({algo.v_min})")
    if cfg.replay.rerank_every is not None and (cfg.replay.kind, cfg.replay.priority_mode) != ("prioritized", "rank"):
        raise ConfigError("replay.rerank_every", cfg.replay.rerank_every,
                          "null, or an integer >= 1 together with replay.kind=prioritized replay.priority_mode=rank")
    if cfg.replay.actor_priorities and cfg.replay.kind != "prioritized":
        raise ConfigError("replay.actor_priorities", True, "false, or true together with replay.kind=prioritized")
    if isinstance(algo, ImpalaConfig) and algo.c_bar > algo.rho_bar:
        raise ConfigError("algo.c_bar", algo.c_bar, f"a number <= algo.rho_bar ({algo.rho_bar}): IMPALA needs rho_bar >= c_bar")
    if cfg.test and not cfg.checkpoint:
        raise ConfigError("test", True, "test=true together with checkpoint=PATH")


def load_config(raw: dict) -> Config:
    """Build and validate a Config from a plain (Hydra-composed, resolved) mapping."""
    raw = dict(raw)
    algo_raw = dict(raw.get("algo") or {})
    algo_name = algo_raw.get("name", "pql")
    if algo_name not in ALGO_CONFIGS:
        raise ConfigError("algo.name", algo_name, f"one of {', '.join(ALGO_CONFIGS)}")
    algo = _build(ALGO_CONFIGS[algo_name], algo_raw, "algo")
    raw.pop("algo", None)
    cfg = _build(Config, raw, "")
    cfg.algo = algo
    _cross_checks(cfg)
    return cfg


def to_dict(cfg: Config) -> dict:
    """The resolved config as plain data (stored in checkpoints and logs)."""
    return dataclasses.asdict(cfg)


# Sorting more items than this per critic update costs more than the rest of a prioritized update
# (~6 ms on a 2-core CPU, as much as a whole batch-8192 sampler step).
RERANK_WARN_ITEMS_PER_UPDATE = 65_536


def _resolve_device(value: str) -> str:
    """"auto", "cpu", "cuda" or "cuda:N" -> "cpu" or "cuda:N" of a device this machine has."""
    import torch

    if value == "auto":
        value = "cuda" if torch.cuda.is_available() else "cpu"
    if value == "cpu":
        return value
    if not torch.cuda.is_available():
        raise ConfigError("runtime.device", value, "cpu or auto: no CUDA device is available")
    count = torch.cuda.device_count()
    index = int(value[5:]) if value.startswith("cuda:") else torch.cuda.current_device()
    if index >= count:
        raise ConfigError("runtime.device", value, f"cpu, auto, cuda or cuda:<index> with index < {count} "
                                                   f"(this machine has {count} CUDA device(s))")
    return f"cuda:{index}"


def apply_device_defaults(cfg: Config):
    """Resolve `device: auto` (to cpu or cuda:N) and the null settings for the device, check what
    the device cannot run, print the settings, return the device."""
    import torch

    device = cfg.runtime.device = _resolve_device(cfg.runtime.device)
    on_gpu = device.startswith("cuda")
    if on_gpu and cfg.actor.precision == "int8":
        raise ConfigError("actor.precision", "int8", "fp32 or bf16 on CUDA (int8 inference runs on the CPU only)")

    # What fits the device: a GPU carries thousands of envs and large batches at hundreds of
    # thousands of env steps/s; two CPU cores carry tens of envs at a few hundred.
    def default(group, key: str, on_cuda: int, on_cpu: int) -> None:
        if getattr(group, key) is None:
            setattr(group, key, on_cuda if on_gpu else on_cpu)

    runtime = cfg.runtime
    if runtime.compile is None:
        runtime.compile = on_gpu
    default(cfg.task, "num_envs", 4096, cfg.task.cpu_num_envs)
    if isinstance(cfg.algo, OffPolicyConfig):
        default(cfg.algo, "batch_size", 8192, 256)
    default(cfg.replay, "capacity", 5_000_000, 1_000_000)
    default(runtime, "max_env_steps", 20_000_000, 300_000)
    default(runtime, "eval_every", 2_000_000, 20_000)
    default(runtime, "checkpoint_every", 5_000_000, 100_000)
    replay = cfg.replay
    if replay.rerank_every is not None and replay.capacity // replay.rerank_every > RERANK_WARN_ITEMS_PER_UPDATE:
        print(f"pql: warning: replay.rerank_every={replay.rerank_every} re-sorts all {replay.capacity:,} items every "
              f"{replay.rerank_every} critic updates ({replay.capacity // replay.rerank_every:,} items per update; one "
              "sort of 2^20 items takes ~0.15 s on a 2-core CPU, docs/kernels.md); null re-sorts every "
              "capacity / batch_size updates", flush=True)
    print(f"pql: task={cfg.task.name} algo={cfg.algo.name} device={device} num_envs={cfg.task.num_envs} "
          f"mode={cfg.runtime.mode}" + (f" batch_size={cfg.algo.batch_size}" if hasattr(cfg.algo, "batch_size") else "")
          + f" replay={cfg.replay.kind}:{cfg.replay.capacity:,} max_env_steps={runtime.max_env_steps:,} "
          f"eval_every={runtime.eval_every:,} checkpoint_every={runtime.checkpoint_every:,}"
          + (f" compile={str(runtime.compile).lower()}" if on_gpu or runtime.compile else ""), flush=True)
    return torch.device(device)
