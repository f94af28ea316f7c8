"""Pusher: a seven-joint arm pushes a cylinder, placed anew each episode, to a fixed goal (Gymnasium Pusher-v5)."""

from __future__ import annotations

from typing import Any

import torch
import warp as wp

from .task import Task, body_id, start_stream, warp_seed


class Pusher(Task):
    xml = "pusher_v5.xml"
    frame_skip = 5
    reset_noise_scale = 5e-3  # of the arm's joint velocities; its joint angles start at qpos0
    # The object's two slide joints (qpos[7] along y, then qpos[8] along x): drawn in this box
    # until farther than min_goal_distance from the goal's joints' zero, where the goal stays.
    object_range = ((-0.3, 0.0), (-0.2, 0.2))
    min_goal_distance = 0.17
    max_episode_steps = 100
    fields = ("qpos", "qvel", "xpos")
    nconmax = 32  # MuJoCo C reached 11 contacts and 14 constraint rows (see Task)
    njmax = 32

    reward_near_weight = 0.5
    reward_dist_weight = 1.0
    reward_control_weight = 0.1
    arm_joints = 7  # qpos[:7], qvel[:7]; the object's and the goal's slide joints follow

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._bodies = [body_id(model, name) for name in ("tips_arm", "object", "goal")]

    def observation_size(self, model):
        return 2 * self.arm_joints + 9  # arm qpos and qvel; tips_arm, object and goal positions

    def observe(self, state):
        arm = self.arm_joints
        return torch.cat(
            [state["qpos"][:, :arm], state["qvel"][:, :arm], state["xpos"][:, self._bodies].flatten(1)], dim=1
        )

    def reward_and_termination(self, state, velocity, action):
        tips_arm, obj, goal = state["xpos"][:, self._bodies].unbind(1)
        terms = {
            "reward_dist": -self.reward_dist_weight * (obj - goal).norm(dim=1),
            "reward_ctrl": -self.reward_control_weight * action.square().sum(dim=1),
            "reward_near": -self.reward_near_weight * (obj - tips_arm).norm(dim=1),
        }
        reward = sum(terms.values())
        return reward, torch.zeros_like(reward, dtype=torch.bool), terms

    def add_reset_noise(self, seed, restart, episodes, qpos, qvel):
        """Gymnasium's reset_model: the arm at qpos0 with velocities U(±0.005); the object drawn in
        object_range by rejection, at rest; the goal at rest at its joints' zero (their qpos0)."""
        (y_low, y_high), (x_low, x_high) = self.object_range
        wp.launch(
            _pusher_start,
            dim=restart.shape[0],
            device=qpos.device,
            inputs=[
                warp_seed(seed),
                self.arm_joints,
                float(self.reset_noise_scale),
                wp.vec4(y_low, y_high, x_low, x_high),
                wp.float64(self.min_goal_distance),
                restart,
            ],
            outputs=[episodes, qpos, qvel],
        )


@wp.kernel
def _pusher_start(
    seed: wp.int32,
    arm: wp.int32,
    qvel_scale: float,
    box: wp.vec4,
    min_distance: wp.float64,
    restart: wp.array(dtype=wp.bool),
    episodes: wp.array(dtype=wp.int32),
    qpos: wp.array2d(dtype=Any),
    qvel: wp.array2d(dtype=Any),
):
    env = wp.tid()
    if not restart[env]:
        return
    state = start_stream(seed, env, episodes)
    for j in range(arm):
        qvel[env, j] = qvel[env, j] + qvel.dtype(qvel_scale * (2.0 * wp.randf(state) - 1.0))
    # The test is in float64 on float32 draws, so that the point stored in either backend's dtype
    # is the same and passes it.
    a = wp.float64(0.0)
    b = wp.float64(0.0)
    while wp.sqrt(a * a + b * b) <= min_distance:
        a = wp.float64(box[0] + (box[1] - box[0]) * wp.randf(state))
        b = wp.float64(box[2] + (box[3] - box[2]) * wp.randf(state))
    qpos[env, arm] = qpos.dtype(a)
    qpos[env, arm + 1] = qpos.dtype(b)
