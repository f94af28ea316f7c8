"""Ant: a four-legged walker rewarded for moving along +x (Gymnasium Ant-v5)."""

from __future__ import annotations

import torch

from .task import Task, finite_rows, planar_position


class Ant(Task):
    xml = "ant.xml"
    frame_skip = 5
    reset_noise_scale = 0.1
    qvel_noise = "normal"
    fields = ("qpos", "qvel", "xpos", "cfrc_ext")
    nconmax = 16  # MuJoCo C reached 6 contacts and 32 constraint rows (see Task)
    njmax = 64

    forward_reward_weight = 1.0
    ctrl_cost_weight = 0.5
    contact_cost_weight = 5e-4
    healthy_reward = 1.0
    healthy_z_range = (0.2, 1.0)
    contact_force_range = (-1.0, 1.0)
    main_body = 1  # the torso

    def observation_size(self, model):
        return (model.nq - 2) + model.nv + 6 * (model.nbody - 1)

    def _contact_forces(self, state):
        return state["cfrc_ext"].clamp(*self.contact_force_range)

    def observe(self, state):
        # x, y of the torso are left out so that the policy cannot depend on where it is.
        contact = self._contact_forces(state)[:, 1:].flatten(1)
        return torch.cat([state["qpos"][:, 2:], state["qvel"], contact], dim=1)

    def position(self, state):
        return state["xpos"][:, self.main_body, :2]

    def reward_and_termination(self, state, velocity, action):
        z = state["qpos"][:, 2]
        low, high = self.healthy_z_range
        healthy = finite_rows(state["qpos"], state["qvel"]) & (z >= low) & (z <= high)
        ctrl_cost = self.ctrl_cost_weight * action.square().sum(dim=1)
        contact_cost = self.contact_cost_weight * self._contact_forces(state).square().flatten(1).sum(dim=1)
        terms = {
            "reward_forward": self.forward_reward_weight * velocity[:, 0],
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact_cost,
            "reward_survive": self.healthy_reward * healthy,
        }
        reward = sum(terms.values())
        return reward, ~healthy, {**planar_position(state["qpos"]), **terms}
