"""What a task is: observations, reward, termination and reset noise, in torch over physics state.

A task reads the physics state as a dict of tensors with MuJoCo's MjData names and layouts,
[N, ...] on the env's device: "qpos" [N, nq], "qvel" [N, nv], "xpos"/"xipos" [N, nbody, 3],
"cinert" [N, nbody, 10], "cvel"/"cfrc_ext" [N, nbody, 6] (rotation first), "qfrc_actuator"
[N, nv]. Their dtype is the backend's (float64 for MuJoCo C, float32 for MuJoCo Warp); the env
casts what a task returns to float32.

As after Gymnasium's `mj_step`, derived fields (xpos, cinert, cvel, ...) describe the last
substep's evaluation, and cfrc_ext is computed after the step (mj_rnePostConstraint). After a
reset they are those of mj_forward at the new state, with cfrc_ext and qfrc_actuator zero.
"""
from __future__ import annotations

import os

import mujoco
import torch

ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")

State = dict  # field name -> tensor [N, ...], see the module docstring


class Task:
    """One task's semantics, following the Gymnasium MuJoCo v5 env of the same name.

    Subclasses set the class attributes and implement `observe` and `reward_and_termination`;
    those with a forward-progress reward also implement `position`.
    """

    xml: str                          # MJCF file under assets/
    frame_skip: int                   # physics substeps per env step
    reset_noise_scale: float
    qvel_noise: str = "uniform"       # "uniform" in ±scale, or "normal" with std scale
    fields: tuple = ("qpos", "qvel")  # physics state the task reads
    max_episode_steps: int = 1000

    def __init__(self, model: mujoco.MjModel, dtype: torch.dtype, device: torch.device):
        self.dt = model.opt.timestep * self.frame_skip
        self.init_qpos = torch.as_tensor(model.qpos0, dtype=dtype, device=device)
        self.nv = model.nv
        self.obs_dim = self.observation_size(model)

    def observation_size(self, model: mujoco.MjModel) -> int:
        raise NotImplementedError

    def observe(self, state: State) -> torch.Tensor:
        """Observation [N, obs_dim] from the physics state."""
        raise NotImplementedError

    def position(self, state: State) -> torch.Tensor | None:
        """The point whose velocity the reward tracks, [N, 2] (x first) or [N, 1]; None if none."""
        return None

    def reward_and_termination(self, state: State, velocity, action: torch.Tensor):
        """reward [N] and terminated [N] bool after a step.

        velocity: [N, k] change of `position` over the step divided by dt (None without one);
        action: [N, act_dim] as given (MuJoCo clamps the control, the costs use it unclamped).
        """
        raise NotImplementedError

    def initial_state(self, num_envs: int, generator: torch.Generator):
        """Reset states: qpos [N, nq] = qpos0 + U(±scale); qvel [N, nv] = 0 + noise per qvel_noise."""
        dtype, device, scale = self.init_qpos.dtype, self.init_qpos.device, self.reset_noise_scale
        qpos = self.init_qpos + scale * (2 * torch.rand((num_envs, self.init_qpos.numel()), generator=generator,
                                                        dtype=dtype, device=device) - 1)
        if self.qvel_noise == "normal":
            qvel = scale * torch.randn((num_envs, self.nv), generator=generator, dtype=dtype, device=device)
        else:
            qvel = scale * (2 * torch.rand((num_envs, self.nv), generator=generator, dtype=dtype, device=device) - 1)
        return qpos, qvel


def load_asset(xml: str) -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_path(os.path.join(ASSETS, xml))


def finite_rows(*tensors: torch.Tensor) -> torch.Tensor:
    """[N] bool: every entry of every [N, ...] tensor is finite."""
    return torch.stack([torch.isfinite(t).flatten(1).all(dim=1) for t in tensors]).all(dim=0)
