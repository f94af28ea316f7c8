"""reacher: a planar two-link arm rewarded for touching a target placed at random (dm_control.suite.reacher)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .rewards import tolerance
from .suite import DmcTask


class Reacher(DmcTask):
    domain = "reacher"
    fields = ("qpos", "qvel", "geom_xpos")
    nconmax = 8  # contacts are disabled; MuJoCo C reached 1 constraint row (the wrist's limit)
    njmax = 8
    target_size: float  # the target's radius

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._finger = self.geom("finger")
        self._touching = self.target_size + float(model.geom_size[self._finger, 0])  # centre distance

    def episode_values(self, physics: Any) -> dict[str, np.ndarray]:
        # initialize_episode moves the target geom (of the world body) in the model: its x, y.
        return {"target": physics.named.model.geom_pos["target", :2].copy()}

    def _finger_to_target(self, state) -> torch.Tensor:
        return self.values["target"] - state["geom_xpos"][:, self._finger, :2]

    def observe(self, state):
        return torch.cat([state["qpos"], self._finger_to_target(state), state["qvel"]], dim=1)

    def reward(self, state, action):
        return tolerance(self._finger_to_target(state).norm(dim=1), (0.0, self._touching))


class ReacherEasy(Reacher):
    suite_task, target_size = "easy", 0.05


class ReacherHard(Reacher):
    suite_task, target_size = "hard", 0.015
