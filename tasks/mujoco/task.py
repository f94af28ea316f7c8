"""What a task is: observations, reward, termination and reset noise, in torch over physics state.

A task reads the physics state as a dict of tensors with MuJoCo's MjData names and layouts,
[N, ...] on the env's device: "qpos" [N, nq], "qvel" [N, nv], "xpos"/"xipos" [N, nbody, 3],
"cinert" [N, nbody, 10], "cvel"/"cfrc_ext" [N, nbody, 6] (rotation first), "qfrc_actuator"
[N, nv]. Their dtype is the backend's (float64 for MuJoCo C, float32 for MuJoCo Warp); the env
casts what a task returns to float32.

As after Gymnasium's `mj_step`, derived fields (xpos, cinert, cvel, ...) describe the last
substep's evaluation, and cfrc_ext is computed after the step (mj_rnePostConstraint). After a
reset they are those of mj_forward at the new state, with cfrc_ext and qfrc_actuator zero.

The reset noise is the one piece of task logic written as a Warp kernel rather than in torch:
both backends launch it, and it draws only for the envs that restart, with no host round trip
on CUDA (see `Task.add_reset_noise`).
"""

from __future__ import annotations

import os
import sys
from typing import Any, NamedTuple

import mujoco
import torch
import warp as wp

from ..base import Mirror, PolicyInterface, TaskError

ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")

State = dict  # field name -> tensor [N, ...], see the module docstring


class Task:
    """One task's semantics, following the Gymnasium MuJoCo v5 env of the same name.

    Subclasses set the class attributes and implement `observe` and `reward_and_termination`;
    those with a forward-progress reward also implement `position`.
    """

    xml: str  # MJCF file under assets/
    frame_skip: int  # physics substeps per env step
    reset_noise_scale: float
    qvel_noise: str = "uniform"  # "uniform" in ±scale, or "normal" with std scale
    fields: tuple = ("qpos", "qvel")  # physics state the task reads
    max_episode_steps: int = 1000
    # MuJoCo Warp's preallocated buffers (make_data): contacts per world (pooled over all worlds,
    # so naconmax = nconmax * num_envs) and constraint rows per world (a hard limit per world).
    # Each task sets them to about twice the most that MuJoCo C reached in 96,000 steps of
    # random and bang-bang actions without termination (fallen robots included), rounded up to
    # Warp's size ladder; an overflow stops the run with a TaskError naming the one to raise.
    nconmax: int
    njmax: int
    # The info entries whose values at an episode's last step score the episode beside its return
    # (tasks.base.BatchedEnv.episode_metrics); evaluations and the training log report their means.
    episode_metrics: tuple[str, ...] = ()
    # The off-policy learners' settings this task trains best with, measured per task: they fill
    # algo.gamma and algo.mirror where the config leaves them null (pql/config/build.py).
    discount: float = 0.99
    mirrored_batches: bool = False
    # How an env step runs the physics. "mj_step": nstep mj_step calls, as Gymnasium does, derived
    # fields describing the last substep's evaluation. "dm_control": dm_control's step (mj_step2,
    # nstep - 1 mj_step, then mj_step1: position- and velocity-dependent fields, sensors included,
    # describe the state reached), and a reset's mj_forward runs with actuation disabled.
    stepping: str = "mj_step"
    # Whether an episode can end before its time limit; a task that cannot may repeat actions.
    can_terminate: bool = True
    # The task's mirror symmetry (tasks.base.Mirror), or None.
    mirror: Mirror | None = None
    # The policy's observation in parts, (name, columns) in order, where the task names them
    # (tasks.base.PolicyInterface; a scale in a name multiplies what the part measures).
    obs_parts: tuple[tuple[str, int], ...] = ()

    def __init__(self, model: mujoco.MjModel, dtype: torch.dtype, device: torch.device):
        if self.qvel_noise not in ("uniform", "normal"):
            raise TaskError(f"{type(self).__name__}.qvel_noise must be 'uniform' or 'normal', got {self.qvel_noise!r}")
        self.dt = model.opt.timestep * self.frame_skip
        self.obs_dim = self.observation_size(model)
        self.qpos0 = torch.as_tensor(model.qpos0, dtype=dtype, device=device)  # Gymnasium's init_qpos

    @property
    def name(self) -> str:
        """The task's name in tasks.make and in a saved env state."""
        return type(self).__name__

    @classmethod
    def load_model(cls) -> mujoco.MjModel:
        """The task's MuJoCo model: its MJCF file under assets/."""
        return load_asset(cls.xml)

    def observation_size(self, model: mujoco.MjModel) -> int:
        raise NotImplementedError

    def interface(self, model: mujoco.MjModel) -> PolicyInterface:
        """What a deployment reads of the observations and actions: the parts, and where each
        action drives one actuator on a joint, those joints in the action's order."""
        low, _ = self.action_range(model)
        joint = mujoco.mjtTrn.mjTRN_JOINT
        on_joints = model.nu == low.shape[0] and all(t == joint for t in model.actuator_trntype)
        joints = (
            tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in model.actuator_trnid[:, 0])
            if on_joints
            else ()
        )
        return PolicyInterface(self.obs_parts, joints)

    def action_range(self, model: mujoco.MjModel) -> tuple[torch.Tensor, torch.Tensor]:
        """The action box (low, high) [act_dim] float: the actuators' control range, which `control`
        passes on as it is."""
        low, high = torch.as_tensor(model.actuator_ctrlrange, dtype=torch.float32).T
        return low, high

    # A task may keep state per env beyond the physics (a goal, a count of successes): it allocates
    # it in `start`, renews it in `restart`, may change it in `control` and `reward_and_termination`,
    # and saves it in `state_dict`. The Gymnasium tasks keep none.

    def start(self, num_envs: int, seed: int) -> None:
        """Allocate what the task keeps for each of num_envs envs, whose draws `seed` keys (once, before
        the first restart)."""

    def draw_starts(self, mask: torch.Tensor) -> tuple[torch.Tensor, ...] | None:
        """Random starts (qpos [N, nq], qvel [N, nv], act [N, na]) for the envs where mask [N] is
        true (other rows unused), or None: the physics draws them with `add_reset_noise`, the
        Gymnasium tasks' way."""
        return None

    def restart(self, mask: torch.Tensor, state: State) -> None:
        """The envs where mask [N] is true have started new episodes at the physics `state`."""

    def control(self, action: torch.Tensor, state: State) -> torch.Tensor:
        """The actuators' controls [N, nu] for action [N, act_dim] (as given) at the physics `state`
        the last step or reset reached (a controller's input): the action itself."""
        return action

    def state_dict(self) -> dict:
        """What the task keeps per env, copies on the CPU (see the env's state_dict); {} if nothing."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned (checked by the env to have its shapes and dtypes)."""

    def observe(self, state: State) -> torch.Tensor:
        """Observation [N, obs_dim] from the physics state."""
        raise NotImplementedError

    def position(self, state: State) -> torch.Tensor | None:
        """The point whose velocity the reward tracks, [N, 2] (x first) or [N, 1]; None if none."""
        return None

    def reward_and_termination(self, state: State, velocity, action: torch.Tensor):
        """reward [N], terminated [N] bool and info after a step.

        velocity: [N, k] change of `position` over the step divided by dt (None without one);
        action: [N, act_dim] as given (MuJoCo clamps the control, the costs use it unclamped).
        info: Gymnasium's per-step info entries, [N] each, under its names: the reward terms as
        signed addends of the reward ("reward_ctrl" is minus the control cost) and the positions;
        the env adds the velocities. A task with goals draws the next one here for the envs that
        reached theirs: the env observes after this call.
        """
        raise NotImplementedError

    def add_reset_noise(self, seed: int, starts: Starts):
        """Perturbs MuJoCo's reset state (qpos0, zero velocity) into a random start where
        starts.restart is true: U(±scale) added to qpos, and N(0, scale²) or U(±scale) (per
        qvel_noise) to qvel. One launch, asynchronous, other rows untouched.
        Env i's k-th random start is drawn from a stream keyed by (seed, i, k) alone, so a run
        repeats for a seed whichever envs finish when, and no draw is made for an env that
        does not restart. Tasks that draw more than noise at a start (a goal: Reacher, Pusher)
        override this with a start kernel of their own (`start_kernel`, `launch_start`).
        """
        noise = _Noise()
        noise.scale, noise.normal_qvel = float(self.reset_noise_scale), int(self.qvel_noise == "normal")
        launch_start(_RESET_NOISE, seed, starts, noise)


class Starts(NamedTuple):
    """What a start kernel draws into, on one Warp device: restart [N] bool, the envs that start
    anew; episodes [N] int32, the random starts each env has had (counted up by `start_stream`);
    qpos [N, nq] and qvel [N, nv], float32 or float64, holding MuJoCo's reset state (qpos0, zero
    velocity) in the rows that restart."""

    restart: wp.array
    episodes: wp.array
    qpos: wp.array
    qvel: wp.array


def start_kernel(draw):
    """The start kernel of `draw`, a wp.func(state: uint32, params, env: int32, qpos, qvel) that
    turns env's rows of qpos [N, nq] and qvel [N, nv] (MuJoCo's reset state) into a random start,
    drawing from `state`: the kernel runs it for each env that restarts, on the stream keyed by
    (seed, env, that env's count of starts). One kernel (a Warp module) per draw."""

    @wp.kernel(module="unique")
    def start(
        seed: wp.int32,
        params: Any,
        restart: wp.array(dtype=wp.bool),
        episodes: wp.array(dtype=wp.int32),
        qpos: wp.array2d(dtype=Any),
        qvel: wp.array2d(dtype=Any),
    ):
        env = wp.tid()
        if restart[env]:
            draw(start_stream(seed, env, episodes), params, env, qpos, qvel)

    return start


def launch_start(kernel, seed: int, starts: Starts, params) -> None:
    """Launch a start kernel (`start_kernel`) with its draw's `params` (a wp.struct) over every env,
    on the arrays' device: asynchronous, the rows that do not restart untouched."""
    wp.launch(
        kernel,
        dim=starts.restart.shape[0],
        device=starts.qpos.device,
        inputs=[warp_seed(seed), params, starts.restart],
        outputs=[starts.episodes, starts.qpos, starts.qvel],
    )


@wp.func
def start_stream(seed: wp.int32, env: wp.int32, episodes: wp.array(dtype=wp.int32)) -> wp.uint32:
    """Counts env's random start in episodes and returns the random stream keyed by (seed, env,
    that start): the first thing every reset kernel does for an env that restarts."""
    episode = episodes[env] + 1
    episodes[env] = episode
    # rand_init(s, o) is a PCG hash (a bijection of uint32) of s + hash(o): distinct episodes get
    # distinct keys, and distinct envs distinct starting states under one key.
    return wp.rand_init(wp.int32(wp.rand_init(seed, episode)), env)


@wp.struct
class _Noise:
    scale: float
    normal_qvel: wp.int32  # 1: N(0, scale²) for qvel, 0: U(±scale)


@wp.func
def _reset_noise(
    state: wp.uint32, noise: _Noise, env: wp.int32, qpos: wp.array2d(dtype=Any), qvel: wp.array2d(dtype=Any)
):
    for j in range(qpos.shape[1]):
        qpos[env, j] = qpos[env, j] + qpos.dtype(noise.scale * (2.0 * wp.randf(state) - 1.0))
    for j in range(qvel.shape[1]):
        if noise.normal_qvel:
            draw = wp.randn(state)
        else:
            draw = 2.0 * wp.randf(state) - 1.0
        qvel[env, j] = qvel[env, j] + qvel.dtype(noise.scale * draw)


_RESET_NOISE = start_kernel(_reset_noise)


class EnvDraws:
    """Uniform draws in [0, 1) per env, `width` numbers a draw, for the envs a mask picks: what a task
    turns into a goal, a command or a start of its own. Env i's k-th draw comes from a stream keyed
    by (seed ^ stream, i, k) alone, so it repeats whichever envs draw when and however many envs
    there are, on either backend; `stream` keeps a task's kinds of draws, and the reset noise's
    streams, apart. One Warp launch on the device of `values`, ordered after torch's work there.

    values: [N, width] float32, each env's latest draw (0 before its first); counts: [N] int32, the
    draws each env has had. Both are updated in place (the kernel holds their addresses) and are
    what `state_dict` saves.
    """

    def __init__(self, num_envs: int, width: int, seed: int, stream: int, device: torch.device):
        init_warp()
        self.values = torch.zeros(num_envs, width, dtype=torch.float32, device=device)
        self.counts = torch.zeros(num_envs, dtype=torch.int32, device=device)
        self._mask = torch.zeros(num_envs, dtype=torch.bool, device=device)
        self._seed = warp_seed(seed ^ stream)
        self._args = [wp.from_torch(t) for t in (self._mask, self.counts, self.values)]
        self._device = wp.device_from_torch(device)

    def draw(self, mask: torch.Tensor) -> torch.Tensor:
        """A new draw for each env where mask [N] bool is true; returns `values`."""
        self._mask.copy_(mask)
        stream = None
        if self._device.is_cuda:
            stream = wp.stream_from_torch(torch.cuda.current_stream(self._mask.device))
        wp.launch(
            _uniform_rows,
            dim=self._mask.shape[0],
            inputs=[self._seed, self._args[0]],
            outputs=self._args[1:],
            device=self._device,
            stream=stream,
        )
        return self.values

    def state_dict(self) -> dict:
        return {"values": self.values.to("cpu", copy=True), "counts": self.counts.to("cpu", copy=True)}

    def load_state_dict(self, state: dict) -> None:
        self.values.copy_(state["values"])
        self.counts.copy_(state["counts"])


@wp.kernel
def _uniform_rows(
    seed: wp.int32,
    draw: wp.array(dtype=wp.bool),
    counts: wp.array(dtype=wp.int32),
    values: wp.array2d(dtype=wp.float32),
):
    env = wp.tid()
    if not draw[env]:
        return
    state = start_stream(seed, env, counts)
    for j in range(values.shape[1]):
        values[env, j] = wp.randf(state)


def warp_seed(seed: int) -> int:
    """seed wrapped into int32, the seed type of Warp's generator."""
    return (int(seed) + 2**31) % 2**32 - 2**31


def init_warp() -> None:
    """Initialise Warp in this process (idempotent), quietly: its greeting and a line per kernel
    module loaded would fill the console of every run, and on a machine without an NVIDIA driver
    its native library warns on stderr about the missing driver, which a CPU run does not need."""
    wp.config.log_level = wp.LOG_WARNING
    if torch.cuda.is_available():
        wp.init()
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)  # the warning is written by C code, to file descriptor 2
        wp.init()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


# Gymnasium's half_cheetah.xml scales its masses to a total of 14 with the compiler attribute
# settotalmass, which MuJoCo 4 deprecates with a warning on every load. The copy here leaves the
# attribute out and the scaling is done on the compiled model, the route MuJoCo's warning names:
# the same model to the last bit (tests/test_tasks_parity.py).
TOTAL_MASS = {"half_cheetah.xml": 14.0}


def load_asset(xml: str) -> mujoco.MjModel:
    model = mujoco.MjModel.from_xml_path(os.path.join(ASSETS, xml))
    if xml in TOTAL_MASS:
        mujoco.mj_setTotalmass(model, TOTAL_MASS[xml])
        mujoco.mj_setConst(model, mujoco.MjData(model))
    return model


def physics_layout(model: mujoco.MjModel) -> dict[str, int]:
    """The sizes of `model` that shape a saved physics state (recorded in it and checked at a load)."""
    return {name: int(getattr(model, name)) for name in ("nq", "nv", "na", "nu", "nbody", "nmocap", "neq", "nuserdata")}


def body_id(model: mujoco.MjModel, name: str) -> int:
    """The id of the body called `name` in `model` (its row in xpos)."""
    index = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)
    if index < 0:
        raise TaskError(f"the model has no body named {name!r}")
    return index


def planar_position(qpos: torch.Tensor) -> dict:
    """Gymnasium's position entries of a body moving freely in the plane: its root's x, y and
    distance from the origin, from qpos [N, nq]."""
    return {"x_position": qpos[:, 0], "y_position": qpos[:, 1], "distance_from_origin": qpos[:, :2].norm(dim=1)}


def finite_rows(*tensors: torch.Tensor) -> torch.Tensor:
    """[N] bool: every entry of every [N, ...] tensor is finite."""
    return torch.stack([torch.isfinite(t).flatten(1).all(dim=1) for t in tensors]).all(dim=0)
