"""hopper: a planar one-legged hopper rewarded for standing tall, and for hopping forward (dm_control.suite.hopper)."""

from __future__ import annotations

import torch

from .rewards import tolerance
from .suite import DmcTask


class Hopper(DmcTask):
    domain = "hopper"
    fields = ("qpos", "qvel", "xipos", "sensordata")
    nconmax = 32
    njmax = 128
    stand_height = 0.6  # of the torso's centre of mass over the foot's, up to 2
    hop_speed = 2.0
    hopping: bool  # False: stand still instead, with small controls

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._torso, self._foot = self.body("torso"), self.body("foot")
        self._speed = self.sensor("torso_subtreelinvel").start  # its x component
        self._touch = [self.sensor(name).start for name in ("touch_toe", "touch_heel")]

    def observe(self, state):
        # position: every joint but the root's x (translation invariance); touch: log1p of the foot's sensors.
        touch = torch.log1p(state["sensordata"][:, self._touch])
        return torch.cat([state["qpos"][:, 1:], state["qvel"], touch], dim=1)

    def reward(self, state, action):
        height = state["xipos"][:, self._torso, 2] - state["xipos"][:, self._foot, 2]
        standing = tolerance(height, (self.stand_height, 2.0))
        if self.hopping:
            speed = state["sensordata"][:, self._speed]
            return standing * tolerance(speed, (self.hop_speed, float("inf")), self.hop_speed / 2, "linear", 0.5)
        # dm_control reads the controls it set: the action as given, in the physics' precision.
        small_control = tolerance(action.to(height.dtype), margin=1.0, sigmoid="quadratic", value_at_margin=0.0)
        return standing * (small_control.mean(dim=1) + 4) / 5


class HopperStand(Hopper):
    suite_task, hopping = "stand", False


class HopperHop(Hopper):
    suite_task, hopping = "hop", True
