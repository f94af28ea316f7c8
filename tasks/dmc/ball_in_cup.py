"""ball_in_cup: a planar cup rewarded while the ball tied to it by a string is inside (dm_control.suite.ball_in_cup)."""

from __future__ import annotations

import torch

from .suite import DmcTask

X, Z = 0, 2  # the plane of the motion


class BallInCupCatch(DmcTask):
    domain, suite_task = "ball_in_cup", "catch"
    fields = ("qpos", "qvel", "xpos", "site_xpos")
    nconmax = 8  # MuJoCo C reached 3 contacts and 12 constraint rows (ball with cup and ground, the string)
    njmax = 32

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._ball, self._target = self.body("ball"), self.site("target")
        # the ball is in when its centre is this far or less from the target's, in x and in z
        room = model.site_size[self._target, [X, Z]] - model.geom_size[self.geom("ball"), 0]
        self._room = torch.as_tensor(room, dtype=dtype, device=device)

    def observe(self, state):
        return torch.cat([state["qpos"], state["qvel"]], dim=1)

    def reward(self, state, action):
        ball_to_target = state["site_xpos"][:, self._target, [X, Z]] - state["xpos"][:, self._ball, [X, Z]]
        return (ball_to_target.abs() < self._room).all(dim=1).to(ball_to_target.dtype)
