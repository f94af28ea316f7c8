"""ShadowHandCube: the Shadow hand turns a cube in its palm to goal orientations drawn at random.

The task is IsaacGymEnvs' ShadowHand task with its block object and "full_state" observations, as
its ShadowHand.yaml configures it, on gymnasium-robotics' MuJoCo model of the hand. docs/tasks.md
lists every term and constant with its source, and where this version differs (the model is not
Isaac Gym's; the goals are drawn uniformly over all orientations).

Quaternions are MuJoCo's (w, x, y, z) throughout. Per env the task keeps its goal, the successes of
the episode so far, the joint targets last commanded and the last action; `state_dict` holds them.
"""

from __future__ import annotations

from typing import Any

import mujoco
import torch
import warp as wp

from ..base import TaskError
from .task import Task, body_id, finite_rows, init_warp, launch_start, start_kernel, start_stream, warp_seed

HAND_JOINTS = 24
_Vec24 = wp.types.vector(length=HAND_JOINTS, dtype=wp.float32)
# Goals are drawn from a stream of their own, keyed by (seed ^ this, env, goals drawn): never one of
# the reset noise's streams, which are keyed by (seed, env, starts).
_GOAL_STREAM = 0x5EED_60A1


class ShadowHandCube(Task):
    xml = "hand/shadow_hand_cube.xml"
    # 8 substeps of the model's 0.002 s: a 0.016 s step (62.5 Hz), the nearest to Isaac Gym's 60 Hz.
    frame_skip = 8
    max_episode_steps = 600  # episodeLength: 9.6 s at 62.5 Hz
    fields = ("qpos", "qvel", "xpos", "xquat", "subtree_com", "cvel", "cfrc_ext")
    # MuJoCo C reached 14 contacts and 110 constraint rows in 12,000 steps of random and bang-bang
    # actions; a policy that grips the cube presses more fingers on it than those did.
    nconmax = 64
    njmax = 256
    reset_noise_scale = 0.0  # unused: add_reset_noise draws the task's own start
    episode_metrics = ("consecutive_successes",)

    # IsaacGymEnvs' ShadowHand.yaml and shadow_hand.py
    dist_reward_scale = -10.0
    rot_reward_scale = 1.0
    rot_eps = 0.1
    action_penalty_scale = -2e-4
    reach_goal_bonus = 250.0
    fall_distance = 0.24
    fall_penalty = 0.0
    success_tolerance = 0.1  # radians of rotation from the goal
    actions_moving_average = 1.0
    reset_position_noise = 0.01  # of the cube's position, U(±) per axis
    reset_dof_pos_interval = 0.2  # of each hand joint: 0.2 x U(lower, upper)
    vel_obs_scale = 0.2
    force_torque_obs_scale = 10.0
    goal_drop = 0.04  # the goal position: the cube's start, this much lower
    fingertips = ("robot0:ffdistal", "robot0:mfdistal", "robot0:rfdistal", "robot0:lfdistal", "robot0:thdistal")

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        hand = [j for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE]
        cube = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, "object:joint")
        if hand != list(range(HAND_JOINTS)) or cube != HAND_JOINTS or model.nq != HAND_JOINTS + 7:
            raise TaskError(f"{self.xml} must hold the hand's {HAND_JOINTS} hinges, then the cube's free joint")
        if not (model.actuator_trntype == mujoco.mjtTrn.mjTRN_JOINT).all() or (model.actuator_gear[:, 0] != 1).any():
            raise TaskError(f"{self.xml}: every actuator must drive one joint with gear 1")
        self.dtype, self.device = dtype, device
        as_tensor = self._as_tensor
        self.joint_low, self.joint_high = as_tensor(model.jnt_range[:HAND_JOINTS]).T
        self.ctrl_low, self.ctrl_high = as_tensor(model.actuator_ctrlrange).T
        self.actuated = torch.as_tensor(model.actuator_trnid[:, 0], dtype=torch.int64, device=device)  # their joints
        # A position actuator's force: gain * target + bias1 * q + bias2 * qdot, within its force range.
        self.gain = as_tensor(model.actuator_gainprm[:, 0])
        self.bias = as_tensor(model.actuator_biasprm[:, 1:3])
        self.force_low, self.force_high = as_tensor(model.actuator_forcerange).T
        self.hand_root = int(model.body_rootid[body_id(model, self.fingertips[0])])
        self.tips = [body_id(model, name) for name in self.fingertips]
        self.target_pos = as_tensor(model.qpos0[HAND_JOINTS : HAND_JOINTS + 3]) - as_tensor([0.0, 0.0, self.goal_drop])
        self._start_range = [_Vec24(model.jnt_range[:HAND_JOINTS, k].tolist()) for k in (0, 1)]  # the kernel's

    def _as_tensor(self, values) -> torch.Tensor:
        return torch.as_tensor(values, dtype=self.dtype, device=self.device)

    def observation_size(self, model):
        # joints' positions, velocities and actuator forces; the cube's pose and velocities; the
        # goal's pose and the rotation from it; the fingertips' states and forces; the last action
        return 3 * HAND_JOINTS + 13 + 11 + 13 * len(self.fingertips) + 6 * len(self.fingertips) + model.nu

    def action_range(self, model):
        ones = torch.ones(model.nu)
        return -ones, ones

    # -- what the task keeps per env ------------------------------------------------------------

    def start(self, num_envs: int, seed: int) -> None:
        n, nu = num_envs, self.ctrl_low.shape[0]
        self.seed = seed
        self.goal_quat = torch.zeros(n, 4, dtype=self.dtype, device=self.device)
        self.goals_drawn = torch.zeros(n, dtype=torch.int32, device=self.device)
        self.successes = torch.zeros(n, dtype=self.dtype, device=self.device)
        self.targets = torch.zeros(n, nu, dtype=self.dtype, device=self.device)
        self.last_action = torch.zeros(n, nu, dtype=self.dtype, device=self.device)
        self._draw = torch.zeros(n, dtype=torch.bool, device=self.device)
        init_warp()
        self._draw_args = [wp.from_torch(t) for t in (self._draw, self.goals_drawn, self.goal_quat)]

    def state_dict(self) -> dict:
        names = ("goal_quat", "goals_drawn", "successes", "targets", "last_action")
        return {name: getattr(self, name).to("cpu", copy=True) for name in names}

    def load_state_dict(self, state: dict) -> None:
        for name, value in state.items():
            getattr(self, name).copy_(value)  # in place: the goal kernel holds their addresses

    def restart(self, mask: torch.Tensor, state) -> None:
        """New episodes where mask: a new goal, no successes, the targets where the joints start."""
        self._draw_goals(mask)
        self.successes.masked_fill_(mask, 0.0)
        rows = mask[:, None]
        self.targets.copy_(torch.where(rows, state["qpos"][:, self.actuated], self.targets))
        self.last_action.masked_fill_(rows, 0.0)

    # -- stepping -------------------------------------------------------------------------------

    def control(self, action: torch.Tensor) -> torch.Tensor:
        """Absolute joint targets: the action in [-1, 1] scaled onto each actuator's range, then
        averaged with the last targets (weight actions_moving_average on the new ones)."""
        action = action.to(self.dtype).clamp(-1.0, 1.0)
        wanted = self.ctrl_low + 0.5 * (action + 1.0) * (self.ctrl_high - self.ctrl_low)
        m = self.actions_moving_average
        self.targets.copy_((m * wanted + (1.0 - m) * self.targets).clamp(self.ctrl_low, self.ctrl_high))
        self.last_action.copy_(action)
        return self.targets

    def reward_and_termination(self, state, velocity, action):
        cube_pos, cube_quat = self._cube_pose(state)
        goal_dist = (cube_pos - self.target_pos).norm(dim=1)
        rot_dist = rotation_angle(quat_mul(cube_quat, quat_conj(self.goal_quat)))
        reached = rot_dist <= self.success_tolerance
        fell = goal_dist >= self.fall_distance
        terms = {
            "reward_dist": self.dist_reward_scale * goal_dist,
            "reward_rot": self.rot_reward_scale / (rot_dist + self.rot_eps),
            "reward_action": self.action_penalty_scale * action.to(self.dtype).square().sum(dim=1),
            "reward_success": self.reach_goal_bonus * reached,
            "reward_fall": self.fall_penalty * fell,
        }
        reward = sum(terms.values())
        self.successes += reached
        self._draw_goals(reached)  # the observation of this step shows the next goal
        finite = finite_rows(state["qpos"], state["qvel"])
        info = {**terms, "rot_dist": rot_dist, "goal_dist": goal_dist, "consecutive_successes": self.successes}
        return reward, fell | ~finite, info

    def observe(self, state):
        qpos, qvel = state["qpos"], state["qvel"]
        n = qpos.shape[0]
        q = qpos[:, :HAND_JOINTS]
        unscaled = (2.0 * q - self.joint_high - self.joint_low) / (self.joint_high - self.joint_low)
        cube_pos, cube_quat = self._cube_pose(state)
        cube_angvel = quat_rotate(cube_quat, qvel[:, HAND_JOINTS + 3 : HAND_JOINTS + 6])  # the free joint's is local
        goal = torch.cat([self.target_pos.expand(n, 3), self.goal_quat], dim=1)
        tips = self.tips
        tip_angvel, tip_linvel = self._body_velocities(state, tips)
        tip_states = torch.cat([state["xpos"][:, tips], state["xquat"][:, tips], tip_linvel, tip_angvel], dim=2)
        return torch.cat(
            [
                unscaled,
                self.vel_obs_scale * qvel[:, :HAND_JOINTS],
                self.force_torque_obs_scale * self._joint_forces(qpos, qvel),
                cube_pos,
                cube_quat,
                qvel[:, HAND_JOINTS : HAND_JOINTS + 3],
                self.vel_obs_scale * cube_angvel,
                goal,
                quat_mul(cube_quat, quat_conj(self.goal_quat)),
                tip_states.flatten(1),
                self.force_torque_obs_scale * state["cfrc_ext"][:, tips].flatten(1),
                self.last_action,
            ],
            dim=1,
        )

    def _cube_pose(self, state):
        qpos = state["qpos"]
        return qpos[:, HAND_JOINTS : HAND_JOINTS + 3], qpos[:, HAND_JOINTS + 3 : HAND_JOINTS + 7]

    def _joint_forces(self, qpos, qvel):
        """[N, 24]: the actuators' forces on the hand's joints at this state and the current
        targets (MuJoCo's position actuators: kp * target - kp * q, within the force range)."""
        q, qdot = qpos[:, self.actuated], qvel[:, self.actuated]
        force = self.gain * self.targets + self.bias[:, 0] * q + self.bias[:, 1] * qdot
        force = force.clamp(self.force_low, self.force_high)
        return torch.zeros_like(qpos[:, :HAND_JOINTS]).index_copy_(1, self.actuated, force)

    def _body_velocities(self, state, bodies):
        """(angular, linear) velocities [N, len(bodies), 3] of the bodies' frames in world axes,
        from cvel (rotation first, translation at the subtree centre of mass of the hand's root)."""
        cvel = state["cvel"][:, bodies]
        angular, linear_at_com = cvel[..., :3], cvel[..., 3:]
        offset = state["xpos"][:, bodies] - state["subtree_com"][:, self.hand_root, None]
        return angular, linear_at_com + torch.linalg.cross(angular, offset)

    def _draw_goals(self, mask: torch.Tensor) -> None:
        """A goal orientation, uniform over all rotations, for each env where mask [N] is true: the
        k-th goal of env i from a stream keyed by (seed, i, k) alone, as the reset noise is."""
        self._draw.copy_(mask)
        device = wp.device_from_torch(self._draw.device)
        stream = wp.stream_from_torch(torch.cuda.current_stream(self._draw.device)) if device.is_cuda else None
        wp.launch(
            _draw_goals,
            dim=self._draw.shape[0],
            inputs=[warp_seed(self.seed ^ _GOAL_STREAM), self._draw_args[0]],
            outputs=self._draw_args[1:],
            device=device,
            stream=stream,
        )

    def add_reset_noise(self, seed, starts):
        """IsaacGymEnvs' reset: each hand joint at 0.2 x U(lower, upper) of its range, the cube at its
        start position moved by U(±0.01) per axis, turned to a uniformly random orientation, at rest."""
        params = _HandCubeStart()
        params.low, params.high = self._start_range
        params.joint_interval, params.position_noise = self.reset_dof_pos_interval, self.reset_position_noise
        launch_start(_HAND_CUBE_START, seed, starts, params)


@wp.func
def uniform_quat(state: wp.uint32) -> wp.vec4:
    """A rotation drawn uniformly (Haar measure) as a unit quaternion (w, x, y, z): Shoemake's
    subgroup algorithm from three uniform draws."""
    u1 = wp.randf(state)
    u2 = wp.randf(state)
    u3 = wp.randf(state)
    a = wp.sqrt(1.0 - u1)
    b = wp.sqrt(u1)
    two_pi = 2.0 * wp.pi
    q = wp.vec4(b * wp.cos(two_pi * u3), a * wp.sin(two_pi * u2), a * wp.cos(two_pi * u2), b * wp.sin(two_pi * u3))
    return wp.normalize(q)


@wp.kernel
def _draw_goals(
    seed: wp.int32,
    draw: wp.array(dtype=wp.bool),
    goals_drawn: wp.array(dtype=wp.int32),
    goal_quat: wp.array2d(dtype=Any),
):
    env = wp.tid()
    if not draw[env]:
        return
    state = start_stream(seed, env, goals_drawn)
    q = uniform_quat(state)
    for j in range(4):
        goal_quat[env, j] = goal_quat.dtype(q[j])


@wp.struct
class _HandCubeStart:
    low: _Vec24  # the hand joints' ranges
    high: _Vec24
    joint_interval: float
    position_noise: float


@wp.func
def _hand_cube_start(
    state: wp.uint32, p: _HandCubeStart, env: wp.int32, qpos: wp.array2d(dtype=Any), qvel: wp.array2d(dtype=Any)
):
    for j in range(HAND_JOINTS):
        u = wp.randf(state)
        qpos[env, j] = qpos[env, j] + qpos.dtype(p.joint_interval * (p.low[j] + (p.high[j] - p.low[j]) * u))
    for j in range(3):
        shift = p.position_noise * (2.0 * wp.randf(state) - 1.0)
        qpos[env, HAND_JOINTS + j] = qpos[env, HAND_JOINTS + j] + qpos.dtype(shift)
    q = uniform_quat(state)
    for j in range(4):
        qpos[env, HAND_JOINTS + 3 + j] = qpos.dtype(q[j])


_HAND_CUBE_START = start_kernel(_hand_cube_start)


# -- quaternions (w, x, y, z), batched over the leading dimensions ------------------------------------


def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        dim=-1,
    )


def quat_conj(q: torch.Tensor) -> torch.Tensor:
    return torch.cat([q[..., :1], -q[..., 1:]], dim=-1)


def quat_rotate(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """v [..., 3] rotated by the unit quaternions q [..., 4]."""
    w, u = q[..., :1], q[..., 1:]
    t = 2.0 * torch.linalg.cross(u, v)
    return v + w * t + torch.linalg.cross(u, t)


def rotation_angle(q: torch.Tensor) -> torch.Tensor:
    """The angle in [0, pi] of the rotation a unit quaternion q [..., 4] stands for: 2 asin |(x, y, z)|."""
    return 2.0 * torch.asin(q[..., 1:].norm(dim=-1).clamp(max=1.0))
