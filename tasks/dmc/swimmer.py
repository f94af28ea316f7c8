"""swimmer: a planar swimmer of 6 or 15 links rewarded for bringing its nose to a target (dm_control.suite.swimmer)."""

from __future__ import annotations

import torch

from .rewards import tolerance
from .suite import DmcTask, frames


class Swimmer(DmcTask):
    domain = "swimmer"
    fields = ("qpos", "xmat", "geom_xpos", "sensordata")
    nconmax = 8  # the model disables contacts (Warp's minimum); its constraint rows are joint limits
    njmax: int

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._nose, self._head = self.geom("nose"), self.body("head")
        self._target_size = float(model.geom_size[self.geom("target"), 0])
        # A velocimeter and a gyro for the head, then for each segment, after the frame sensors.
        self._body_velocities = self.sensor("head_vel").start

    def episode_values(self, physics):
        # The target geom is the world body's, so its model position is its position; the model
        # disables contacts, so it never collides and moving it changes nothing of the physics.
        return {"target": physics.named.model.geom_pos["target"].copy()}

    def nose_to_target(self, state) -> torch.Tensor:
        """[N, 2]: from the nose to the target, x and y in the head's frame."""
        to_target = self.values["target"] - state["geom_xpos"][:, self._nose]
        return torch.einsum("ni,nij->nj", to_target, frames(state, "xmat")[:, self._head])[:, :2]

    def observe(self, state):
        joints = state["qpos"][:, 3:]  # all but the root's x, y and heading
        local = state["sensordata"][:, self._body_velocities :].unflatten(1, (-1, 6))
        body_velocities = local[:, :, [0, 1, 5]].flatten(1)  # linear x and y, rotational z
        return torch.cat([joints, self.nose_to_target(state), body_velocities], dim=1)

    def reward(self, state, action):
        distance = torch.linalg.vector_norm(self.nose_to_target(state), dim=1)
        size = self._target_size
        return tolerance(distance, (0.0, size), 5 * size, "long_tail")


class SwimmerSwimmer6(Swimmer):
    suite_task, njmax = "swimmer6", 16


class SwimmerSwimmer15(Swimmer):
    suite_task, njmax = "swimmer15", 32
