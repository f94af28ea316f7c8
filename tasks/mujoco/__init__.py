"""MuJoCo tasks with Gymnasium v5 semantics, on MuJoCo Warp (GPU or CPU) or MuJoCo C (CPU threads)."""

from __future__ import annotations

import torch

from ..base import TaskError
from .allegro_hand import AllegroHand
from .ant import Ant
from .anymal import Anymal
from .env import MujocoEnv
from .franka_cube_stack import FrankaCubeStack
from .half_cheetah import HalfCheetah
from .hopper import Hopper
from .humanoid import Humanoid
from .humanoid_standup import HumanoidStandup
from .inverted_double_pendulum import InvertedDoublePendulum
from .inverted_pendulum import InvertedPendulum
from .pusher import Pusher
from .reacher import Reacher
from .shadow_hand_cube import ShadowHandCube
from .swimmer import Swimmer
from .task import Task
from .walker2d import Walker2d

TASKS = {
    cls.__name__: cls
    for cls in (
        Ant,
        Humanoid,
        HalfCheetah,
        Hopper,
        InvertedPendulum,
        Reacher,
        Pusher,
        Walker2d,
        Swimmer,
        InvertedDoublePendulum,
        HumanoidStandup,
        ShadowHandCube,
        AllegroHand,
        Anymal,
        FrankaCubeStack,
    )
}
# The tasks that follow IsaacGymEnvs' task of the same name; the others follow a Gymnasium MuJoCo
# v5 env of the same name (the parity tests' subjects).
ISAACGYMENVS_TASKS = tuple(cls.__name__ for cls in (ShadowHandCube, AllegroHand, Anymal, FrankaCubeStack))
GYMNASIUM_TASKS = tuple(name for name in TASKS if name not in ISAACGYMENVS_TASKS)
BACKENDS = ("auto", "mujoco", "mjwarp")


def resolve_backend(backend: str, device: torch.device) -> str:
    """The backend that `backend` names on `device`: "auto" is mjwarp on CUDA, mujoco on the CPU."""
    if backend not in BACKENDS:
        raise TaskError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        return "mjwarp" if device.type == "cuda" else "mujoco"
    return backend


def make_mujoco_env(
    task_cls: type[Task], num_envs: int, device: torch.device, seed: int, backend: str, action_repeat: int = 1
) -> MujocoEnv:
    """A MujocoEnv of `task_cls` on a resolved backend ("mujoco" or "mjwarp")."""
    if backend == "mjwarp":
        from .physics_mjwarp import MjwarpPhysics as physics_cls
    else:
        from .physics_mujoco import MujocoPhysics as physics_cls
    return MujocoEnv(task_cls, num_envs, device, seed, physics_cls, action_repeat=action_repeat)
