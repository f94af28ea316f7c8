"""finger: a planar finger rewarded for spinning a hinged body, or turning it to a target (dm_control.suite.finger)."""

from __future__ import annotations

import torch

from .suite import DmcTask


class Finger(DmcTask):
    domain = "finger"
    # All of finger's observations are functions of its sensors, as dm_control reads them; the
    # backends need qpos among the fields all the same.
    fields = ("qpos", "sensordata")
    nconmax = 8
    njmax = 16

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._joints = [self.sensor(name).start for name in ("proximal", "distal")]
        self._velocities = [
            self.sensor(name).start for name in ("proximal_velocity", "distal_velocity", "hinge_velocity")
        ]
        self._hinge_velocity = self.sensor("hinge_velocity").start
        self._touch = [self.sensor(name).start for name in ("touchtop", "touchbottom")]
        self._tip, self._spinner = self.sensor("tip").start, self.sensor("spinner").start

    def xz(self, state, start: int) -> torch.Tensor:
        """[N, 2]: the x and z of the framepos sensor whose columns start at `start`."""
        return state["sensordata"][:, [start, start + 2]]

    def tip_position(self, state) -> torch.Tensor:
        return self.xz(state, self._tip) - self.xz(state, self._spinner)

    def observe(self, state):
        sensors = state["sensordata"]
        # bounded_position: the finger's joint angles, and the tip's (x, z) for the unbounded hinge angle.
        position = torch.cat([sensors[:, self._joints], self.tip_position(state)], dim=1)
        return torch.cat([position, sensors[:, self._velocities], torch.log1p(sensors[:, self._touch])], dim=1)


class FingerSpin(Finger):
    suite_task = "spin"
    spin_velocity = 15.0  # rad/s of the hinge, clockwise

    def reward(self, state, action):
        return (state["sensordata"][:, self._hinge_velocity] <= -self.spin_velocity).to(state["sensordata"].dtype)


class FingerTurn(Finger):
    target_radius: float  # of the target site the tip must enter

    def episode_values(self, physics):
        # The target site hangs off the world body, so its (x, z) in the model is its position;
        # a site never collides, so moving it changes nothing of the physics.
        return {"target": physics.named.model.site_pos["target", ["x", "z"]].copy()}

    def target_position(self, state) -> torch.Tensor:
        return self.values["target"] - self.xz(state, self._spinner)

    def dist_to_target(self, state) -> torch.Tensor:
        """[N, 1]: signed distance from the tip to the target's surface, negative inside."""
        to_target = self.target_position(state) - self.tip_position(state)
        return torch.linalg.vector_norm(to_target, dim=1, keepdim=True) - self.target_radius

    def observe(self, state):
        return torch.cat([super().observe(state), self.target_position(state), self.dist_to_target(state)], dim=1)

    def reward(self, state, action):
        return (self.dist_to_target(state)[:, 0] <= 0).to(state["sensordata"].dtype)


class FingerTurnEasy(FingerTurn):
    suite_task, target_radius = "turn_easy", 0.07


class FingerTurnHard(FingerTurn):
    suite_task, target_radius = "turn_hard", 0.03
