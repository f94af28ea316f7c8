"""MuJoCo Warp stepping many worlds on a CUDA GPU (or on Warp's CPU device): the GPU physics backend.

The state tensors are zero-copy torch views of Warp's arrays (`wp.to_torch`), so nothing leaves
the device: controls are written in place, worlds are reset through a mask, and each operation
is one captured graph (on CUDA a CUDA graph launched on a Warp stream ordered after torch's; on
the CPU a graph that Warp replays in C++).

A reset does not run `forward`: the next step's `forward` recomputes every derived field from
qpos and qvel, so a reset only brings up to date the fields the task reads before that step
(the smooth stages of `_STAGES_NEEDED`; a full `forward` only for a force of the constraint
solver, `_FORWARD_NEEDED`), and draws reset noise only for the worlds that restart.

Contacts and constraint rows live in buffers sized at start (Task.nconmax, Task.njmax). MuJoCo
Warp drops what does not fit and raises a per-world overflow flag; `step` gathers the flags of
those buffers inside its graph and raises a TaskError once one is seen (on CUDA a few steps
late, read from a copy that never stalls the stream).

Differences from MuJoCo C, documented in docs/tasks.md: float32 throughout, and MuJoCo Warp has
no PGS solver, so a model asking for PGS (Humanoid) runs Newton instead.
"""

from __future__ import annotations

import copy
import importlib

import mujoco
import mujoco_warp as mjw
import torch
import warp as wp

from ..base import LateRead, TaskError
from .task import Starts, Task, init_warp, physics_layout

# The smooth stages a reset may run, in pipeline order (each needs the ones before it), and how
# many of them a task must run to read a field at the new state. qpos and qvel are written by the
# reset itself; cfrc_ext and qfrc_actuator are zeroed, as after mj_resetData + mj_forward (no
# contact force before a step, and motors give no force at ctrl = 0).
_RESET_STAGES = (mjw.kinematics, mjw.com_pos, mjw.com_vel)
_STAGES_NEEDED = {
    "qpos": 0,
    "qvel": 0,
    "cfrc_ext": 0,
    "qfrc_actuator": 0,
    "xpos": 1,
    "xquat": 1,
    "xmat": 1,
    "xipos": 1,
    "ximat": 1,
    "geom_xpos": 1,
    "site_xpos": 1,
    "subtree_com": 2,
    "cinert": 2,
    "cdof": 2,
    "cvel": 3,
    "cdof_dot": 3,
}
_ZEROED_AT_RESET = ("cfrc_ext", "qfrc_actuator")
# Fields that only the constraint solver gives: a task reading one runs a full forward at a reset
# (nonzero at a start state where a joint sits within its limit's margin, so not zeroed).
_FORWARD_NEEDED = ("qfrc_constraint",)

# The fields of Data that MuJoCo C's mjSTATE_INTEGRATION holds (MuJoCo Warp has no plugin state):
# the next step recomputes every other field from these. Sleeping trees' state is left out, as C
# leaves it out; no task enables sleeping. A field this MuJoCo Warp's Data lacks ("plastic" in
# 3.11) is left out of the state.
_INTEGRATION = (
    "time",
    "qpos",
    "qvel",
    "act",
    "history",
    "plastic",
    "qacc_warmstart",
    "ctrl",
    "qfrc_applied",
    "xfrc_applied",
    "eq_active",
    "mocap_pos",
    "mocap_quat",
    "userdata",
)

# Overflow flags of the buffers make_data sizes -> the Task attribute that sizes them. The
# solver's iteration-limit flags are not overflows and are left alone. MuJoCo Warp exports the
# flags' type from 3.12 on; 3.11 (mjlab 1.6's pin) defines the same bits without exporting them.
_Overflow = getattr(mjw, "OverflowType", None) or importlib.import_module("mujoco_warp._src.types").OverflowType
_OVERFLOW_SIZED_BY = {
    _Overflow.NEFC: "njmax",
    _Overflow.NJMAX_NNZ: "njmax",
    _Overflow.BROADPHASE: "nconmax",
    _Overflow.NARROWPHASE: "nconmax",
    _Overflow.CCD: "nconmax",
}
_BUFFER_OVERFLOWS = int(sum(_OVERFLOW_SIZED_BY))  # distinct bits: their sum is their union


class MjwarpPhysics:
    """num_envs worlds of `model` for `task`; `state` holds live [N, ...] float32 views on `device`
    of the task's fields. seed keys the task's reset noise (Task.add_reset_noise)."""

    dtype = torch.float32
    backend = "mjwarp"

    def __init__(self, model: mujoco.MjModel, num_envs: int, device: torch.device, task: Task, seed: int):
        self._task, self._seed = task, seed
        self._task_name = task.name
        self._task_class, self._task_module = type(task).__name__, type(task).__module__
        fields = task.fields
        self._dm_control = task.stepping == "dm_control"
        unknown = [name for name in fields if name not in _STAGES_NEEDED and name not in _FORWARD_NEEDED]
        if unknown and not self._dm_control:  # dm_control's reset runs a full forward
            raise TaskError(
                f"{self._task_name} reads {', '.join(unknown)}, which the mjwarp backend does not "
                f"recompute after a reset; it can give {', '.join((*_STAGES_NEEDED, *_FORWARD_NEEDED))}"
            )
        if "qfrc_actuator" in fields and (model.actuator_biastype != mujoco.mjtBias.mjBIAS_NONE).any():
            raise TaskError(
                f"{self._task_name} reads qfrc_actuator, which the mjwarp backend zeroes at a reset: "
                f"right only for actuators without bias (motors), and this model has biased ones"
            )
        if model.opt.solver == mujoco.mjtSolver.mjSOL_PGS:
            model = copy.copy(model)
            model.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
        self.layout = physics_layout(model)
        init_warp()
        self._device = wp.device_from_torch(device)
        self._sizes = {"nconmax": task.nconmax, "njmax": task.njmax}
        with wp.ScopedDevice(self._device):
            self._model = _put_model(model, self._task_name)
            # At least one contact a world: before 3.17 MuJoCo Warp's elliptic-cone solver divides
            # by the contact buffer's size on the CPU. A task sizes none only where no geom can
            # collide, so that one is never filled.
            nconmax = max(task.nconmax, 1)
            self._data = mjw.make_data(model, nworld=num_envs, nconmax=nconmax, njmax=task.njmax)
        # Overflows raise a TaskError below; Warp's own printf would print once per world per step.
        self._model.opt.warn_overflow = 0
        if self._dm_control:
            # dm_control's reset: a full forward with actuation disabled, made on a copy of the
            # model that differs only in that flag.
            quiet = copy.copy(model)
            quiet.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_ACTUATION
            with wp.ScopedDevice(self._device):
                without_actuation = _put_model(quiet, self._task_name)
            without_actuation.opt.warn_overflow = 0
            self._stages = (lambda _, data: mjw.forward(without_actuation, data),)
        elif any(name in _FORWARD_NEEDED for name in fields):
            self._stages = (mjw.forward,)
        else:
            self._stages = _RESET_STAGES[: max(_STAGES_NEEDED[name] for name in fields)]
        self._zeroed = [name for name in _ZEROED_AT_RESET if name in fields]
        acceleration = [
            column
            for sensor in range(model.nsensor)
            if model.sensor_needstage[sensor] == mujoco.mjtStage.mjSTAGE_ACC
            for column in range(model.sensor_adr[sensor], model.sensor_adr[sensor] + model.sensor_dim[sensor])
        ]
        self._acc_columns = self._acc_held = None
        if self._dm_control and acceleration:
            with wp.ScopedDevice(self._device):
                self._acc_columns = wp.array(acceleration, dtype=wp.int32)
                self._acc_held = wp.zeros((num_envs, len(acceleration)), dtype=float)
        self._post_constraint = "cfrc_ext" in fields
        self.state = {name: _torch_view(getattr(self._data, name)) for name in fields}
        self._ctrl = _torch_view(self._data.ctrl)
        self._qpos, self._qvel = _torch_view(self._data.qpos), _torch_view(self._data.qvel)
        self._act = _torch_view(self._data.act)
        self._integration = {
            name: _torch_view(getattr(self._data, name)) for name in _INTEGRATION if hasattr(self._data, name)
        }
        self._derived = [name for name in fields if name not in _INTEGRATION]
        self._mask = torch.zeros(num_envs, dtype=torch.bool, device=device)
        self._mask_wp = wp.from_torch(self._mask)
        self._episodes = torch.zeros(num_envs, dtype=torch.int32, device=device)  # random starts: the noise's key
        self._episodes_wp = wp.from_torch(self._episodes)
        self._overflow_seen = torch.zeros(1, dtype=torch.int32, device=device)  # OR of the flags of all steps
        self._overflow_seen_wp = wp.from_torch(self._overflow_seen)
        self._overflow_read = LateRead(self._overflow_seen)
        self._graphs = {}
        self._stream = None  # a Warp stream on CUDA only
        if self._device.is_cuda:
            # Graph capture is not allowed on torch's legacy default stream, hence a stream of our own.
            self._stream = wp.Stream(self._device)
            self._torch_stream = wp.stream_to_torch(self._stream)

    def step(self, ctrl: torch.Tensor, nstep: int) -> None:
        """Apply ctrl [N, nu] for nstep substeps in every world.

        Raises TaskError once a contact or constraint buffer has overflowed (on CUDA, at a later step).
        """
        self._ctrl.copy_(ctrl)
        self._run(("step", nstep), lambda: self._substeps(nstep))
        self._check_overflow()

    def _substeps(self, nstep: int) -> None:
        if self._dm_control:
            # dm_control's step (see Task.stepping): mj_step2 first unless RK4, which cannot be split.
            split = self._model.opt.integrator != mjw.IntegratorType.RK4
            if split:
                mjw.step2(self._model, self._data)
            for _ in range(nstep - split):
                mjw.step(self._model, self._data)
            self._keep_acceleration_sensors(mjw.step1)
        else:
            for _ in range(nstep):
                mjw.step(self._model, self._data)
        if self._post_constraint:
            mjw.rne_postconstraint(self._model, self._data)
        # Gathered here because reset_data clears a restarting world's flags.
        wp.launch(
            _gather_overflow,
            dim=self._data.nworld,
            inputs=[self._data.overflow, _BUFFER_OVERFLOWS],
            outputs=[self._overflow_seen_wp],
        )

    def _keep_acceleration_sensors(self, step1) -> None:
        """step1(model, data) with the acceleration-stage sensors (touch, accelerometer, force)
        left as the last substep made them: MuJoCo Warp's step1 zeroes all of sensordata before
        it computes the position and velocity stages, where MuJoCo C's keeps the others, and
        dm_control observes them after its step."""
        if self._acc_columns is None:
            step1(self._model, self._data)
            return
        sensors, columns, held = self._data.sensordata, self._acc_columns, self._acc_held
        wp.launch(_gather_columns, dim=held.shape, inputs=[sensors, columns], outputs=[held])
        step1(self._model, self._data)
        wp.launch(_scatter_columns, dim=held.shape, inputs=[held, columns], outputs=[sensors])

    def reset(self, mask: torch.Tensor, initial: tuple[torch.Tensor, ...] | None = None) -> None:
        """Worlds where mask [N] is true restart (reset_data, then the stages the task's fields need),
        at initial = (qpos [N, nq], qvel [N, nv]) or (qpos, qvel, act [N, na]), or at random (the
        task's reset noise) if None."""
        self._mask.copy_(mask)
        if initial is None:
            self._run("restart", lambda: (self._reset_data(), self._add_noise(), self._run_stages()))
        else:
            self._run("reset_data", self._reset_data)
            rows = self._mask[:, None]
            self._qpos.copy_(torch.where(rows, initial[0], self._qpos))
            self._qvel.copy_(torch.where(rows, initial[1], self._qvel))
            if len(initial) > 2:
                self._act.copy_(torch.where(rows, initial[2], self._act))
            if self._stages:
                self._run("stages", self._run_stages)
        for name in self._zeroed:
            field = self.state[name]
            field.masked_fill_(self._mask.view(-1, *(1,) * (field.dim() - 1)), 0.0)

    def _reset_data(self) -> None:
        mjw.reset_data(self._model, self._data, reset=self._mask_wp)

    def _add_noise(self) -> None:
        self._task.add_reset_noise(
            self._seed, Starts(self._mask_wp, self._episodes_wp, self._data.qpos, self._data.qvel)
        )

    def _run_stages(self) -> None:
        # Every world runs them (MuJoCo Warp has no world mask); the others' results are never
        # read, since their next step recomputes all derived fields from an unchanged state.
        for stage in self._stages:
            stage(self._model, self._data)

    def state_dict(self) -> dict:
        """{"integration": {Data field: [N, ...]} (_INTEGRATION), "episodes": [N] int32 (the reset
        noise's counters), "derived": {field: [N, ...] float32} (the task's other fields)}, copies
        on the CPU. Raises TaskError if a buffer has overflowed: that physics is not worth keeping."""
        self._raise_if_overflow(int(self._overflow_seen[0]), "")
        return {
            "integration": {name: _host_copy(field) for name, field in self._integration.items()},
            "episodes": _host_copy(self._episodes),
            "derived": {name: _host_copy(self.state[name]) for name in self._derived},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores what `state_dict` returned (checked by the caller to have its shapes and dtypes).

        Copies in place: the captured graphs hold the arrays' addresses. The derived fields are
        stored rather than recomputed: after a step they describe the last substep's evaluation,
        before its integration, which a forward at the state reached would not give (and after a
        reset, only the stages the task needs have run). The next step recomputes them anyway.
        """
        for name, field in self._integration.items():
            field.copy_(state["integration"][name])
        if self._dm_control:  # its next step starts with step2, which reads what step1 made
            self._run("step1", lambda: mjw.step1(self._model, self._data))
        for name in self._derived:
            self.state[name].copy_(state["derived"][name])
        self._episodes.copy_(state["episodes"])

    def _check_overflow(self) -> None:
        seen = self._overflow_read.read()
        if seen is not None:
            self._raise_if_overflow(
                int(seen[0]),
                " (seen a few steps late: on CUDA the check does not stall the step)" if self._device.is_cuda else "",
            )

    def _raise_if_overflow(self, bits: int, note: str) -> None:
        if not bits:
            return
        task, nworld = self._task_class, self._data.nworld
        names = sorted({name for bit, name in _OVERFLOW_SIZED_BY.items() if bits & bit})
        needs = {
            "nconmax": f"the worlds together needed more than {task}.nconmax x num_envs = "
            f"{self._sizes['nconmax']} x {nworld} contacts",
            "njmax": f"a world needed more than {task}.njmax = {self._sizes['njmax']} constraint rows",
        }
        raise TaskError(
            f"MuJoCo Warp ran out of buffer room: {'; '.join(needs[name] for name in names)}{note}. "
            f"It drops what does not fit, so the physics is wrong from there on and the run stops: "
            f"raise {' and '.join(f'{task}.{name}' for name in names)} (class attributes of {self._task_name}, "
            f"in {self._task_module})"
        )

    def _run(self, key, launch) -> None:
        """Runs launch() (Warp work on this env's device) as graph `key`, captured at its first use.

        On CUDA the graph runs on a Warp stream ordered after torch's current stream both ways; on
        the CPU, Warp replays it in C++ (same results as launching, minus the Python per launch).
        """
        cuda = self._device.is_cuda
        if cuda:
            current = torch.cuda.current_stream(self._torch_stream.device)
            self._torch_stream.wait_stream(current)
        if key not in self._graphs:
            # MuJoCo Warp launches on the current device and stream: they must be the captured ones
            # (the default device is a GPU on a machine with one, even for an env on the CPU).
            with (
                wp.ScopedDevice(self._device),
                wp.ScopedStream(self._stream, sync_enter=False),
                wp.ScopedCapture(device=self._device, stream=self._stream) as capture,
            ):
                launch()
            self._graphs[key] = capture.graph
        wp.capture_launch(self._graphs[key], stream=self._stream)
        if cuda:
            current.wait_stream(self._torch_stream)

    def close(self) -> None:
        self._graphs.clear()
        self.state, self._model, self._data = {}, None, None


def _torch_view(array: wp.array) -> torch.Tensor:
    """wp.to_torch(array), a zero-copy view; an empty array (no actuator activations, no sensors)
    as an empty tensor of its shape: Warp passes a CPU array through numpy's array interface,
    which numpy before 2.0 refuses for a size-0 array."""
    if array.size:
        return wp.to_torch(array)
    scalar = getattr(array.dtype, "_wp_scalar_type_", array.dtype)  # a vector's or matrix's element
    shape = (*array.shape, *getattr(array.dtype, "_shape_", ()))
    return torch.empty(shape, dtype=wp.dtype_to_torch(scalar), device=wp.device_to_torch(array.device))


def _put_model(model: mujoco.MjModel, task_name: str):
    """mjw.put_model, with what this MuJoCo Warp cannot step refused in one line: 3.11 (mjlab 1.6's
    pin) lacks the noslip solver (the dog's) and multi-CCD with geom margins (the Shadow hand's)."""
    try:
        return mjw.put_model(model)
    except NotImplementedError as error:
        raise TaskError(
            f"{task_name}: MuJoCo Warp {mjw.__version__} cannot step this model ({error}); use "
            f"task.backend=mujoco (MuJoCo C) or a newer mujoco-warp (4.0 steps every pql task)"
        ) from None


def _host_copy(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu", copy=True)


@wp.kernel
def _gather_overflow(overflow: wp.array(dtype=wp.int32), buffer_bits: wp.int32, seen: wp.array(dtype=wp.int32)):
    world = wp.tid()
    bits = overflow[world] & buffer_bits
    if bits != 0:
        wp.atomic_or(seen, 0, bits)


@wp.kernel
def _gather_columns(source: wp.array2d(dtype=float), columns: wp.array(dtype=wp.int32), out: wp.array2d(dtype=float)):
    world, j = wp.tid()
    out[world, j] = source[world, columns[j]]


@wp.kernel
def _scatter_columns(values: wp.array2d(dtype=float), columns: wp.array(dtype=wp.int32), out: wp.array2d(dtype=float)):
    world, j = wp.tid()
    out[world, columns[j]] = values[world, j]
