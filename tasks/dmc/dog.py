"""dog: a 3D dog rewarded for standing tall and upright on its feet, and for running forward (dm_control.suite.dog)."""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from .rewards import tolerance
from .suite import ZX, ZY, ZZ, DmcTask, flat_frames, frames


class Dog(DmcTask):
    domain = "dog"
    fields = ("qpos", "qvel", "act", "xpos", "xmat", "sensordata")
    nconmax = 128
    njmax = 1024
    stand_height_fraction = 0.9  # of the torso's and pelvis's heights in the default pose
    min_upright_cosine = float(np.cos(np.deg2rad(30)))  # of the skull's, torso's and pelvis's z-axes
    move_speed: float  # 0: stand only

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        hinges = model.jnt_type == mujoco.mjtJoint.mjJNT_HINGE
        self._hinge_qpos, self._hinge_dof = model.jnt_qposadr[hinges].tolist(), model.jnt_dofadr[hinges].tolist()
        self._skull, self._torso, self._pelvis = (self.body(name) for name in ("skull", "torso", "pelvis"))
        self._com_velocity = self.sensor("torso_linvel")
        self._inertial = self.sensor_columns("accelerometer", "velocimeter", "gyro")
        self._foot_forces = self.sensor_columns("foot_L", "foot_R", "hand_L", "hand_R")
        self._touch = self.sensor_columns("palm_L", "palm_R", "sole_L", "sole_R")
        # Constants dm_control measures at every episode's start: the heights at the default pose
        # (qpos0, as physics.reset leaves it) and the weight of the body.
        default_pose = mujoco.MjData(model)
        mujoco.mj_kinematics(model, default_pose)
        heights = default_pose.xpos[[self._torso, self._pelvis], 2] * self.stand_height_fraction
        self._stand_torso, self._stand_pelvis = heights.tolist()
        self._body_weight = float(-model.opt.gravity[2] * model.body_subtreemass[self._torso])

    def observe(self, state):
        sensors = state["sensordata"]
        torso_frame = frames(state, "xmat")[:, self._torso]
        z_projection = flat_frames(state, "xmat")[:, [self._skull, self._torso, self._pelvis]][:, :, [ZX, ZY, ZZ]]
        # the centre of mass's velocity in the torso's frame (dm_control's velocity.dot(frame))
        torso_com_velocity = torch.einsum("ni,nij->nj", sensors[:, self._com_velocity], torso_frame)
        return torch.cat(
            [
                state["qpos"][:, self._hinge_qpos],
                state["qvel"][:, self._hinge_dof],
                state["xpos"][:, [self._torso, self._pelvis], 2],
                z_projection.flatten(1),
                torso_com_velocity,
                sensors[:, self._inertial],
                sensors[:, self._foot_forces],
                sensors[:, self._touch],
                state["act"],
            ],
            dim=1,
        )

    def reward(self, state, action):
        xpos, sensors = state["xpos"], state["sensordata"]
        inf = float("inf")
        torso = tolerance(xpos[:, self._torso, 2], (self._stand_torso, inf), self._stand_torso)
        pelvis = tolerance(xpos[:, self._pelvis, 2], (self._stand_pelvis, inf), self._stand_pelvis)
        upright_z = flat_frames(state, "xmat")[:, [self._skull, self._torso, self._pelvis], ZZ]
        cosine = self.min_upright_cosine
        upright = tolerance(upright_z, (cosine, inf), cosine + 1, "linear", 0.0).prod(dim=1)
        # the feet's and palms' touch forces, up to the body's weight
        touch_sum = sensors[:, self._touch].sum(dim=1)
        touch = tolerance(touch_sum, (self._body_weight, inf), self._body_weight, "linear", 0.9)
        stand = torso * pelvis * upright * touch
        if self.move_speed == 0:
            return stand
        torso_frame = frames(state, "xmat")[:, self._torso]
        forward_speed = torch.einsum("ni,ni->n", sensors[:, self._com_velocity], torso_frame[:, :, 0])
        speed_bounds = (self.move_speed, 2 * self.move_speed)
        forward = tolerance(forward_speed, speed_bounds, max(1.0, self.move_speed), "linear", 0.0)
        return stand * (4 * forward + 1) / 5


class DogStand(Dog):
    suite_task, move_speed = "stand", 0.0


class DogWalk(Dog):
    suite_task, move_speed = "walk", 1.0


class DogTrot(Dog):
    suite_task, move_speed = "trot", 3.0


class DogRun(Dog):
    suite_task, move_speed = "run", 9.0
