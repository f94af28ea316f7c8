"""quadruped: a 3D four-legged robot rewarded for moving forward upright (dm_control.suite.quadruped)."""

from __future__ import annotations

import mujoco
import torch

from .rewards import tolerance
from .suite import ZZ, DmcTask, flat_frames


class Quadruped(DmcTask):
    domain = "quadruped"
    fields = ("qpos", "qvel", "act", "xmat", "sensordata")
    nconmax = 16
    njmax = 64
    move_speed: float  # of the torso forward, in its own frame

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        hinges = model.jnt_type == mujoco.mjtJoint.mjJNT_HINGE
        self._hinge_qpos, self._hinge_dof = model.jnt_qposadr[hinges].tolist(), model.jnt_dofadr[hinges].tolist()
        self._torso = self.body("torso")
        self._velocimeter = self.sensor("velocimeter")
        sensor = mujoco.mjtSensor
        self._imu = self._columns(model, sensor.mjSENS_GYRO, sensor.mjSENS_ACCELEROMETER)
        self._force_torque = self._columns(model, sensor.mjSENS_FORCE, sensor.mjSENS_TORQUE)

    @staticmethod
    def _columns(model, *types) -> list[int]:
        """The sensordata columns of the sensors of these types, in model order (as dm_control picks them)."""
        wanted = [int(t) for t in types]
        return [
            column
            for s in range(model.nsensor)
            if model.sensor_type[s] in wanted
            for column in range(model.sensor_adr[s], model.sensor_adr[s] + model.sensor_dim[s])
        ]

    def observe(self, state):
        sensors = state["sensordata"]
        return torch.cat(
            [
                state["qpos"][:, self._hinge_qpos],  # egocentric state: hinges' positions and velocities, actuators'
                state["qvel"][:, self._hinge_dof],
                state["act"],
                sensors[:, self._velocimeter],
                flat_frames(state, "xmat")[:, self._torso, ZZ:],  # upright
                sensors[:, self._imu],
                torch.asinh(sensors[:, self._force_torque]),
            ],
            dim=1,
        )

    def reward(self, state, action):
        # upright: 1 with the torso's z-axis straight up (deviation angle 0), 0 upside down
        upright = tolerance(flat_frames(state, "xmat")[:, self._torso, ZZ], (1.0, float("inf")), 2.0, "linear", 0.0)
        speed = state["sensordata"][:, self._velocimeter.start]
        move = tolerance(speed, (self.move_speed, float("inf")), self.move_speed, "linear", 0.5)
        return upright * move


class QuadrupedWalk(Quadruped):
    suite_task, move_speed = "walk", 0.5


class QuadrupedRun(Quadruped):
    suite_task, move_speed = "run", 5.0
