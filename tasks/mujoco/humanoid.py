"""Humanoid: a 3D biped rewarded for moving its centre of mass along +x (Gymnasium Humanoid-v5)."""

from __future__ import annotations

import torch

from .task import Task, planar_position


class Humanoid(Task):
    xml = "humanoid.xml"
    frame_skip = 5
    reset_noise_scale = 1e-2
    fields = ("qpos", "qvel", "xipos", "cinert", "cvel", "qfrc_actuator", "cfrc_ext")
    nconmax = 32  # MuJoCo C reached 13 contacts and 43 constraint rows (see Task)
    njmax = 96

    forward_reward_weight = 1.25
    ctrl_cost_weight = 0.1
    contact_cost_weight = 5e-7
    contact_cost_max = 10.0
    healthy_reward = 5.0
    healthy_z_range = (1.0, 2.0)

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        mass = torch.as_tensor(model.body_mass, dtype=dtype, device=device)
        self.mass_fraction = (mass / mass.sum())[:, None]  # [nbody, 1]

    def observation_size(self, model):
        bodies = model.nbody - 1  # the world body is left out
        return (model.nq - 2) + model.nv + bodies * (10 + 6 + 6) + (model.nv - 6)

    def observe(self, state):
        return torch.cat(
            [
                state["qpos"][:, 2:],
                state["qvel"],
                state["cinert"][:, 1:].flatten(1),
                state["cvel"][:, 1:].flatten(1),
                state["qfrc_actuator"][:, 6:],  # the free joint's 6 dofs have no actuator
                state["cfrc_ext"][:, 1:].flatten(1),
            ],
            dim=1,
        )

    def position(self, state):
        return (self.mass_fraction * state["xipos"]).sum(dim=1)[:, :2]

    def reward_and_termination(self, state, velocity, action):
        z = state["qpos"][:, 2]
        low, high = self.healthy_z_range
        healthy = (z > low) & (z < high)
        ctrl_cost = self.ctrl_cost_weight * action.square().sum(dim=1)
        contact_cost = (self.contact_cost_weight * state["cfrc_ext"].square().flatten(1).sum(dim=1)).clamp(
            max=self.contact_cost_max
        )
        terms = {
            "reward_survive": self.healthy_reward * healthy,
            "reward_forward": self.forward_reward_weight * velocity[:, 0],
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact_cost,
        }
        return sum(terms.values()), ~healthy, {**planar_position(state["qpos"]), **terms}
