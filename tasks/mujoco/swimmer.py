"""Swimmer: a three-link snake in a viscous fluid rewarded for moving along +x; it never terminates
(Gymnasium Swimmer-v5)."""

from __future__ import annotations

import torch

from .task import Task, planar_position


class Swimmer(Task):
    xml = "swimmer.xml"
    frame_skip = 4
    reset_noise_scale = 0.1
    nconmax = 0  # no geom can collide (contype 0); the rows are the two joint limits
    njmax = 16

    forward_reward_weight = 1.0
    ctrl_cost_weight = 1e-4

    def observation_size(self, model):
        return (model.nq - 2) + model.nv

    def observe(self, state):
        return torch.cat([state["qpos"][:, 2:], state["qvel"]], dim=1)

    def position(self, state):
        return state["qpos"][:, :2]

    def reward_and_termination(self, state, velocity, action):
        terms = {
            "reward_forward": self.forward_reward_weight * velocity[:, 0],
            "reward_ctrl": -self.ctrl_cost_weight * action.square().sum(dim=1),
        }
        reward = sum(terms.values())
        return reward, torch.zeros_like(reward, dtype=torch.bool), {**planar_position(state["qpos"]), **terms}
