"""manipulator: a planar arm with a hand rewarded for bringing a ball to a target (dm_control.suite.manipulator)."""

from __future__ import annotations

import torch

from .rewards import tolerance
from .suite import DmcTask


class ManipulatorBringBall(DmcTask):
    domain, suite_task = "manipulator", "bring_ball"
    fields = ("qpos", "qvel", "xpos", "xquat", "site_xpos", "sensordata")
    nconmax = 32
    njmax = 64
    arm_joints = ("arm_root", "arm_shoulder", "arm_elbow", "arm_wrist", "finger", "fingertip", "thumb", "thumbtip")
    ball_joints = ("ball_x", "ball_z", "ball_y")
    touch_sensors = ("palm_touch", "finger_touch", "thumb_touch", "fingertip_touch", "thumbtip_touch")
    close = 0.01  # m: a distance below which a thing is close

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._arm_qpos = [self.joint_qpos(name) for name in self.arm_joints]
        self._arm_dofs = [self.joint_dof(name) for name in self.arm_joints]
        self._ball_dofs = [self.joint_dof(name) for name in self.ball_joints]
        self._touch = [self.sensor(name).start for name in self.touch_sensors]
        self._hand, self._ball = self.body("hand"), self.body("ball")
        self._ball_site = self.site("ball")

    def episode_values(self, physics):
        # target_ball is a body fixed to the world, so its model pose is its pose; its geom has
        # contype = conaffinity = 0, so it never collides and moving it changes nothing of the physics.
        model = physics.named.model
        return {
            "target_pos": model.body_pos["target_ball"].copy(),
            "target_quat": model.body_quat["target_ball"].copy(),
        }

    def observe(self, state):
        angles = state["qpos"][:, self._arm_qpos]
        arm_pos = torch.stack([torch.sin(angles), torch.cos(angles)], dim=2).flatten(1)  # (sin, cos) joint by joint
        touch = torch.log1p(state["sensordata"][:, self._touch])
        hand_pose = planar_pose(state["xpos"][:, self._hand], state["xquat"][:, self._hand])
        ball_pose = planar_pose(state["xpos"][:, self._ball], state["xquat"][:, self._ball])
        target_pose = planar_pose(self.values["target_pos"], self.values["target_quat"])
        arm_vel, ball_vel = state["qvel"][:, self._arm_dofs], state["qvel"][:, self._ball_dofs]
        return torch.cat([arm_pos, arm_vel, touch, hand_pose, ball_pose, ball_vel, target_pose], dim=1)

    def reward(self, state, action):
        # The target's site sits at its body's origin.
        to_target = self.values["target_pos"] - state["site_xpos"][:, self._ball_site]
        distance = torch.linalg.vector_norm(to_target, dim=1)
        return tolerance(distance, (0.0, self.close), 2 * self.close)


def planar_pose(position: torch.Tensor, quaternion: torch.Tensor) -> torch.Tensor:
    """[N, 4]: a body's pose in the x-z plane, position x and z, then quaternion w and y (its
    rotation about the plane's normal), from position [N, 3] and quaternion [N, 4] (w, x, y, z)."""
    return torch.cat([position[:, [0, 2]], quaternion[:, [0, 2]]], dim=1)
