"""InvertedDoublePendulum: keep a two-link pole upright on a cart, its tip near height 2
(Gymnasium InvertedDoublePendulum-v5)."""

from __future__ import annotations

import torch

from .task import Task


class InvertedDoublePendulum(Task):
    xml = "inverted_double_pendulum.xml"
    frame_skip = 5
    reset_noise_scale = 0.1
    qvel_noise = "normal"
    # site_xpos: the tip (the model's one site); qfrc_constraint: the cart's rail-end limit force
    fields = ("qpos", "qvel", "site_xpos", "qfrc_constraint")
    nconmax = 0  # no geom can collide (contype 0); the one row is the cart's rail-end limit
    njmax = 16

    healthy_reward = 10.0
    tip_min_height = 1.0  # the episode ends once the tip is at or below it
    tip_target_height = 2.0
    x_penalty_weight = 0.01
    velocity_penalty_weights = (1e-3, 5e-3)  # of the two hinges' squared angular velocities
    obs_bound = 10.0

    def observation_size(self, model):
        return 1 + 2 * (model.nq - 1) + model.nv + 1

    def observe(self, state):
        qpos, bound = state["qpos"], self.obs_bound
        return torch.cat(
            [
                qpos[:, :1],
                qpos[:, 1:].sin(),
                qpos[:, 1:].cos(),
                state["qvel"].clamp(-bound, bound),
                state["qfrc_constraint"][:, :1].clamp(-bound, bound),
            ],
            dim=1,
        )

    def reward_and_termination(self, state, velocity, action):
        tip = state["site_xpos"][:, 0]
        x, z = tip[:, 0], tip[:, 2]
        terminated = z <= self.tip_min_height
        qvel = state["qvel"]
        w1, w2 = self.velocity_penalty_weights
        distance_penalty = self.x_penalty_weight * x.square() + (z - self.tip_target_height).square()
        velocity_penalty = w1 * qvel[:, 1].square() + w2 * qvel[:, 2].square()
        terms = {
            "reward_survive": self.healthy_reward * ~terminated,
            "distance_penalty": -distance_penalty,
            "velocity_penalty": -velocity_penalty,
        }
        return sum(terms.values()), terminated, terms
