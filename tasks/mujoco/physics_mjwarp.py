"""MuJoCo Warp stepping many worlds on a CUDA GPU (or on Warp's CPU device): the GPU physics backend.

The state tensors are zero-copy torch views of Warp's arrays (`wp.to_torch`), so nothing leaves
the device: controls are written in place, worlds are reset through a mask, and on CUDA each
operation is one captured CUDA graph launched on a Warp stream ordered after torch's.

Differences from MuJoCo C, documented in docs/tasks.md: float32 throughout, and MuJoCo Warp has
no PGS solver, so a model asking for PGS (Humanoid) runs Newton instead.
"""
from __future__ import annotations

import copy

import mujoco
import torch


class MjwarpPhysics:
    """num_envs worlds of `model`; `state` holds live [N, ...] float32 views on `device` of `fields`."""

    dtype = torch.float32

    def __init__(self, model: mujoco.MjModel, num_envs: int, device: torch.device, fields):
        import mujoco_warp as mjw
        import warp as wp

        self._mjw, self._wp = mjw, wp
        if model.opt.solver == mujoco.mjtSolver.mjSOL_PGS:
            model = copy.copy(model)
            model.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
        wp.init()
        self._device = wp.device_from_torch(device)
        with wp.ScopedDevice(self._device):
            self._model = mjw.put_model(model)
            self._data = mjw.make_data(model, nworld=num_envs)
        self._post_constraint = "cfrc_ext" in fields
        self.state = {name: wp.to_torch(getattr(self._data, name)) for name in fields}
        self._ctrl = wp.to_torch(self._data.ctrl)
        self._qpos, self._qvel = wp.to_torch(self._data.qpos), wp.to_torch(self._data.qvel)
        self._mask = torch.zeros(num_envs, dtype=torch.bool, device=device)
        self._mask_wp = wp.from_torch(self._mask)
        self._graphs = {}
        if self._device.is_cuda:
            # Graph capture is not allowed on torch's legacy default stream, hence a stream of our own.
            self._stream = wp.Stream(self._device)
            self._torch_stream = wp.stream_to_torch(self._stream)

    def step(self, ctrl: torch.Tensor, nstep: int) -> None:
        """Apply ctrl [N, nu] for nstep substeps in every world."""
        self._ctrl.copy_(ctrl)
        self._run(("step", nstep), lambda: self._substeps(nstep))

    def _substeps(self, nstep: int) -> None:
        for _ in range(nstep):
            self._mjw.step(self._model, self._data)
        if self._post_constraint:
            self._mjw.rne_postconstraint(self._model, self._data)

    def reset(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Worlds where mask [N] is true restart at qpos [N, nq], qvel [N, nv] (reset_data, then forward)."""
        self._mask.copy_(mask)
        self._run("reset", lambda: self._mjw.reset_data(self._model, self._data, reset=self._mask_wp))
        rows = self._mask[:, None]
        self._qpos.copy_(torch.where(rows, qpos, self._qpos))
        self._qvel.copy_(torch.where(rows, qvel, self._qvel))
        # forward() recomputes every world's derived fields. The others' next step recomputes them
        # from their unchanged state anyway, and their warm start is not touched.
        self._run("forward", lambda: self._mjw.forward(self._model, self._data))
        if self._post_constraint:
            # reset_data leaves the last contact forces; MuJoCo's mj_resetData zeroes them.
            self.state["cfrc_ext"].masked_fill_(self._mask[:, None, None], 0.0)

    def _run(self, key, launch) -> None:
        if not self._device.is_cuda:
            launch()
            return
        wp = self._wp
        current = torch.cuda.current_stream(self._torch_stream.device)
        self._torch_stream.wait_stream(current)
        if key not in self._graphs:
            with wp.ScopedCapture(device=self._device, stream=self._stream) as capture:
                launch()
            self._graphs[key] = capture.graph
        wp.capture_launch(self._graphs[key], stream=self._stream)
        current.wait_stream(self._torch_stream)

    def close(self) -> None:
        self._graphs.clear()
        self.state, self._model, self._data = {}, None, None
