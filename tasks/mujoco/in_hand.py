"""In-hand reorientation: a hand turns a cube in its palm to goal orientations drawn at random.

IsaacGymEnvs' ShadowHand and AllegroHand tasks are one task on two hands: the same rewards, success
and goal replacement, fall termination, control, resets and observation types. `InHandReorientation`
is that task; a subclass names its hand (model, joint count, fingertips, step, observation type).
docs/tasks.md lists every term and constant with its source, and where pql's version differs.

Quaternions are MuJoCo's (w, x, y, z) throughout. Per env the task keeps its goal, the goals drawn so
far, the successes of the episode so far, the joint targets last commanded and the last action;
`state_dict` holds them.
"""

from __future__ import annotations

from typing import Any

import mujoco
import torch
import warp as wp

from ..base import TaskError
from .rotations import quat_conj, quat_mul, quat_rotate, rotation_angle
from .task import Task, body_id, finite_rows, init_warp, launch_start, start_kernel, start_stream, warp_seed

OBS_TYPES = ("full_no_vel", "full", "full_state")  # IsaacGymEnvs' observationType
# Goals are drawn from a stream of their own, keyed by (seed ^ this, env, goals drawn): never one of
# the starts' streams, which are keyed by (seed, env, starts).
_GOAL_STREAM = 0x5EED_60A1
# The start kernel takes the joints' ranges in a struct passed by value (a captured graph keeps it),
# sized for the largest hand.
MAX_HAND_JOINTS = 32
_Ranges = wp.types.vector(length=MAX_HAND_JOINTS, dtype=wp.float32)


class InHandReorientation(Task):
    """IsaacGymEnvs' in-hand reorientation of a cube. The model holds the hand's hinges first, then
    the cube's free joint, and one position actuator per driven joint (gear 1)."""

    # The hand's (subclasses set them).
    hand_joints: int  # the hinges, qpos[:hand_joints]; the cube's free joint follows
    fingertips: tuple[str, ...] = ()  # bodies whose states the observation holds (Shadow's only)
    obs_type: str  # one of OBS_TYPES
    reset_noise_scale = 0.0  # unused: add_reset_noise draws the task's own start
    episode_metrics = ("consecutive_successes",)
    max_episode_steps = 600  # episodeLength

    # IsaacGymEnvs' ShadowHand.yaml and AllegroHand.yaml, which agree on each
    dist_reward_scale = -10.0
    rot_reward_scale = 1.0
    rot_eps = 0.1
    action_penalty_scale = -2e-4
    reach_goal_bonus = 250.0
    fall_distance = 0.24
    fall_penalty = 0.0
    success_tolerance = 0.1  # radians of rotation from the goal
    relative_control = False  # useRelativeControl: targets move by the action instead of being it
    relative_control_step = 20.0 / 60.0  # dofSpeedScale x Isaac Gym's sim dt: radians per step at |a| = 1
    actions_moving_average = 1.0
    reset_position_noise = 0.01  # of the cube's position, U(±) per axis
    reset_dof_pos_interval = 0.2  # of each hand joint: 0.2 x U(lower, upper)
    vel_obs_scale = 0.2
    force_torque_obs_scale = 10.0
    goal_drop = 0.04  # the goal position: the cube's start, this much lower

    def __init__(self, model: mujoco.MjModel, dtype: torch.dtype, device: torch.device):
        if self.obs_type not in OBS_TYPES:
            raise TaskError(f"{type(self).__name__}.obs_type must be one of {OBS_TYPES}, got {self.obs_type!r}")
        if self.hand_joints > MAX_HAND_JOINTS:
            raise TaskError(f"{type(self).__name__}.hand_joints must be at most {MAX_HAND_JOINTS}")
        super().__init__(model, dtype, device)
        h = self.hand_joints
        hand = [j for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE]
        cube = [j for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
        if hand != list(range(h)) or cube != [h] or model.nq != h + 7:
            raise TaskError(f"{self.xml} must hold the hand's {h} hinges, then the cube's free joint")
        if not (model.actuator_trntype == mujoco.mjtTrn.mjTRN_JOINT).all() or (model.actuator_gear[:, 0] != 1).any():
            raise TaskError(f"{self.xml}: every actuator must drive one joint with gear 1")
        self.dtype, self.device = dtype, device
        as_tensor = self._as_tensor
        self.joint_low, self.joint_high = as_tensor(model.jnt_range[:h]).T
        self.ctrl_low, self.ctrl_high = as_tensor(model.actuator_ctrlrange).T
        self.actuated = torch.as_tensor(model.actuator_trnid[:, 0], dtype=torch.int64, device=device)  # their joints
        # A position actuator's force: gain * target + bias1 * q + bias2 * qdot, within its force range.
        self.gain = as_tensor(model.actuator_gainprm[:, 0])
        self.bias = as_tensor(model.actuator_biasprm[:, 1:3])
        self.force_low, self.force_high = as_tensor(model.actuator_forcerange).T
        self.tips = [body_id(model, name) for name in self.fingertips]
        self.hand_root = int(model.body_rootid[self.tips[0]]) if self.tips else 0
        self.target_pos = self.qpos0[h : h + 3] - as_tensor([0.0, 0.0, self.goal_drop])
        padding = [0.0] * (MAX_HAND_JOINTS - h)
        self._start_range = [_Ranges(model.jnt_range[:h, k].tolist() + padding) for k in (0, 1)]  # the kernel's

    def _as_tensor(self, values) -> torch.Tensor:
        return torch.as_tensor(values, dtype=self.dtype, device=self.device)

    def observation_size(self, model):
        # IsaacGymEnvs' layouts (see `observe`): the joints, the cube, the goal (11), the fingertips,
        # the last action
        h, velocities = self.hand_joints, self.obs_type != "full_no_vel"
        joints = {"full_no_vel": h, "full": 2 * h, "full_state": 3 * h}[self.obs_type]
        per_tip = {"full_no_vel": 3, "full": 13, "full_state": 19}[self.obs_type]
        return joints + (13 if velocities else 7) + 11 + per_tip * len(self.fingertips) + model.nu

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

    def _draw_goals(self, mask: torch.Tensor) -> None:
        """A goal orientation, uniform over all rotations, for each env where mask [N] is true: the
        k-th goal of env i from a stream keyed by (seed, i, k) alone, as the starts are."""
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
        """IsaacGymEnvs' reset: each hand joint at reset_dof_pos_interval x U(lower, upper) of its
        range, the cube at its start position moved by U(±reset_position_noise) per axis, turned to a
        uniformly random orientation, all at rest."""
        params = _HandCubeStart()
        params.low, params.high = self._start_range
        params.joints = self.hand_joints
        params.joint_interval, params.position_noise = self.reset_dof_pos_interval, self.reset_position_noise
        launch_start(_HAND_CUBE_START, seed, starts, params)

    # -- stepping -------------------------------------------------------------------------------

    def control(self, action: torch.Tensor, state) -> torch.Tensor:
        """Joint targets, clamped to each actuator's range, from the action in [-1, 1]: absolute (the
        action scaled onto the range, then averaged with the last targets, weight
        actions_moving_average on the new ones) or, with relative_control, the last targets moved by
        relative_control_step x the action."""
        action = action.to(self.dtype).clamp(-1.0, 1.0)
        if self.relative_control:
            wanted = self.targets + self.relative_control_step * action
        else:
            m = self.actions_moving_average
            scaled = self.ctrl_low + 0.5 * (action + 1.0) * (self.ctrl_high - self.ctrl_low)
            wanted = m * scaled + (1.0 - m) * self.targets
        self.targets.copy_(wanted.clamp(self.ctrl_low, self.ctrl_high))
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
        """IsaacGymEnvs' layout of obs_type: the joint positions scaled to [-1, 1] over their ranges,
        (full, full_state) 0.2 x their velocities, (full_state) 10 x the actuators' forces on them; the
        cube's position and orientation, (full, full_state) its linear velocity and 0.2 x its angular
        velocity; the goal's position and orientation, and q_cube x q_goal*; the fingertips'
        positions (full_no_vel) or states (full, full_state) and (full_state) 10 x their contact
        wrenches; the last action."""
        qpos, qvel = state["qpos"], state["qvel"]
        h, n = self.hand_joints, qpos.shape[0]
        velocities, forces = self.obs_type != "full_no_vel", self.obs_type == "full_state"
        cube_pos, cube_quat = self._cube_pose(state)
        parts = [(2.0 * qpos[:, :h] - self.joint_high - self.joint_low) / (self.joint_high - self.joint_low)]
        if velocities:
            parts.append(self.vel_obs_scale * qvel[:, :h])
        if forces:
            parts.append(self.force_torque_obs_scale * self._joint_forces(qpos, qvel))
        parts += [cube_pos, cube_quat]
        if velocities:
            cube_angvel = quat_rotate(cube_quat, qvel[:, h + 3 : h + 6])  # the free joint's is local
            parts += [qvel[:, h : h + 3], self.vel_obs_scale * cube_angvel]
        parts += [self.target_pos.expand(n, 3), self.goal_quat, quat_mul(cube_quat, quat_conj(self.goal_quat))]
        if self.tips:
            parts += self._fingertip_parts(state, velocities, forces)
        parts.append(self.last_action)
        return torch.cat(parts, dim=1)

    def _fingertip_parts(self, state, velocities: bool, forces: bool) -> list[torch.Tensor]:
        """[N, 3 x tips] positions, or [N, 13 x tips] states (position, orientation, linear and angular
        velocity) and with forces [N, 6 x tips] 10 x the contact wrenches (cfrc_ext, torque first)."""
        tips = self.tips
        if not velocities:
            return [state["xpos"][:, tips].flatten(1)]
        angvel, linvel = self._body_velocities(state, tips)
        parts = [torch.cat([state["xpos"][:, tips], state["xquat"][:, tips], linvel, angvel], dim=2).flatten(1)]
        if forces:
            parts.append(self.force_torque_obs_scale * state["cfrc_ext"][:, tips].flatten(1))
        return parts

    def _cube_pose(self, state):
        h = self.hand_joints
        qpos = state["qpos"]
        return qpos[:, h : h + 3], qpos[:, h + 3 : h + 7]

    def _joint_forces(self, qpos, qvel):
        """[N, hand_joints]: the actuators' forces on the hand's joints at this state and the current
        targets (MuJoCo's position actuators: kp * target - kp * q - kv * qdot, within the force
        range; 0 on a joint no actuator drives)."""
        q, qdot = qpos[:, self.actuated], qvel[:, self.actuated]
        force = self.gain * self.targets + self.bias[:, 0] * q + self.bias[:, 1] * qdot
        force = force.clamp(self.force_low, self.force_high)
        return torch.zeros_like(qpos[:, : self.hand_joints]).index_copy_(1, self.actuated, force)

    def _body_velocities(self, state, bodies):
        """(angular, linear) velocities [N, len(bodies), 3] of the bodies' frames in world axes,
        from cvel (rotation first, translation at the subtree centre of mass of the hand's root)."""
        cvel = state["cvel"][:, bodies]
        angular, linear_at_com = cvel[..., :3], cvel[..., 3:]
        offset = state["xpos"][:, bodies] - state["subtree_com"][:, self.hand_root, None]
        return angular, linear_at_com + torch.linalg.cross(angular, offset)


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
    low: _Ranges  # the hand joints' ranges
    high: _Ranges
    joints: wp.int32  # the hand's; the cube's free joint follows
    joint_interval: float
    position_noise: float


@wp.func
def _hand_cube_start(
    state: wp.uint32, p: _HandCubeStart, env: wp.int32, qpos: wp.array2d(dtype=Any), qvel: wp.array2d(dtype=Any)
):
    for j in range(p.joints):
        u = wp.randf(state)
        qpos[env, j] = qpos[env, j] + qpos.dtype(p.joint_interval * (p.low[j] + (p.high[j] - p.low[j]) * u))
    cube = p.joints
    for j in range(3):
        shift = p.position_noise * (2.0 * wp.randf(state) - 1.0)
        qpos[env, cube + j] = qpos[env, cube + j] + qpos.dtype(shift)
    q = uniform_quat(state)
    for j in range(4):
        qpos[env, cube + 3 + j] = qpos.dtype(q[j])


_HAND_CUBE_START = start_kernel(_hand_cube_start)
