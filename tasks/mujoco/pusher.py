"""Pusher: a seven-joint arm pushes a cylinder, placed anew each episode, to a fixed goal (Gymnasium Pusher-v5)."""

from __future__ import annotations

from typing import Any

import torch
import warp as wp

from .task import Task, body_id, launch_start, start_kernel


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

    def add_reset_noise(self, seed, starts):
        """Gymnasium's reset_model: the arm at qpos0 with velocities U(±0.005); the object drawn in
        object_range by rejection, at rest; the goal at rest at its joints' zero (their qpos0)."""
        (y_low, y_high), (x_low, x_high) = self.object_range
        params = _PusherStart()
        params.arm, params.qvel_scale = self.arm_joints, self.reset_noise_scale
        params.box, params.min_distance = wp.vec4(y_low, y_high, x_low, x_high), wp.float64(self.min_goal_distance)
        launch_start(_PUSHER_START, seed, starts, params)


@wp.struct
class _PusherStart:
    arm: wp.int32
    qvel_scale: float
    box: wp.vec4  # the object's (y low, y high, x low, x high)
    min_distance: wp.float64  # from the goal


@wp.func
def _pusher_start(
    state: wp.uint32, p: _PusherStart, env: wp.int32, qpos: wp.array2d(dtype=Any), qvel: wp.array2d(dtype=Any)
):
    for j in range(p.arm):
        qvel[env, j] = qvel[env, j] + qvel.dtype(p.qvel_scale * (2.0 * wp.randf(state) - 1.0))
    # The test is in float64 on float32 draws, so that the point stored in either backend's dtype
    # is the same and passes it.
    a = wp.float64(0.0)
    b = wp.float64(0.0)
    while wp.sqrt(a * a + b * b) <= p.min_distance:
        a = wp.float64(p.box[0] + (p.box[1] - p.box[0]) * wp.randf(state))
        b = wp.float64(p.box[2] + (p.box[3] - p.box[2]) * wp.randf(state))
    qpos[env, p.arm] = qpos.dtype(a)
    qpos[env, p.arm + 1] = qpos.dtype(b)


_PUSHER_START = start_kernel(_pusher_start)
