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
import warp as wp

from .task import Starts, Task, init_warp, physics_layout

# Every part of MjData that mj_step reads rather than recomputes (time, qpos, qvel, act,
# qacc_warmstart, ctrl, applied forces, mocap, ...): restored, the next steps are the same to the
# bit (tests/test_tasks_state.py).
_INTEGRATION = mujoco.mjtState.mjSTATE_INTEGRATION


class MujocoPhysics:
    """num_envs worlds of `model` for `task`; `state` holds live [N, ...] float64 tensors on
    `device` of the task's fields, overwritten in place by `step` and `reset`.

    seed keys the task's reset noise (Task.add_reset_noise, run on Warp's CPU device).
    """

    dtype = torch.float64
    backend = "mujoco"

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        device: torch.device,
        task: Task,
        seed: int,
        num_threads: int | None = None,
    ):
        self.model = model
        self.num_envs = num_envs
        self.layout = physics_layout(model)
        fields = task.fields
        self._derived = [name for name in fields if name not in ("qpos", "qvel")]  # qpos, qvel: in _INTEGRATION
        self._datas = [mujoco.MjData(model) for _ in range(num_envs)]
        self._ctrl = [d.ctrl for d in self._datas]
        self._post_constraint = "cfrc_ext" in fields
        self._dm_control = task.stepping == "dm_control"
        self._rk4 = model.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4
        # The reset noise is drawn into host buffers by a graph of the task's kernel: Warp replays it
        # in C++ in about 1 us, where a launch from Python takes about 30 us.
        init_warp()
        self._restart = torch.zeros(num_envs, dtype=torch.bool)
        self._qpos0 = torch.from_numpy(model.qpos0.copy())
        self._start_qpos = torch.zeros(num_envs, model.nq, dtype=torch.float64)
        self._start_qvel = torch.zeros(num_envs, model.nv, dtype=torch.float64)
        self._episodes = torch.zeros(num_envs, dtype=torch.int32)  # each env's random starts (the noise's key)
        self._noise_args = [
            wp.from_torch(t) for t in (self._restart, self._episodes, self._start_qpos, self._start_qvel)
        ]
        with wp.ScopedCapture(device="cpu") as capture:
            task.add_reset_noise(seed, Starts(*self._noise_args))
        self._add_reset_noise = capture.graph
        # np.stack over views kept from the start gathers a field of every world in one C loop.
        self._views = {name: [getattr(d, name) for d in self._datas] for name in fields}
        self._host = {name: np.stack(views) for name, views in self._views.items()}
        on_cpu = device.type == "cpu"
        self.state = {
            name: torch.from_numpy(a) if on_cpu else torch.from_numpy(a).to(device) for name, a in self._host.items()
        }
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
        worlds = zip(self._datas[start:stop], self._ctrl[start:stop], ctrl[start:stop])
        if self._dm_control:
            # dm_control's step: the first substep finishes with mj_step2 from the last mj_step1
            # (or the reset's mj_forward), the last one is followed by mj_step1. RK4 cannot be split.
            split = not self._rk4
            for data, data_ctrl, u in worlds:
                data_ctrl[:] = u
                if split:
                    mujoco.mj_step2(model, data)
                if nstep > split:
                    step(model, data, nstep - split)
                mujoco.mj_step1(model, data)
            return
        for data, data_ctrl, u in worlds:
            data_ctrl[:] = u
            step(model, data, nstep)
            if self._post_constraint:
                post(model, data)

    def reset(self, mask: torch.Tensor, initial: tuple[torch.Tensor, ...] | None = None) -> None:
        """Worlds where mask [N] is true restart (mj_resetData, then mj_forward, as Gymnasium does;
        with actuation disabled for dm_control's stepping), at initial = (qpos [N, nq], qvel [N, nv])
        or (qpos, qvel, act [N, na]), or at random (the task's reset noise) if None."""
        mask = mask.cpu()  # this backend steps on the host anyway
        ids = mask.nonzero().flatten().tolist()
        if not ids:
            return
        if initial is None:
            self._restart.copy_(mask)
            self._start_qpos[ids] = self._qpos0
            self._start_qvel[ids] = 0.0
            wp.capture_launch(self._add_reset_noise)
            qpos, qvel, act = self._start_qpos.numpy(), self._start_qvel.numpy(), None
        else:
            qpos, qvel, *given = (t.detach().to("cpu", torch.float64).numpy() for t in initial)
            act = given[0] if given else None
        saved_flags = self.model.opt.disableflags
        if self._dm_control:  # dm_control's reset: no actuation before the first control is set
            self.model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_ACTUATION
        try:
            for i in ids:
                data = self._datas[i]
                mujoco.mj_resetData(self.model, data)
                data.qpos[:] = qpos[i]
                data.qvel[:] = qvel[i]
                if act is not None:
                    data.act[:] = act[i]
                mujoco.mj_forward(self.model, data)
                for name, views in self._views.items():
                    self._host[name][i] = views[i]
        finally:
            self.model.opt.disableflags = saved_flags
        self._publish()

    def state_dict(self) -> dict:
        """{"integration": [N, mj_stateSize] float64 (mjSTATE_INTEGRATION), "episodes": [N] int32
        (the reset noise's counters), "derived": {field: [N, ...] float64} (the task's other fields)},
        copies on the CPU."""
        integration = np.empty((self.num_envs, mujoco.mj_stateSize(self.model, _INTEGRATION)))
        for data, row in zip(self._datas, integration):
            mujoco.mj_getState(self.model, data, row, _INTEGRATION)
        return {
            "integration": torch.from_numpy(integration),
            "episodes": self._episodes.clone(),
            "derived": {name: torch.from_numpy(self._host[name].copy()) for name in self._derived},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores what `state_dict` returned (checked by the caller to have its shapes and dtypes)."""
        integration = np.ascontiguousarray(state["integration"].numpy())
        derived = {name: state["derived"][name].numpy() for name in self._derived}
        for i, data in enumerate(self._datas):
            mujoco.mj_setState(self.model, data, integration[i], _INTEGRATION)
            if self._dm_control:  # its next step starts with mj_step2, which reads what mj_step1 made
                mujoco.mj_step1(self.model, data)
            # Stored, not recomputed: after mj_step they describe the last substep's evaluation,
            # before its integration (cfrc_ext its constraint forces), which mj_forward at the
            # state reached would not give. The next mj_step recomputes them before reading them.
            for name in self._derived:
                self._views[name][i][...] = derived[name][i]
        self._episodes.copy_(state["episodes"])  # in place: the noise graph holds its address
        for name, views in self._views.items():
            np.stack(views, out=self._host[name])
        self._publish()

    def _publish(self) -> None:
        if self.state["qpos"].device.type != "cpu":
            for name, host in self._host.items():
                self.state[name].copy_(torch.from_numpy(host))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        self._datas, self._views, self._ctrl = [], {}, []
