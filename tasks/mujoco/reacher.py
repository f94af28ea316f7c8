"""Reacher: a two-link planar arm brings its fingertip to a target drawn anew each episode (Gymnasium Reacher-v5)."""

from __future__ import annotations

from typing import Any

import torch
import warp as wp

from .task import Task, body_id, launch_start, start_kernel


class Reacher(Task):
    xml = "reacher.xml"
    frame_skip = 2
    reset_noise_scale = 0.1  # of the arm's joint angles
    qvel_noise_scale = 5e-3  # of the arm's joint velocities
    target_radius = 0.2
    max_episode_steps = 50
    fields = ("qpos", "qvel", "xpos")
    nconmax = 0  # no geom can collide (contype 0); MuJoCo C reached 1 constraint row (a joint limit)
    njmax = 16

    reward_dist_weight = 1.0
    # Gymnasium's docstring says 0.1, but its code defaults to 1 (v4's cost), and the code is what runs.
    reward_control_weight = 1.0
    arm_joints = 2  # qpos[:2], qvel[:2]; the target's two slide joints follow

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._fingertip, self._target = body_id(model, "fingertip"), body_id(model, "target")

    def observation_size(self, model):
        return 10  # cos, sin and velocity of the 2 arm joints; target x, y; fingertip - target x, y

    def _fingertip_to_target(self, state):
        xpos = state["xpos"]
        return xpos[:, self._fingertip] - xpos[:, self._target]

    def observe(self, state):
        qpos, arm = state["qpos"], self.arm_joints
        theta = qpos[:, :arm]
        # The z of fingertip - target is left out, as in v5: the arm moves in a plane.
        return torch.cat(
            [theta.cos(), theta.sin(), qpos[:, arm:], state["qvel"][:, :arm], self._fingertip_to_target(state)[:, :2]],
            dim=1,
        )

    def reward_and_termination(self, state, velocity, action):
        distance = self._fingertip_to_target(state).norm(dim=1)
        terms = {
            "reward_dist": -self.reward_dist_weight * distance,
            "reward_ctrl": -self.reward_control_weight * action.square().sum(dim=1),
        }
        reward = sum(terms.values())
        return reward, torch.zeros_like(reward, dtype=torch.bool), terms

    def add_reset_noise(self, seed, starts):
        """Gymnasium's reset_model: arm qpos0 + U(±0.1), its velocities U(±0.005); the target
        uniform on the disc of radius 0.2 at rest."""
        launch_start(_REACHER_START, seed, starts, self.start_params())

    def start_params(self) -> _ReacherStart:
        params = _ReacherStart()
        params.arm, params.qpos_scale = self.arm_joints, self.reset_noise_scale
        params.qvel_scale, params.half_width = self.qvel_noise_scale, self.target_radius
        params.radius = wp.float64(self.target_radius)
        return params


@wp.struct
class _ReacherStart:
    arm: wp.int32
    qpos_scale: float
    qvel_scale: float
    half_width: float  # of the square the target is drawn in
    radius: wp.float64  # of the disc it must fall in


@wp.func
def _reacher_start(
    state: wp.uint32, p: _ReacherStart, env: wp.int32, qpos: wp.array2d(dtype=Any), qvel: wp.array2d(dtype=Any)
):
    for j in range(p.arm):
        qpos[env, j] = qpos[env, j] + qpos.dtype(p.qpos_scale * (2.0 * wp.randf(state) - 1.0))
        qvel[env, j] = qvel[env, j] + qvel.dtype(p.qvel_scale * (2.0 * wp.randf(state) - 1.0))
    # Uniform on the disc by rejection from the square around it, as Gymnasium draws it. The test
    # is in float64 on float32 draws, so that the point stored in either backend's dtype is the
    # same and inside the disc. It replaces the target joints' qpos0 (their `ref`): the slide
    # joints hold the target's position itself. Its velocity stays the reset's zero.
    x = wp.float64(p.radius)
    y = wp.float64(0.0)
    while wp.sqrt(x * x + y * y) >= p.radius:
        x = wp.float64(p.half_width * (2.0 * wp.randf(state) - 1.0))
        y = wp.float64(p.half_width * (2.0 * wp.randf(state) - 1.0))
    qpos[env, p.arm] = qpos.dtype(x)
    qpos[env, p.arm + 1] = qpos.dtype(y)


_REACHER_START = start_kernel(_reacher_start)
