"""What the tests of pql's own tasks share: both physics backends side by side, and hand-built
states of the in-hand tasks.

Both backends: from one seed the same starts, and under the same actions the same steps, MuJoCo
Warp (on Warp's CPU device) against MuJoCo C. Through contacts float32 rounding and the solvers'
stopping points grow apart chaotically, so past the first steps each mjwarp world is put back onto
MuJoCo C's state before each step, and one step is compared at a time."""

from __future__ import annotations

import math

import mujoco
import torch

BACKENDS = ("mujoco", "mjwarp")


def elliptic(model: mujoco.MjModel) -> mujoco.MjModel:
    """Both engines with elliptic friction cones: MuJoCo Warp's contact tangent frames are not
    MuJoCo C's, which turns pyramidal cones (tests/test_tasks_parity.py)."""
    model.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    return model


def relative_gap(out: dict, item: int) -> float:
    """The largest |mjwarp - mujoco| / (1 + |mujoco|) of one of env.step's outputs (0: obs, 1: reward)."""
    a, b = out["mjwarp"][item].double(), out["mujoco"][item].double()
    return ((a - b).abs() / (1 + b.abs())).max().item()


def put_back(envs: dict) -> None:
    """Every mjwarp world onto its MuJoCo C twin's state."""
    state = envs["mujoco"].physics.state
    everyone = torch.ones(envs["mujoco"].num_envs, dtype=torch.bool)
    envs["mjwarp"].physics.reset(everyone, (state["qpos"].float(), state["qvel"].float()))


def step_both(envs: dict, action: torch.Tensor, put_back_first: bool) -> dict:
    """{backend: env.step(action)}, the mjwarp worlds put back onto MuJoCo C's first if asked."""
    if put_back_first:
        put_back(envs)
    return {backend: env.step(action) for backend, env in envs.items()}


def follow(envs: dict, actions, free_steps: int, early: tuple[float, float], late: tuple[float, float]) -> None:
    """Step both backends under `actions` (an iterable of [N, act_dim]): the first `free_steps`
    freely, each within `early` (observation, reward) of 1 + |value|; the rest one step at a time
    from MuJoCo C's state, each within `late`. Terminations agree at every step."""
    for step, action in enumerate(actions):
        out = step_both(envs, action, put_back_first=step >= free_steps)
        obs_tolerance, reward_tolerance = early if step < free_steps else late
        gaps = relative_gap(out, 0), relative_gap(out, 1)
        assert gaps[0] < obs_tolerance and gaps[1] < reward_tolerance, (step, gaps)
        assert torch.equal(out["mjwarp"][2], out["mujoco"][2]), step


def about_z(angle: float) -> list[float]:
    """The unit quaternion (w, x, y, z) of a turn by `angle` about z."""
    return [math.cos(angle / 2), 0.0, 0.0, math.sin(angle / 2)]


def cube_state(hand_joints: int, positions, quats, joints=None) -> dict:
    """A physics state of an in-hand task: the hand's joints at `joints` (default 0), at rest, and
    the cube at the given positions [N, 3] and orientations [N, 4]."""
    n = len(positions)
    qpos = torch.zeros(n, hand_joints + 7, dtype=torch.float64)
    if joints is not None:
        qpos[:, :hand_joints] = joints
    qpos[:, hand_joints : hand_joints + 3] = torch.as_tensor(positions, dtype=torch.float64)
    qpos[:, hand_joints + 3 :] = torch.as_tensor(quats, dtype=torch.float64)
    return {"qpos": qpos, "qvel": torch.zeros(n, hand_joints + 6, dtype=torch.float64)}
