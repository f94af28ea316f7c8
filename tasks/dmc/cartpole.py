"""cartpole: a pole hinged on a cart, rewarded for being upright over the rail's middle (dm_control.suite.cartpole)."""

from __future__ import annotations

import torch

from .rewards import tolerance
from .suite import XZ, ZZ, DmcTask, flat_frames


class Cartpole(DmcTask):
    domain = "cartpole"
    fields = ("qpos", "qvel", "xmat")
    nconmax = 8  # contacts are disabled; MuJoCo C reached 1 constraint row (the rail's end)
    njmax = 8
    sparse: bool
    # the sparse reward: 1 with the cart and every pole within these
    cart_range = (-0.25, 0.25)
    angle_cosine_range = (0.995, 1.0)
    # the smooth reward's margins: cart position, control, poles' angular velocities
    cart_margin = 2.0
    control_margin = 1.0
    angular_velocity_margin = 5.0

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self._slider = self.joint_qpos("slider")
        self._first_pole = self.body("pole_1")  # the poles are the bodies from it on, as dm_control's xmat[2:]

    def observe(self, state):
        # position: the cart's, then each pole's frame zz and xz (the cosine and sine of its angle).
        poles = flat_frames(state, "xmat")[:, self._first_pole :, [ZZ, XZ]].flatten(1)
        cart = state["qpos"][:, self._slider : self._slider + 1]
        return torch.cat([cart, poles, state["qvel"]], dim=1)

    def reward(self, state, action):
        cart = state["qpos"][:, self._slider]
        cosines = flat_frames(state, "xmat")[:, self._first_pole :, ZZ]
        if self.sparse:
            return tolerance(cart, self.cart_range) * tolerance(cosines, self.angle_cosine_range).prod(dim=1)
        upright = (cosines + 1) / 2
        centered = (1 + tolerance(cart, margin=self.cart_margin)) / 2
        control = tolerance(action[:, 0], margin=self.control_margin, sigmoid="quadratic", value_at_margin=0.0)
        small_control = (4 + control) / 5
        angular_velocities = state["qvel"][:, 1:]  # every hinge's: all of qvel but the slider's
        small_velocity = (1 + tolerance(angular_velocities, margin=self.angular_velocity_margin).amin(dim=1)) / 2
        return upright.mean(dim=1) * small_control * small_velocity * centered


class CartpoleBalance(Cartpole):
    suite_task, sparse = "balance", False


class CartpoleBalanceSparse(Cartpole):
    suite_task, sparse = "balance_sparse", True


class CartpoleSwingup(Cartpole):
    suite_task, sparse = "swingup", False


class CartpoleSwingupSparse(Cartpole):
    suite_task, sparse = "swingup_sparse", True
