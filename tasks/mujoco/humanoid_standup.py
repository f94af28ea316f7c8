"""HumanoidStandup: the Humanoid lying on the floor, rewarded for raising its torso; it never
terminates (Gymnasium HumanoidStandup-v5)."""

from __future__ import annotations

import torch

from .humanoid import Humanoid
from .task import Task


class HumanoidStandup(Task):
    xml = "humanoidstandup.xml"
    frame_skip = 5
    reset_noise_scale = 1e-2
    fields = ("qpos", "qvel", "cinert", "cvel", "qfrc_actuator", "cfrc_ext")
    nconmax = 64  # MuJoCo C reached 32 contacts and 108 constraint rows (see Task)
    njmax = 256
    # The Humanoid's body and observation layout, only posed lying down.
    observation_size = Humanoid.observation_size
    observe = Humanoid.observe

    uph_cost_weight = 1.0
    ctrl_cost_weight = 0.1
    impact_cost_weight = 5e-7
    impact_cost_max = 10.0
    alive_bonus = 1.0

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        # Gymnasium divides the torso height by the physics timestep, not by the env step's dt.
        self.timestep = model.opt.timestep

    def reward_and_termination(self, state, velocity, action):
        uph = self.uph_cost_weight * state["qpos"][:, 2] / self.timestep
        ctrl_cost = self.ctrl_cost_weight * action.square().sum(dim=1)
        impact_cost = (self.impact_cost_weight * state["cfrc_ext"].square().flatten(1).sum(dim=1)).clamp(
            max=self.impact_cost_max
        )
        reward = uph - ctrl_cost - impact_cost + self.alive_bonus
        qpos = state["qpos"]
        info = {
            "x_position": qpos[:, 0],
            "y_position": qpos[:, 1],
            "z_distance_from_origin": qpos[:, 2] - self.qpos0[2],
            "reward_linup": uph,
            "reward_quadctrl": -ctrl_cost,
            "reward_impact": -impact_cost,
        }
        return reward, torch.zeros_like(reward, dtype=torch.bool), info
