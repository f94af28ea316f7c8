"""humanoid: a 3D humanoid rewarded for standing tall and upright, still or moving (dm_control.suite.humanoid)."""

from __future__ import annotations

import torch

from .rewards import tolerance
from .suite import ZX, ZY, ZZ, DmcTask, flat_frames, frames


class Humanoid(DmcTask):
    domain = "humanoid"
    fields = ("qpos", "qvel", "xpos", "xmat", "sensordata")
    nconmax = 32
    njmax = 128
    stand_height = 1.4  # of the head
    min_upright = 0.9  # the torso's z-axis's z component
    move_speed: float  # 0: stand still

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._torso, self._head = self.body("torso"), self.body("head")
        self._extremities = [self.body(side + limb) for side in ("left_", "right_") for limb in ("hand", "foot")]
        self._com_velocity = self.sensor("torso_subtreelinvel")

    def observe(self, state):
        xpos = state["xpos"]
        torso_frame = frames(state, "xmat")[:, self._torso]
        # hands and feet relative to the torso, in the torso's frame (dm_control's offset.dot(frame))
        offsets = xpos[:, self._extremities] - xpos[:, self._torso, None]
        extremities = torch.einsum("nki,nij->nkj", offsets, torso_frame).flatten(1)
        torso_vertical = flat_frames(state, "xmat")[:, self._torso, [ZX, ZY, ZZ]]
        return torch.cat(
            [
                state["qpos"][:, 7:],  # joint angles: all but the free root's
                xpos[:, self._head, 2:],
                extremities,
                torso_vertical,
                state["sensordata"][:, self._com_velocity],
                state["qvel"],
            ],
            dim=1,
        )

    def reward(self, state, action):
        head_height = state["xpos"][:, self._head, 2]
        standing = tolerance(head_height, (self.stand_height, float("inf")), self.stand_height / 4)
        upright_z = flat_frames(state, "xmat")[:, self._torso, ZZ]
        upright = tolerance(upright_z, (self.min_upright, float("inf")), 1 + self.min_upright, "linear", 0.0)
        # dm_control reads the controls it set: the action as given, in the physics' precision.
        small_control = tolerance(action.to(head_height.dtype), margin=1.0, sigmoid="quadratic", value_at_margin=0.0)
        stand = (4 + small_control.mean(dim=1)) / 5 * standing * upright
        horizontal_velocity = state["sensordata"][:, self._com_velocity][:, :2]
        if self.move_speed == 0:
            return stand * tolerance(horizontal_velocity, margin=2.0).mean(dim=1)
        speed = horizontal_velocity.norm(dim=1)
        move = tolerance(speed, (self.move_speed, float("inf")), self.move_speed, "linear", 0.0)
        return stand * (5 * move + 1) / 6


class HumanoidStand(Humanoid):
    suite_task, move_speed = "stand", 0.0


class HumanoidWalk(Humanoid):
    suite_task, move_speed = "walk", 1.0


class HumanoidRun(Humanoid):
    suite_task, move_speed = "run", 10.0
