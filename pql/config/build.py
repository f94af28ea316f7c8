"""From a composed mapping to a validated Config, and back to plain data.

Hydra composes cfg/config.yaml (pql/config/hydra_store.py) with cfg/task/<Task>.yaml on top;
`load_config` turns the mapping into the dataclasses of pql/config/schema.py and checks every
value. A bad value raises `ConfigError` naming the key, the value and what is allowed; `train.py`
prints that one line and exits with code 2. Code past this point never reads raw dicts.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

from pql.config.algorithms import ALGORITHMS
from pql.config.fields import ConfigError, allowed_text, given
from pql.config.schema import (
    CHECKPOINT_AUTO,
    SHORT_EPISODE_STEPS,
    Config,
    ImpalaConfig,
    OffPolicyConfig,
    PQLConfig,
    algo_names,
    task_names,
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
    if hint is dict:  # keyword arguments handed on unread (task.kwargs): names checked, values as given
        if not isinstance(value, dict) or not all(isinstance(k, str) and k.isidentifier() for k in value):
            raise ConfigError(key, value, allowed)
        return dict(value)
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
        allowed = allowed_text(f)
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
    from tasks import DMC_TASK_NAMES, task_form  # on use: tasks imports torch, which importing pql.config must not

    name = cfg.task.name
    form = task_form(name)
    if form is None or (form == "dmc" and name not in DMC_TASK_NAMES):
        raise ConfigError("task.name", name, task_names() if form is None else f"one of {', '.join(DMC_TASK_NAMES)}")
    if cfg.task.action_repeat != 1 and form != "dmc":
        raise ConfigError("task.action_repeat", cfg.task.action_repeat, "1 unless the task is dmc/<domain>-<task>")
    if cfg.task.kwargs and form not in ("gym", "factory"):
        raise ConfigError("task.kwargs", cfg.task.kwargs, "none for pql's own tasks and isaacgym/<Task>")
    if cfg.task.import_module is not None and form != "gym":
        raise ConfigError("task.import_module", cfg.task.import_module, "null unless the task is gym:<EnvId>")
    for key in ("policy_group", "critic_group"):
        if getattr(cfg.task, key) is not None and form != "factory":
            raise ConfigError(f"task.{key}", getattr(cfg.task, key), "null unless the task is <module>:<factory>")
    # Isaac Gym allows one simulation per process, and the evaluation envs are one already.
    if form == "isaacgym" and cfg.runtime.mode != "process":
        raise ConfigError(
            "runtime.mode",
            cfg.runtime.mode,
            "process with an Isaac Gym task (one simulation per "
            "process: the training envs need a process of their own)",
        )
    if form == "isaacgym" and cfg.algo.name == "ppo":
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
    if isinstance(algo, OffPolicyConfig) and algo.value != "scalar" and given(algo.v_max) <= given(algo.v_min):
        raise ConfigError("algo.v_max", algo.v_max, f"a number > algo.v_min ({algo.v_min})")
    if isinstance(algo, OffPolicyConfig) and algo.return_scaling:
        # The returns start at 0 and are scaled into the support, which must hold 0 in it.
        if given(algo.v_min) > 0:
            raise ConfigError("algo.v_min", algo.v_min, "a number <= 0 with algo.return_scaling (returns start at 0)")
        if given(algo.v_max) < 0 or algo.v_max == algo.v_min:
            raise ConfigError(
                "algo.v_max",
                algo.v_max,
                f"a number >= 0 and > algo.v_min ({algo.v_min}) with algo.return_scaling (returns start at 0)",
            )
    net = getattr(algo, "net", None)
    if net is not None and net.kind != "mlp":
        if not isinstance(algo, OffPolicyConfig):
            raise ConfigError(
                "algo.net.kind", net.kind, f"mlp with algo={algo.name} (the residual kinds are for pql, pql_d and sac)"
            )
        for key in ("actor_hidden", "critic_hidden"):
            widths = getattr(net, key)
            if len(set(widths)) != 1:
                raise ConfigError(
                    f"algo.net.{key}",
                    list(widths),
                    f"one width repeated, one residual block per entry, with algo.net.kind={net.kind}",
                )
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
    if cfg.test and cfg.checkpoint == CHECKPOINT_AUTO:
        # auto may find nothing, and an evaluation of nothing is no evaluation.
        raise ConfigError("checkpoint", CHECKPOINT_AUTO, "a checkpoint's path with test=true")


def load_config(raw: dict) -> Config:
    """Build and validate a Config from a plain (Hydra-composed, resolved) mapping."""
    raw = dict(raw)
    algo_raw = dict(raw.pop("algo", None) or {})
    algo_name = algo_raw.get("name", Config().algo.name)
    if not isinstance(algo_name, str) or algo_name not in ALGORITHMS:
        raise ConfigError("algo.name", algo_name, algo_names())
    algo = _build(ALGORITHMS[algo_name].config_class(), algo_raw, "algo")
    cfg = _build(Config, raw, "")
    cfg.algo = algo
    if isinstance(algo, OffPolicyConfig):
        fill_task_defaults(algo, cfg.task.name)
    if isinstance(algo, OffPolicyConfig) and (algo.value != "scalar" or algo.return_scaling):
        low, high = (
            scaled_support(cfg.task.value_min, cfg.task.value_max, algo.return_bound)
            if algo.return_scaling
            else (cfg.task.value_min * algo.reward_scale, cfg.task.value_max * algo.reward_scale)
        )
        algo.v_min = low if algo.v_min is None else algo.v_min
        algo.v_max = high if algo.v_max is None else algo.v_max
    _cross_checks(cfg)
    return cfg


def scaled_support(value_min: float, value_max: float, bound: float) -> tuple[float, float]:
    """algo.v_min and algo.v_max's null with algo.return_scaling: the signs the task's returns
    take, each out to ±bound. [0, bound] where they are never negative (task.value_min >= 0, as
    on every DMC task), [−bound, 0] where never positive, ±bound otherwise. The critic's values
    start near the support's middle, so a task of non-negative returns starts it optimistic, at
    bound / 2, where ±bound would start it at 0, the value of doing nothing: on dmc/hopper-hop,
    whose reward is 0 until the hopper stands and hops, ±5 kept the critic at 0 and [0, 5] got
    it off (docs/tuning.md)."""
    return (0.0 if value_min >= 0 else -bound), (0.0 if value_max <= 0 else bound)


def fill_task_defaults(algo: OffPolicyConfig, task_name: str) -> None:
    """The off-policy learners' nulls that the task decides, for pql's own tasks by what their
    classes say (tasks/mujoco/task.py) and for any other as for most of them:
    algo.nstep: 1 for a task whose episodes last at most SHORT_EPISODE_STEPS steps, 3 for any
    other (and for an Isaac Gym task, whose limit is known only once its env is made);
    algo.gamma: the task's discount (0.99 but for Anymal); algo.mirror: the task's choice."""
    from tasks import TASKS  # on use: tasks imports torch, which importing pql.config must not
    from tasks.mujoco.task import Task

    task = TASKS.get(task_name)
    if algo.nstep is None:
        algo.nstep = 1 if task is not None and task.max_episode_steps <= SHORT_EPISODE_STEPS else 3
    chooser = task or Task  # any other task trains as most of pql's own do: the base class's choice
    if algo.gamma is None:
        algo.gamma = chooser.discount
    if algo.mirror is None:
        algo.mirror = chooser.mirrored_batches


def to_dict(value):
    """A config (or any of its groups) as plain data, tuples as lists: what checkpoints, logs and
    Hydra's ConfigStore hold."""
    if dataclasses.is_dataclass(value):
        return {f.name: to_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [to_dict(v) for v in value]
    return value
