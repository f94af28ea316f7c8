"""pendulum: a torque-limited pendulum rewarded for being within 8 degrees of upright (dm_control.suite.pendulum)."""

from __future__ import annotations

import math

import torch

from .rewards import tolerance
from .suite import XZ, ZZ, DmcTask, flat_frames


class PendulumSwingup(DmcTask):
    domain, suite_task = "pendulum", "swingup"
    fields = ("qpos", "qvel", "xmat")
    nconmax = 8  # contacts are disabled and the hinge has no limit: MuJoCo C reached no constraint row
    njmax = 8
    angle_bound = 8.0  # degrees from upright that earn the reward

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._pole = self.body("pole")
        self._hinge = self.joint_dof("hinge")
        self._cosine_bound = math.cos(math.radians(self.angle_bound))

    def observe(self, state):
        orientation = flat_frames(state, "xmat")[:, self._pole, [ZZ, XZ]]
        return torch.cat([orientation, state["qvel"][:, self._hinge : self._hinge + 1]], dim=1)

    def reward(self, state, action):
        return tolerance(flat_frames(state, "xmat")[:, self._pole, ZZ], (self._cosine_bound, 1.0))
