"""walker: a planar biped rewarded for standing tall and upright, and for moving forward (dm_control.suite.walker)."""

from __future__ import annotations

import torch

from .rewards import tolerance
from .suite import XX, XZ, ZZ, DmcTask, flat_frames


class Walker(DmcTask):
    domain = "walker"
    fields = ("qpos", "qvel", "xpos", "xmat", "sensordata")
    nconmax = 16
    njmax = 64
    stand_height = 1.2
    move_speed: float  # 0: stand only

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._torso = self.body("torso")
        self._speed = self.sensor("torso_subtreelinvel").start

    def observe(self, state):
        # orientations: the xx and xz entries of every body's frame but the world's, body by body.
        orientations = flat_frames(state, "xmat")[:, 1:, [XX, XZ]].flatten(1)
        height = state["xpos"][:, self._torso, 2:]
        return torch.cat([orientations, height, state["qvel"]], dim=1)

    def reward(self, state, action):
        height = state["xpos"][:, self._torso, 2]
        standing = tolerance(height, (self.stand_height, float("inf")), self.stand_height / 2)
        upright = (1 + flat_frames(state, "xmat")[:, self._torso, ZZ]) / 2
        stand = (3 * standing + upright) / 4
        if self.move_speed == 0:
            return stand
        speed = state["sensordata"][:, self._speed]
        move = tolerance(speed, (self.move_speed, float("inf")), self.move_speed / 2, "linear", 0.5)
        return stand * (5 * move + 1) / 6


class WalkerStand(Walker):
    suite_task, move_speed = "stand", 0.0


class WalkerWalk(Walker):
    suite_task, move_speed = "walk", 1.0


class WalkerRun(Walker):
    suite_task, move_speed = "run", 8.0
