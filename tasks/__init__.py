"""Batched simulators for pql: `tasks.make(name, num_envs, device, seed, backend="auto")`.

See tasks/base.py for the protocol every env follows and docs/tasks.md for the backends.
"""

from __future__ import annotations

from .base import BatchedEnv, TaskError, check_num_envs, resolve_device
from .mujoco import TASKS, make_mujoco_env, resolve_backend

TASK_NAMES = tuple(TASKS)
ISAACGYM_PREFIX = "isaacgym/"


def make(name: str, num_envs: int, device="cpu", seed: int = 0, backend: str = "auto") -> BatchedEnv:
    """A batched env of `num_envs` copies of task `name`, its tensors on `device`.

    name: one of TASK_NAMES, or "isaacgym/<Task>" for an IsaacGymEnvs task.
    backend: "auto" (mjwarp on CUDA, mujoco on the CPU; the choice is printed), "mujoco" (MuJoCo C
    on CPU threads) or "mjwarp" (MuJoCo Warp on `device`). Ignored for Isaac Gym tasks.
    Raises TaskError for an unknown task or backend, num_envs <= 0 or an unusable device.
    """
    num_envs = check_num_envs(num_envs)
    device = resolve_device(device)
    if isinstance(name, str) and name.startswith(ISAACGYM_PREFIX):
        from .isaacgym import make_isaacgym_env

        return make_isaacgym_env(name[len(ISAACGYM_PREFIX) :], num_envs, device, seed)
    if name not in TASKS:
        raise TaskError(
            f"unknown task {name!r}; known tasks: {', '.join(TASK_NAMES)}, "
            f"or {ISAACGYM_PREFIX}<Task> with Isaac Gym installed"
        )
    chosen = resolve_backend(backend, device)
    if backend == "auto":
        print(f"tasks: {name} x{num_envs} on {device} with backend '{chosen}' (auto)")
    return make_mujoco_env(name, num_envs, device, int(seed), chosen)
