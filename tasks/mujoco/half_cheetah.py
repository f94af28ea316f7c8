"""HalfCheetah: a planar runner rewarded for speed along +x; it never terminates (Gymnasium HalfCheetah-v5)."""

from __future__ import annotations

import torch

from .task import Task


class HalfCheetah(Task):
    xml = "half_cheetah.xml"
    frame_skip = 5
    reset_noise_scale = 0.1
    qvel_noise = "normal"
    nconmax = 16  # MuJoCo C reached 6 contacts and 26 constraint rows (see Task)
    njmax = 64

    forward_reward_weight = 1.0
    ctrl_cost_weight = 0.1

    def observation_size(self, model):
        return (model.nq - 1) + model.nv

    def observe(self, state):
        return torch.cat([state["qpos"][:, 1:], state["qvel"]], dim=1)

    def position(self, state):
        return state["qpos"][:, :1]

    def reward_and_termination(self, state, velocity, action):
        terms = {
            "reward_forward": self.forward_reward_weight * velocity[:, 0],
            "reward_ctrl": -self.ctrl_cost_weight * action.square().sum(dim=1),
        }
        reward = sum(terms.values())
        return reward, torch.zeros_like(reward, dtype=torch.bool), {"x_position": state["qpos"][:, 0], **terms}
