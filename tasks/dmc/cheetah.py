"""cheetah: a planar cheetah rewarded for running forward at 10 m/s or more (dm_control.suite.cheetah)."""

from __future__ import annotations

import torch

from .rewards import tolerance
from .suite import DmcTask


class CheetahRun(DmcTask):
    domain, suite_task = "cheetah", "run"
    fields = ("qpos", "qvel", "sensordata")
    nconmax = 16
    njmax = 64
    run_speed = 10.0

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._speed = self.sensor("torso_subtreelinvel").start  # its x component

    def observe(self, state):
        # position: every joint but the root's x (translation invariance); velocity: all of qvel.
        return torch.cat([state["qpos"][:, 1:], state["qvel"]], dim=1)

    def reward(self, state, action):
        speed = state["sensordata"][:, self._speed]
        return tolerance(speed, (self.run_speed, float("inf")), self.run_speed, "linear", 0.0)
