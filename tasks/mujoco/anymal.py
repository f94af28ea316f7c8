"""Anymal: the ANYmal C quadruped follows velocity commands on flat ground (IsaacGymEnvs' Anymal task).

The task is IsaacGymEnvs' `Anymal` as its Anymal.yaml and anymal.py define it, on MuJoCo Menagerie's
ANYmal C: each episode draws a command (forward and sideways velocity, yaw rate, in the base's
frame), the policy sets PD joint targets around the standing pose, and the reward is how closely
the base's velocity follows the command, less a torque penalty. docs/tasks.md lists every term and
constant with its source, and where this version differs.

Quaternions are MuJoCo's (w, x, y, z). The free joint's qvel holds the base's linear velocity in
world axes and its angular velocity in the base's own. Per env the task keeps its command, the last
action, and the sums behind the two episode metrics; `state_dict` holds them.
"""

from __future__ import annotations

import dataclasses

import mujoco
import torch

from ..base import Mirror, TaskError
from .rotations import quat_rotate_inverse
from .task import EnvDraws, Task, body_id, finite_rows

LEGS = ("LF", "RF", "LH", "RH")
JOINTS = tuple(f"{leg}_{joint}" for leg in LEGS for joint in ("HAA", "HFE", "KFE"))
# Each env's commands and starts come from streams of their own, keyed by (seed ^ this, env, draws):
# never one of the reset noise's streams, which are keyed by (seed, env, starts).
_COMMAND_STREAM = 0x0C0_3A2D
_START_STREAM = 0x57A_2715


class Anymal(Task):
    xml = "anymal_c/anymal_c.xml"
    # 2 substeps of the model's 0.01 s: IsaacGymEnvs' 0.02 s step of 2 PhysX substeps (50 Hz control).
    frame_skip = 2
    max_episode_steps = 2500  # episodeLength_s 50 at 50 Hz
    # Measured on 2 cores in 15 minutes (docs/tuning.md#anymal): γ = 0.97 with mirrored batches
    # followed the commands best; either alone or neither did worse.
    discount = 0.97
    mirrored_batches = True
    fields = ("qpos", "qvel", "cfrc_ext")
    # MuJoCo C reached 8 contacts and 25 constraint rows in 8,000 steps of bang-bang targets; a fall
    # onto the base (which ends the episode) touches the floor with a few more parts.
    nconmax = 32
    njmax = 128
    reset_noise_scale = 0.0  # unused: draw_starts draws the task's own start
    episode_metrics = ("lin_vel_error", "yaw_rate_error")
    obs_parts = (
        ("base_lin_vel*2", 3),  # m/s, in the base's frame
        ("base_ang_vel*0.25", 3),  # rad/s, in the base's frame
        ("projected_gravity", 3),  # the unit gravity vector in the base's frame
        ("command*(2,2,0.25)", 3),  # linear x, y (m/s) and yaw rate (rad/s)
        ("joint_pos-default", 12),  # rad, each joint's position less its default
        ("joint_vel*0.05", 12),  # rad/s
        ("last_action", 12),
    )  # each clipped to ±5
    kept = ("command", "last_action", "targets", "error_sums", "steps")  # per env, in state_dict

    # IsaacGymEnvs' Anymal.yaml and anymal.py
    command_low = (-2.0, -1.0, -1.0)  # linear_x, linear_y (m/s), yaw (rad/s)
    command_high = (2.0, 1.0, 1.0)
    action_scale = 0.5  # joint target = default + action_scale * action
    default_joint_angles = {"HAA": 0.03, "HFE": 0.4, "KFE": -0.8}  # LF's; mirrored for the others
    lin_vel_scale = 2.0
    ang_vel_scale = 0.25
    dof_pos_scale = 1.0
    dof_vel_scale = 0.05
    clip_observations = 5.0
    lin_vel_reward_scale = 1.0
    ang_vel_reward_scale = 0.5
    torque_reward_scale = -2.5e-5
    tracking_sigma = 0.25  # exp(-error / 0.25)
    contact_force_limit = 1.0  # N on the base or a thigh ends the episode
    start_height = 0.62  # baseInitState pos z, unrotated and at rest
    start_joint_factor = (0.5, 1.5)  # each joint at default x U(0.5, 1.5)
    start_joint_velocity = 0.1  # each joint's velocity U(±0.1)

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        names = tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(1, model.njnt))
        actuated = tuple(model.actuator_trnid[:, 0])
        if model.jnt_type[0] != mujoco.mjtJoint.mjJNT_FREE or names != JOINTS or actuated != tuple(range(1, 13)):
            raise TaskError(
                f"{self.xml} must hold the base's free joint, then the joints {', '.join(JOINTS)}, each driven"
            )
        self.dtype, self.device = dtype, device
        as_tensor = self._as_tensor
        self.default_angles = as_tensor([self._default_angle(name) for name in JOINTS])
        # A position actuator's force: gain * target + bias1 * q + bias2 * qdot, within its force range.
        self.gain = as_tensor(model.actuator_gainprm[:, 0])
        self.bias = as_tensor(model.actuator_biasprm[:, 1:3])
        self.force_low, self.force_high = as_tensor(model.actuator_forcerange).T
        self.base = body_id(model, "base")
        self.thighs = [body_id(model, f"{leg}_THIGH") for leg in LEGS]
        self.command_scale = as_tensor([self.lin_vel_scale, self.lin_vel_scale, self.ang_vel_scale])
        self.gravity = as_tensor([0.0, 0.0, -1.0])
        self.mirror = mirror()

    def _as_tensor(self, values) -> torch.Tensor:
        return torch.as_tensor(values, dtype=self.dtype, device=self.device)

    def _default_angle(self, joint: str) -> float:
        """IsaacGymEnvs' defaultJointAngles: HAA outwards on every leg (negative on the right),
        HFE and KFE with the front legs' signs flipped on the hind legs."""
        leg, kind = joint.split("_")
        angle = self.default_joint_angles[kind]
        if kind == "HAA":
            return angle if leg[0] == "L" else -angle
        return angle if leg[1] == "F" else -angle

    def observation_size(self, model):
        # base linear and angular velocity, projected gravity, command, joint positions and
        # velocities, last action
        return 3 + 3 + 3 + 3 + 12 + 12 + 12

    def action_range(self, model):
        ones = torch.ones(model.nu)
        return -ones, ones

    def interface(self, model):
        default = tuple(self.default_angles.tolist())
        return dataclasses.replace(super().interface(model), default_joint_pos=default, action_scale=self.action_scale)

    # -- what the task keeps per env ------------------------------------------------------------

    def start(self, num_envs: int, seed: int) -> None:
        n = num_envs
        self.commands = EnvDraws(n, 3, seed, _COMMAND_STREAM, self.device)
        self.starts = EnvDraws(n, 24, seed, _START_STREAM, self.device)
        self.command = torch.zeros(n, 3, dtype=self.dtype, device=self.device)
        self.last_action = torch.zeros(n, 12, dtype=self.dtype, device=self.device)
        self.targets = self.default_angles.expand(n, 12).clone()
        # Per episode: the summed tracking errors and the steps they sum over (the metrics' means).
        self.error_sums = torch.zeros(n, 2, dtype=self.dtype, device=self.device)
        self.steps = torch.zeros(n, dtype=self.dtype, device=self.device)
        self._qpos0 = torch.cat(
            [self._as_tensor([0.0, 0.0, self.start_height, 1.0, 0.0, 0.0, 0.0]), self.default_angles]
        )

    def state_dict(self) -> dict:
        state = {name: getattr(self, name).to("cpu", copy=True) for name in self.kept}
        return {**state, "commands": self.commands.state_dict(), "starts": self.starts.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        for name in self.kept:
            getattr(self, name).copy_(state[name])
        self.commands.load_state_dict(state["commands"])
        self.starts.load_state_dict(state["starts"])

    def draw_starts(self, mask: torch.Tensor):
        """IsaacGymEnvs' reset: the base at 0.62 m, unrotated, at rest; each joint at its default
        angle x U(0.5, 1.5) with a velocity U(±0.1)."""
        u = self.starts.draw(mask).to(self.dtype)
        low, high = self.start_joint_factor
        n = mask.shape[0]
        qpos = self._qpos0.expand(n, -1).clone()
        qpos[:, 7:] *= low + (high - low) * u[:, :12]
        qvel = torch.zeros(n, 18, dtype=self.dtype, device=self.device)
        qvel[:, 6:] = self.start_joint_velocity * (2.0 * u[:, 12:] - 1.0)
        return qpos, qvel

    def restart(self, mask: torch.Tensor, state) -> None:
        """New episodes where mask: a new command, no last action, the metrics' sums from zero."""
        u = self.commands.draw(mask).to(self.dtype)
        low, high = self._as_tensor(self.command_low), self._as_tensor(self.command_high)
        rows = mask[:, None]
        self.command.copy_(torch.where(rows, low + (high - low) * u, self.command))
        self.last_action.masked_fill_(rows, 0.0)
        self.targets.copy_(torch.where(rows, self.default_angles, self.targets))
        self.error_sums.masked_fill_(rows, 0.0)
        self.steps.masked_fill_(mask, 0.0)

    # -- stepping -------------------------------------------------------------------------------

    def control(self, action: torch.Tensor, state) -> torch.Tensor:
        """PD targets [N, 12]: default + 0.5 x the action clipped to [-1, 1]."""
        action = action.to(self.dtype).clamp(-1.0, 1.0)
        self.last_action.copy_(action)
        self.targets.copy_(self.default_angles + self.action_scale * action)
        return self.targets

    def base_velocities(self, state) -> tuple[torch.Tensor, torch.Tensor]:
        """The base's (linear, angular) velocity [N, 3] each, in its own frame."""
        qpos, qvel = state["qpos"], state["qvel"]
        return quat_rotate_inverse(qpos[:, 3:7], qvel[:, :3]), qvel[:, 3:6]

    def torques(self, state) -> torch.Tensor:
        """[N, 12]: the drives' torques at the state reached and the current targets (85 (target - q)
        - 2 qdot within ±80 N m)."""
        q, qdot = state["qpos"][:, 7:], state["qvel"][:, 6:]
        force = self.gain * self.targets + self.bias[:, 0] * q + self.bias[:, 1] * qdot
        return force.clamp(self.force_low, self.force_high)

    def reward_and_termination(self, state, velocity, action):
        linear, angular = self.base_velocities(state)
        lin_error = (self.command[:, :2] - linear[:, :2]).square().sum(dim=1)
        yaw_error = (self.command[:, 2] - angular[:, 2]).square()
        terms = {
            "reward_lin_vel": self.lin_vel_reward_scale * self.dt * torch.exp(-lin_error / self.tracking_sigma),
            "reward_ang_vel": self.ang_vel_reward_scale * self.dt * torch.exp(-yaw_error / self.tracking_sigma),
            "reward_torque": self.torque_reward_scale * self.dt * self.torques(state).square().sum(dim=1),
        }
        unclipped = sum(terms.values())
        reward = unclipped.clamp(min=0.0)
        terms["reward_clip"] = reward - unclipped  # IsaacGymEnvs clips the total at 0
        self.error_sums += torch.stack([lin_error.sqrt(), yaw_error.sqrt()], dim=1)
        self.steps += 1
        means = self.error_sums / self.steps[:, None]
        forces = state["cfrc_ext"][:, [self.base, *self.thighs], 3:].norm(dim=2)
        touched = (forces > self.contact_force_limit).any(dim=1)
        info = {**terms, "lin_vel_error": means[:, 0], "yaw_rate_error": means[:, 1]}
        return reward, touched | ~finite_rows(state["qpos"], state["qvel"]), info

    def observe(self, state):
        linear, angular = self.base_velocities(state)
        qpos, qvel = state["qpos"], state["qvel"]
        gravity = quat_rotate_inverse(qpos[:, 3:7], self.gravity.expand(qpos.shape[0], 3))
        obs = torch.cat(
            [
                self.lin_vel_scale * linear,
                self.ang_vel_scale * angular,
                gravity,
                self.command_scale * self.command,
                self.dof_pos_scale * (qpos[:, 7:] - self.default_angles),
                self.dof_vel_scale * qvel[:, 6:],
                self.last_action,
            ],
            dim=1,
        )
        return obs.clamp(-self.clip_observations, self.clip_observations)


def mirror() -> Mirror:
    """The robot's left-right symmetry, a reflection through the base's x-z plane: a left leg's
    joints swap with the right one's, each hip's abduction (HAA) changing sign; velocities,
    gravity and the command change sign in y, the angular velocity (an axial vector) in x and z,
    the yaw-rate command with it."""
    legs = {"LF": "RF", "RF": "LF", "LH": "RH", "RH": "LH"}
    joints = [JOINTS.index(f"{legs[name[:2]]}{name[2:]}") for name in JOINTS]
    joint_signs = [-1.0 if name.endswith("HAA") else 1.0 for name in JOINTS]
    base = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]  # linear, angular velocity, gravity, command
    base_signs = [1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0, -1.0]
    blocks = [[12 + j for j in joints], [24 + j for j in joints], [36 + j for j in joints]]
    return Mirror(
        obs_index=tuple(base + [i for block in blocks for i in block]),
        obs_sign=tuple(base_signs + joint_signs * 3),
        action_index=tuple(joints),
        action_sign=tuple(joint_signs),
    )
