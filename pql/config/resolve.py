"""The config as this machine runs it: `device: auto` made cpu or cuda:N, each role placed, and
the nulls whose default depends on the device (each field's on_device) filled in.

`resolve` returns a new config and leaves its input as it was; `announce`
(pql/config/announce.py) prints what it chose.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

from pql.config.fields import ConfigError, given
from pql.config.schema import ROLE_DEVICE_KEYS, ROLE_NAMES, Config, OffPolicyConfig, PPOConfig, RuntimeConfig


@dataclass(frozen=True)
class Devices:
    """Where the run computes, each "cpu" or "cuda:<index>": `main` is runtime.device (the
    evaluation envs', and every role's not placed elsewhere); the others are the roles',
    runtime.<role>_device (ROLE_NAMES)."""

    main: str
    actor: str
    v_learner: str
    p_learner: str


@dataclass(frozen=True)
class Resolved:
    """A resolved run: `config` has every device-dependent null filled in, and its
    runtime.device and runtime.<role>_device hold `devices`."""

    config: Config
    devices: Devices


def resolve(cfg: Config, local_rank: int | None = None) -> Resolved:
    """Resolve the devices (`auto` to cpu or cuda:N) and the null settings for the device into a
    copy of `cfg`, and check what the device cannot run. local_rank: this replica's rank on its
    machine under torchrun (None without). Raises ConfigError."""
    main = _resolve_device(cfg.runtime.device) if local_rank is None else _replica_device(cfg.runtime, local_rank)
    devices = Devices(main, **_role_devices(cfg, main))
    if devices.actor.startswith("cuda") and cfg.actor.precision == "int8":
        raise ConfigError("actor.precision", "int8", "fp32 or bf16 on CUDA (int8 inference runs on the CPU only)")
    on_gpu = main.startswith("cuda")
    config = copy.deepcopy(cfg)
    placed = dataclasses.replace(
        config.runtime, device=main, **{f"{name}_device": getattr(devices, name) for name in ROLE_NAMES}
    )
    config = dataclasses.replace(
        config,
        # A Gymnasium env steps on the CPU whatever the learners' device: its CPU count of copies.
        task=_with_device_defaults(config.task, on_gpu and not config.task.name.startswith("gym:")),
        algo=_with_device_defaults(config.algo, on_gpu),
        replay=_with_device_defaults(config.replay, on_gpu),
        runtime=_with_device_defaults(placed, on_gpu),
    )
    _check_sizes(config)
    return Resolved(config, devices)


def _resolve_device(value: str, key: str = "runtime.device") -> str:
    """ "auto", "cpu", "cuda" or "cuda:N" -> "cpu" or "cuda:N" of a device this machine has."""
    # torch on use: importing pql.config must not import it (Isaac Gym has to load first, and
    # `train.py --help` answers without it).
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


def _role_devices(cfg: Config, main: str) -> dict[str, str]:
    """Each role's device: its own key, or runtime.device. Only the off-policy roles are placed."""
    runtime = cfg.runtime
    placed = {}
    for name in ROLE_NAMES:
        key = f"{name}_device"
        value = getattr(runtime, key)
        if value is not None and not isinstance(cfg.algo, OffPolicyConfig):
            raise ConfigError(
                f"runtime.{key}",
                value,
                f"null with algo={cfg.algo.name} (role placement is for pql, pql_d and sac; use runtime.device)",
            )
        placed[name] = main if value is None else _resolve_device(value, f"runtime.{key}")
    # One process makes one GPU current: Triton launches and streams would land on it for every role.
    if runtime.mode == "sequential" and len(set(placed.values())) > 1:
        raise ConfigError(
            "runtime.mode",
            "sequential",
            "process when the roles are on different devices ("
            + ", ".join(f"runtime.{name}_device={device}" for name, device in placed.items())
            + ")",
        )
    return placed


def _replica_device(runtime: RuntimeConfig, local_rank: int) -> str:
    """Under torchrun each replica runs on one device, cuda:<LOCAL_RANK> or the CPU."""
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


def _with_device_defaults(group, on_gpu: bool):
    """`group` with each null on_device key set to what fits the device: a GPU carries thousands
    of envs and large batches at hundreds of thousands of env steps/s; two CPU cores carry tens of
    envs at a few hundred."""
    filled = {}
    for f in dataclasses.fields(group):
        on_device = f.metadata.get("on_device")
        if on_device is not None and getattr(group, f.name) is None:
            value = on_device[0 if on_gpu else 1]
            filled[f.name] = getattr(group, value) if isinstance(value, str) else value
    return dataclasses.replace(group, **filled)


def _check_sizes(cfg: Config) -> None:
    """Sizes that cannot work together, once the device's defaults are filled in."""
    from tasks import TASKS  # on use: tasks imports torch, which importing pql.config must not

    algo, replay, num_envs = cfg.algo, cfg.replay, given(cfg.task.num_envs)
    if isinstance(algo, OffPolicyConfig):
        # One actor step writes num_envs transitions; a learner samples batch_size of them.
        batch_size, capacity = given(algo.batch_size), given(replay.capacity)
        need = max(batch_size, num_envs)
        if capacity < need:
            raise ConfigError(
                "replay.capacity",
                replay.capacity,
                f"an integer >= {need:,}: at least algo.batch_size ({batch_size:,}) and "
                f"task.num_envs ({num_envs:,}, the transitions one actor step writes)",
            )
        task = TASKS.get(cfg.task.name)
        if task is not None and given(algo.nstep) > task.max_episode_steps:
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
