"""Hopper: a planar one-legged hopper rewarded for moving along +x (Gymnasium Hopper-v5)."""

from __future__ import annotations

import torch

from .task import Task


class Hopper(Task):
    xml = "hopper.xml"
    frame_skip = 4
    reset_noise_scale = 5e-3
    nconmax = 16  # MuJoCo C reached 6 contacts and 25 constraint rows (see Task)
    njmax = 64

    forward_reward_weight = 1.0
    ctrl_cost_weight = 1e-3
    healthy_reward = 1.0
    healthy_state_range = (-100.0, 100.0)
    healthy_z_min = 0.7
    healthy_angle_range = (-0.2, 0.2)
    obs_qvel_bound = 10.0

    def observation_size(self, model):
        return (model.nq - 1) + model.nv

    def observe(self, state):
        return torch.cat([state["qpos"][:, 1:], state["qvel"].clamp(-self.obs_qvel_bound, self.obs_qvel_bound)], dim=1)

    def position(self, state):
        return state["qpos"][:, :1]

    def reward_and_termination(self, state, velocity, action):
        qpos = state["qpos"]
        rest = torch.cat([qpos[:, 2:], state["qvel"]], dim=1)  # all but x and z
        low, high = self.healthy_state_range
        angle_low, angle_high = self.healthy_angle_range
        healthy = (
            ((rest > low) & (rest < high)).all(dim=1)
            & (qpos[:, 1] > self.healthy_z_min)
            & (qpos[:, 2] > angle_low)
            & (qpos[:, 2] < angle_high)
        )
        terms = {
            "reward_forward": self.forward_reward_weight * velocity[:, 0],
            "reward_ctrl": -self.ctrl_cost_weight * action.square().sum(dim=1),
            "reward_survive": self.healthy_reward * healthy,
        }
        return sum(terms.values()), ~healthy, {**self.planar_info(qpos), **terms}

    def planar_info(self, qpos):
        """Gymnasium's position entries of the planar walkers (x, then z above the start)."""
        return {"x_position": qpos[:, 0], "z_distance_from_origin": qpos[:, 1] - self.qpos0[1]}
