"""InvertedPendulum: keep a pole upright on a cart; +1 per step while it stands (Gymnasium InvertedPendulum-v5)."""

from __future__ import annotations

import torch

from .task import Task


class InvertedPendulum(Task):
    xml = "inverted_pendulum.xml"
    frame_skip = 2
    reset_noise_scale = 0.01
    nconmax = 0  # no geom can collide (contype 0); the rows are the two joint limits
    njmax = 16
    max_pole_angle = 0.2

    def observation_size(self, model):
        return model.nq + model.nv

    def observe(self, state):
        return torch.cat([state["qpos"], state["qvel"]], dim=1)

    def reward_and_termination(self, state, velocity, action):
        obs = self.observe(state)
        terminated = ~torch.isfinite(obs).all(dim=1) | (state["qpos"][:, 1].abs() > self.max_pole_angle)
        reward = (~terminated).to(obs.dtype)
        return reward, terminated, {"reward_survive": reward}
