"""What a run prints at start: the settings it resolved, in one line, and a warning before a
re-rank schedule that costs more than the updates it serves or a compilation this torch cannot make."""

from __future__ import annotations

from pql import __version__
from pql.config.fields import given
from pql.config.resolve import Resolved
from pql.config.schema import ROLE_NAMES, ReplayConfig

# Sorting more items than this per critic update costs more than the rest of a prioritized update
# (~6 ms on a 2-core CPU, as much as a whole batch-8192 sampler step).
RERANK_WARN_ITEMS_PER_UPDATE = 65_536


def announce(resolved: Resolved, replicas: int = 1) -> None:
    """Print the re-rank warning, if any, and the settings line (replicas: under torchrun, how many)."""
    for warning in (rerank_warning(resolved.config.replay), compile_warning(resolved)):
        if warning is not None:
            print(warning, flush=True)
    print(settings_line(resolved, replicas), flush=True)


def rerank_warning(replay: ReplayConfig) -> str | None:
    """The warning for a replay.rerank_every that re-sorts too many items per update, or None."""
    capacity = given(replay.capacity)
    if replay.rerank_every is None or capacity // replay.rerank_every <= RERANK_WARN_ITEMS_PER_UPDATE:
        return None
    return (
        f"pql: warning: replay.rerank_every={replay.rerank_every} re-sorts all {capacity:,} items every "
        f"{replay.rerank_every} critic updates ({capacity // replay.rerank_every:,} items per update; one "
        "sort of 2^20 items takes ~0.15 s on a 2-core CPU, docs/kernels.md); null re-sorts every "
        "capacity / batch_size updates"
    )


def compile_warning(resolved: Resolved) -> str | None:
    """The warning for a runtime.compile that cannot be honoured on a learner's device (the updates
    then run eagerly)."""
    if not resolved.config.runtime.compile:
        return None
    # Imported only here: importing pql.config never imports torch (Isaac Gym's must come first).
    import torch

    from pql.algos.off_policy import compile_unavailable

    devices = {getattr(resolved.devices, name) for name in ("v_learner", "p_learner")}
    reasons = {reason for device in sorted(devices) if (reason := compile_unavailable(torch.device(device)))}
    if not reasons:
        return None
    return f"pql: warning: runtime.compile=true runs the updates eagerly: {'; '.join(sorted(reasons))}"


def settings_line(resolved: Resolved, replicas: int = 1) -> str:
    """The run's settings in one line: the task, the algorithm, the devices and the sizes."""
    cfg, devices = resolved.config, resolved.devices
    runtime, device = cfg.runtime, devices.main
    per_replica = " (num_envs, batch_size and replay per replica; env steps of all)"
    return (
        f"pql {__version__}: task={cfg.task.name} algo={cfg.algo.name} device={device} num_envs={cfg.task.num_envs} "
        f"mode={runtime.mode}"
        + (f" replicas={replicas}{per_replica}" if replicas > 1 else "")
        + (f" batch_size={cfg.algo.batch_size}" if hasattr(cfg.algo, "batch_size") else "")
        + (f" nstep={cfg.algo.nstep}" if hasattr(cfg.algo, "nstep") else "")
        + f" replay={cfg.replay.kind}:{cfg.replay.capacity:,} max_env_steps={runtime.max_env_steps:,} "
        f"eval_every={runtime.eval_every:,} checkpoint_every={runtime.checkpoint_every:,}"
        + (f" compile={str(runtime.compile).lower()}" if device.startswith("cuda") or runtime.compile else "")
        + (
            ""
            if {getattr(devices, name) for name in ROLE_NAMES} == {device}
            else " placement=" + ",".join(f"{name}:{getattr(devices, name)}" for name in ROLE_NAMES)
        )
    )
