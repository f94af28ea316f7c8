"""Walker2d: a planar biped rewarded for moving along +x (Gymnasium Walker2d-v5)."""

from __future__ import annotations

from .hopper import Hopper
from .task import Task


class Walker2d(Task):
    xml = "walker2d_v5.xml"  # v5's model: both feet have friction 1.9 (v4's right foot had 0.9)
    frame_skip = 4
    reset_noise_scale = 5e-3
    nconmax = 32  # MuJoCo C reached 9 contacts and 38 constraint rows (see Task)
    njmax = 96

    forward_reward_weight = 1.0
    ctrl_cost_weight = 1e-3
    healthy_reward = 1.0
    healthy_z_range = (0.8, 2.0)
    healthy_angle_range = (-1.0, 1.0)
    obs_qvel_bound = 10.0

    # Hopper's planar layout, one leg more: the same observation, tracked position and info.
    observation_size = Hopper.observation_size
    observe = Hopper.observe
    position = Hopper.position
    planar_info = Hopper.planar_info

    def reward_and_termination(self, state, velocity, action):
        z, angle = state["qpos"][:, 1], state["qpos"][:, 2]
        z_low, z_high = self.healthy_z_range
        angle_low, angle_high = self.healthy_angle_range
        healthy = (z > z_low) & (z < z_high) & (angle > angle_low) & (angle < angle_high)
        terms = {
            "reward_forward": self.forward_reward_weight * velocity[:, 0],
            "reward_ctrl": -self.ctrl_cost_weight * action.square().sum(dim=1),
            "reward_survive": self.healthy_reward * healthy,
        }
        return sum(terms.values()), ~healthy, {**self.planar_info(state["qpos"]), **terms}
