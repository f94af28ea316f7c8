"""point_mass: a planar point mass rewarded for reaching a target with small controls (dm_control.suite.point_mass)."""

from __future__ import annotations

import torch

from .rewards import tolerance
from .suite import DmcTask


class PointMassEasy(DmcTask):
    domain, suite_task = "point_mass", "easy"
    fields = ("qpos", "qvel", "geom_xpos")
    nconmax = 8  # contacts are disabled; MuJoCo C reached 2 constraint rows (the two joint limits)
    njmax = 8
    control_margin = 1.0

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._mass, self._target = self.geom("pointmass"), self.geom("target")
        self._target_size = float(model.geom_size[self._target, 0])  # also the reward's margin

    def observe(self, state):
        return torch.cat([state["qpos"], state["qvel"]], dim=1)

    def reward(self, state, action):
        # the target is a geom of the world body that no episode moves: the physics' position is it.
        geom_xpos = state["geom_xpos"]
        distance = (geom_xpos[:, self._target] - geom_xpos[:, self._mass]).norm(dim=1)
        near_target = tolerance(distance, (0.0, self._target_size), self._target_size)
        control = tolerance(action, margin=self.control_margin, sigmoid="quadratic", value_at_margin=0.0)
        small_control = (control.mean(dim=1) + 4) / 5
        return near_target * small_control
