"""MuJoCo's C engine stepping many worlds on a thread pool: the physics backend for machines without CUDA.

One MjData per world, as Gymnasium keeps, so a world's trajectory is bit-identical to
Gymnasium's for the same state and controls. `mj_step` and `mj_rnePostConstraint` release the
GIL, so the pool's threads run the C engine in parallel; the Python left per world per step is
a control write and two calls. (mujoco.batch steps faster but cannot run mj_rnePostConstraint
after the step, which Gymnasium's contact forces need.)
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import mujoco
import numpy as np
import torch


class MujocoPhysics:
    """num_envs worlds of `model`; `state` holds live [N, ...] float64 tensors on `device` of `fields`.

    The state tensors are overwritten in place by `step` and `reset`.
    """

    dtype = torch.float64

    def __init__(self, model: mujoco.MjModel, num_envs: int, device: torch.device, fields,
                 num_threads: int | None = None):
        self.model = model
        self.num_envs = num_envs
        self._datas = [mujoco.MjData(model) for _ in range(num_envs)]
        self._ctrl = [d.ctrl for d in self._datas]
        self._post_constraint = "cfrc_ext" in fields
        # np.stack over views kept from the start gathers a field of every world in one C loop.
        self._views = {name: [getattr(d, name) for d in self._datas] for name in fields}
        self._host = {name: np.stack(views) for name, views in self._views.items()}
        on_cpu = device.type == "cpu"
        self.state = {name: torch.from_numpy(a) if on_cpu else torch.from_numpy(a).to(device)
                      for name, a in self._host.items()}
        num_threads = num_threads or len(os.sched_getaffinity(0))
        self._chunks = [c for c in np.array_split(np.arange(num_envs), num_threads) if len(c)]
        self._pool = ThreadPoolExecutor(len(self._chunks) - 1) if len(self._chunks) > 1 else None

    def step(self, ctrl: torch.Tensor, nstep: int) -> None:
        """Apply ctrl [N, nu] for nstep substeps in every world."""
        ctrl = ctrl.detach().to("cpu", torch.float64).numpy()
        # The caller's thread takes the last chunk rather than waiting idle.
        futures = [self._pool.submit(self._step_worlds, c[0], c[-1] + 1, ctrl, nstep) for c in self._chunks[:-1]]
        last = self._chunks[-1]
        self._step_worlds(last[0], last[-1] + 1, ctrl, nstep)
        for f in futures:
            f.result()
        for name, views in self._views.items():
            np.stack(views, out=self._host[name])
        self._publish()

    def _step_worlds(self, start: int, stop: int, ctrl: np.ndarray, nstep: int) -> None:
        model, step, post = self.model, mujoco.mj_step, mujoco.mj_rnePostConstraint
        for data, data_ctrl, u in zip(self._datas[start:stop], self._ctrl[start:stop], ctrl[start:stop]):
            data_ctrl[:] = u
            step(model, data, nstep)
            if self._post_constraint:
                post(model, data)

    def reset(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Worlds where mask [N] is true restart at qpos [N, nq], qvel [N, nv] (mj_resetData, then mj_forward)."""
        ids = mask.nonzero().flatten().tolist()
        if not ids:
            return
        qpos = qpos.detach().to("cpu", torch.float64).numpy()
        qvel = qvel.detach().to("cpu", torch.float64).numpy()
        for i in ids:
            data = self._datas[i]
            mujoco.mj_resetData(self.model, data)
            data.qpos[:] = qpos[i]
            data.qvel[:] = qvel[i]
            mujoco.mj_forward(self.model, data)
            for name, views in self._views.items():
                self._host[name][i] = views[i]
        self._publish()

    def _publish(self) -> None:
        if self.state["qpos"].device.type != "cpu":
            for name, host in self._host.items():
                self.state[name].copy_(torch.from_numpy(host))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        self._datas, self._views, self._ctrl = [], {}, []
