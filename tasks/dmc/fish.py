"""fish: a 3D fish rewarded for staying upright, or for bringing its mouth to a target (dm_control.suite.fish)."""

from __future__ import annotations

import torch

from .rewards import tolerance
from .suite import ZZ, DmcTask, flat_frames, frames


class Fish(DmcTask):
    domain = "fish"
    fields = ("qpos", "qvel", "xmat")
    # The model disables constraints: no contacts, no constraint rows; these are Warp's minimum sizes.
    nconmax = 8
    njmax = 8
    joints = ("tail1", "tail_twist", "tail2", "finright_roll", "finright_pitch", "finleft_roll", "finleft_pitch")

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._joints = [self.joint_qpos(name) for name in self.joints]
        self._torso = self.body("torso")

    def joint_angles(self, state) -> torch.Tensor:
        return state["qpos"][:, self._joints]

    def upright(self, state) -> torch.Tensor:
        """[N]: the torso's z axis projected on the world's."""
        return flat_frames(state, "xmat")[:, self._torso, ZZ]


class FishUpright(Fish):
    suite_task = "upright"

    def observe(self, state):
        return torch.cat([self.joint_angles(state), self.upright(state)[:, None], state["qvel"]], dim=1)

    def reward(self, state, action):
        return tolerance(self.upright(state), (1.0, 1.0), 1.0)


class FishSwim(Fish):
    suite_task = "swim"
    fields = (*Fish.fields, "geom_xpos", "geom_xmat")

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._mouth = self.geom("mouth")
        # In the target when the mouth's sphere touches it.
        self._radii = float(model.geom_size[[self._mouth, self.geom("target")], 0].sum())

    def episode_values(self, physics):
        # The target geom is the world body's, so its model position is its position; the model
        # disables constraints, so it never collides and moving it changes nothing of the physics.
        return {"target": physics.named.model.geom_pos["target"].copy()}

    def mouth_to_target(self, state) -> torch.Tensor:
        """[N, 3]: from the mouth to the target, in the mouth's frame."""
        to_target = self.values["target"] - state["geom_xpos"][:, self._mouth]
        return torch.einsum("ni,nij->nj", to_target, frames(state, "geom_xmat")[:, self._mouth])

    def observe(self, state):
        upright = self.upright(state)[:, None]
        return torch.cat([self.joint_angles(state), upright, self.mouth_to_target(state), state["qvel"]], dim=1)

    def reward(self, state, action):
        distance = torch.linalg.vector_norm(self.mouth_to_target(state), dim=1)
        in_target = tolerance(distance, (0.0, self._radii), 2 * self._radii)
        is_upright = (self.upright(state) + 1) / 2
        return (7 * in_target + is_upright) / 8
