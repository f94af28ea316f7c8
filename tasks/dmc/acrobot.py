"""acrobot: a double pendulum driven at the elbow, rewarded for its tip in a target above (dm_control.suite.acrobot)."""

from __future__ import annotations

import torch

from .rewards import tolerance
from .suite import XZ, ZZ, DmcTask, flat_frames


class Acrobot(DmcTask):
    domain = "acrobot"
    fields = ("qpos", "qvel", "xmat", "site_xpos")
    nconmax = 8  # constraints are disabled: MuJoCo C reached no contact and no constraint row
    njmax = 8
    sparse: bool  # reward 1 inside the target and 0 outside, else a gaussian of the distance to it
    margin = 1.0  # of the smooth reward, in metres beyond the target's radius

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._arms = [self.body("upper_arm"), self.body("lower_arm")]
        self._tip, self._target = self.site("tip"), self.site("target")
        self._target_radius = float(model.site_size[self._target, 0])

    def observe(self, state):
        # orientations: the arms' horizontal (xz) then vertical (zz) frame entries.
        arms = flat_frames(state, "xmat")[:, self._arms]
        return torch.cat([arms[..., XZ], arms[..., ZZ], state["qvel"]], dim=1)

    def reward(self, state, action):
        site_xpos = state["site_xpos"]
        distance = (site_xpos[:, self._target] - site_xpos[:, self._tip]).norm(dim=1)
        return tolerance(distance, (0.0, self._target_radius), 0.0 if self.sparse else self.margin)


class AcrobotSwingup(Acrobot):
    suite_task, sparse = "swingup", False


class AcrobotSwingupSparse(Acrobot):
    suite_task, sparse = "swingup_sparse", True
