"""What a DeepMind Control Suite task is in pql: dm_control's task, observed and rewarded in batch.

A `DmcTask` is one task of `dm_control.suite` (installed with pql) on pql's physics backends:

* **Model**: the one dm_control builds for the task (its XML, its common assets, the dog's meshes),
  loaded from the installed package, with the constant edits the task's `initialize_episode`
  makes (finger's hinge damping): nothing is copied into pql.
* **Stepping**: dm_control's (`Task.stepping = "dm_control"`): its control timestep in physics
  substeps, mj_step2 ... mj_step1, so that positions, velocities and sensors describe the state
  reached; 1,000-step episodes, truncated, never terminated.
* **Observation and reward**: written here per domain in torch over all envs, following the
  task's `get_observation` (its keys in their order, flattened) and `get_reward`
  (`tasks.dmc.rewards.tolerance`).
* **Random starts**: drawn by the task's own `initialize_episode` on a scratch dm_control Physics
  of the task, one env at a time on the host, with a `RandomState` keyed by (seed, env, the env's
  random starts so far): the reset distribution is dm_control's to the bit, rejection of
  penetrating starts and cheetah's 200 settling steps included, and a run repeats for a seed
  whichever envs restart when. Where a task places a visual target by editing its model (reacher,
  finger, fish, swimmer, manipulator), the target is kept per env as the task's state
  (`episode_values`) and read from there, since all envs share one model.
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import logging
import os
from typing import Any

import mujoco
import numpy as np
import torch

from ..base import TaskError
from ..mujoco.task import State, Task


class DmcTask(Task):
    """One task of dm_control.suite. Subclasses set `domain`, `suite_task`, the fields they read
    and the Warp buffer sizes, and implement `observe` and `reward`; a task that places targets
    by editing its model implements `episode_values`."""

    domain: str  # the dm_control.suite module
    suite_task: str  # the task's name in it
    stepping = "dm_control"
    can_terminate = False
    frame_skip = 0  # set per instance from dm_control's control timestep
    reset_noise_scale = 0.0  # starts come from draw_starts, never from the physics' noise kernel

    @property
    def name(self) -> str:
        return f"dmc/{self.domain}-{self.suite_task}"

    @classmethod
    def load_suite(cls) -> Any:
        """dm_control's environment of the task (a control.Environment), on its own Physics."""
        suite = _import_suite()
        known: list[str] = []
        # cheetah's and others' XML scale masses with `settotalmass`, which MuJoCo 4 deprecates
        # with a warning at every load: the same model, so that warning is dropped; any other is raised.
        mujoco.set_mju_user_warning(known.append)
        try:
            env = suite.load(cls.domain, cls.suite_task, task_kwargs={"random": 0})
        finally:
            mujoco.set_mju_user_warning(None)
        unexpected = [m for m in known if "settotalmass" not in m]
        if unexpected:
            raise TaskError(f"MuJoCo warned while loading {cls.domain}'s model: {'; '.join(unexpected)}")
        return env

    @classmethod
    def load_model(cls) -> mujoco.MjModel:
        env = cls.load_suite()
        env.reset()  # initialize_episode's constant edits of the model
        # Loading takes up to half a second (dog): the task built next from this model takes this
        # environment as its scratch Physics instead of loading its own.
        _SPARE_SUITES[cls] = env
        return copy.copy(env.physics.model.ptr)

    def __init__(self, model: mujoco.MjModel, dtype: torch.dtype, device: torch.device):
        # The scratch Physics that draws the random starts; a used one serves as well as a new one,
        # since each start draws with its own RandomState.
        self._suite = _SPARE_SUITES.pop(type(self), None) or self.load_suite()
        self.frame_skip = control_substeps(self._suite)
        # time limit / control timestep: dm_control keeps it as it counts, with no public reader
        self.max_episode_steps = int(self._suite._step_limit)
        self.model = model
        self.dtype, self.device = dtype, device
        super().__init__(model, dtype, device)

    def observation_size(self, model: mujoco.MjModel) -> int:
        self._suite.reset()
        return sum(int(np.size(v)) for v in self._suite.task.get_observation(self._suite.physics).values())

    # -- what subclasses implement ----------------------------------------------------------------

    def observe(self, state: State) -> torch.Tensor:
        raise NotImplementedError

    def reward(self, state: State, action: torch.Tensor) -> torch.Tensor:
        """[N] in [0, 1]: the task's get_reward; action [N, nu] is the control as given."""
        raise NotImplementedError

    def episode_values(self, physics: Any) -> dict[str, np.ndarray]:
        """What initialize_episode placed in the model of dm_control's `physics` for this episode
        (a target's position), by name, each a fixed-shape array; {} for a task that places none."""
        return {}

    # -- the parts of Task that every suite task shares ---------------------------------------------

    def reward_and_termination(self, state, velocity, action):
        reward = self.reward(state, action)
        return reward, torch.zeros(reward.shape, dtype=torch.bool, device=reward.device), {}

    def start(self, num_envs: int, seed: int) -> None:
        self._seed = int(seed) % 2**32
        self._episodes = np.zeros(num_envs, dtype=np.int64)
        self._suite.reset()
        shapes = {name: np.shape(v) for name, v in self.episode_values(self._suite.physics).items()}
        self.values = {
            name: torch.zeros(num_envs, *shape, dtype=self.dtype, device=self.device) for name, shape in shapes.items()
        }
        self._drawn: dict[str, torch.Tensor] = {}

    def draw_starts(self, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # One host read per reset: dm_control's episodes all last 1,000 steps, so a run resets
        # rarely, and its starts are made on the host anyway.
        ids = mask.cpu().nonzero().flatten().tolist()
        num_envs, model = len(self._episodes), self.model
        qpos = np.zeros((num_envs, model.nq))
        qvel = np.zeros((num_envs, model.nv))
        act = np.zeros((num_envs, model.na))  # dog's stand draws its muscles' activations too
        drawn = {name: np.zeros(tuple(v.shape), dtype=np.float64) for name, v in self.values.items()}
        physics, task = self._suite.physics, self._suite.task
        for i in ids:
            self._episodes[i] += 1
            # dm_control's Task takes its RandomState at construction only; each start gets its own.
            task._random = np.random.RandomState([self._seed, i, int(self._episodes[i])])
            with physics.reset_context():
                task.initialize_episode(physics)
            qpos[i], qvel[i], act[i] = physics.data.qpos, physics.data.qvel, physics.data.act
            for name, value in self.episode_values(physics).items():
                drawn[name][i] = value
        self._drawn = {name: torch.from_numpy(v).to(self.device, self.dtype) for name, v in drawn.items()}
        return torch.from_numpy(qpos), torch.from_numpy(qvel), torch.from_numpy(act)

    def restart(self, mask: torch.Tensor, state: State) -> None:
        for name, value in self._drawn.items():
            rows = mask.view(-1, *(1,) * (value.dim() - 1))
            self.values[name] = torch.where(rows, value, self.values[name])
        self._drawn = {}

    def state_dict(self) -> dict:
        return {
            "episodes": torch.from_numpy(self._episodes.copy()),
            **{name: value.to("cpu", copy=True) for name, value in self.values.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        self._episodes[:] = state["episodes"].numpy()
        for name in self.values:
            self.values[name] = state[name].to(self.device, self.dtype, copy=True)

    # -- names to indices ---------------------------------------------------------------------------

    def index(self, kind: mujoco.mjtObj, name: str) -> int:
        index = mujoco.mj_name2id(self.model, kind, name)
        if index < 0:
            raise TaskError(f"{self.name}'s model has no {kind.name[6:].lower()} named {name!r}")
        return index

    def body(self, name: str) -> int:
        return self.index(mujoco.mjtObj.mjOBJ_BODY, name)

    def geom(self, name: str) -> int:
        return self.index(mujoco.mjtObj.mjOBJ_GEOM, name)

    def site(self, name: str) -> int:
        return self.index(mujoco.mjtObj.mjOBJ_SITE, name)

    def sensor(self, name: str) -> slice:
        """The columns of sensordata that sensor `name` fills."""
        index = self.index(mujoco.mjtObj.mjOBJ_SENSOR, name)
        start = int(self.model.sensor_adr[index])
        return slice(start, start + int(self.model.sensor_dim[index]))

    def sensor_columns(self, *names: str) -> list[int]:
        """The columns of sensordata that sensors `names` fill, in the order named."""
        return [column for name in names for column in range(self.sensor(name).start, self.sensor(name).stop)]

    def joint_qpos(self, name: str) -> int:
        """The first column of qpos of joint `name`."""
        return int(self.model.jnt_qposadr[self.index(mujoco.mjtObj.mjOBJ_JOINT, name)])

    def joint_dof(self, name: str) -> int:
        """The first column of qvel of joint `name`."""
        return int(self.model.jnt_dofadr[self.index(mujoco.mjtObj.mjOBJ_JOINT, name)])


def control_substeps(env: Any) -> int:
    """Physics steps per control step of dm_control's environment `env`."""
    return round(env.control_timestep() / env.physics.timestep())


_SPARE_SUITES: dict[type[DmcTask], Any] = {}  # the environment load_model loaded, by task class


def frames(state: State, field: str) -> torch.Tensor:
    """Rotation matrices of `field` (xmat, site_xmat, geom_xmat) as [N, n, 3, 3], whichever layout
    the backend keeps (MuJoCo C: [N, n, 9] row-major; MuJoCo Warp: [N, n, 3, 3])."""
    value = state[field]
    return value.reshape(value.shape[0], value.shape[1], 3, 3)


XX, XY, XZ, YX, YY, YZ, ZX, ZY, ZZ = range(9)  # dm_control's names of a frame's entries, row-major


def flat_frames(state: State, field: str) -> torch.Tensor:
    """`field` as [N, n, 9], dm_control's flat row-major layout (entries XX ... ZZ)."""
    value = state[field]
    return value.reshape(value.shape[0], value.shape[1], 9)


@functools.cache
def _import_suite() -> Any:
    """dm_control.suite, imported without its side effects on the process: no OpenGL probe (pql
    never renders through it: MUJOCO_GL=disable unless the user chose a renderer), and MuJoCo's
    own warning handler kept (dm_control points it at absl logging for the whole process), and
    no INFO lines of its own in pql's console."""
    _check_dm_control_version()
    if not os.environ.get("MUJOCO_GL"):
        os.environ["MUJOCO_GL"] = "disable"
    absl = logging.getLogger("absl")  # its import logs the renderer and MuJoCo's version at INFO
    level = absl.level
    absl.setLevel(logging.WARNING)
    try:
        from dm_control import suite
    except ImportError as error:  # a dependency of pql: only a broken install gets here
        raise TaskError(f"dmc/ tasks need dm_control (pip install dm-control): {error}") from error
    finally:
        absl.setLevel(level)
        mujoco.set_mju_user_warning(None)
    return suite


# dm_control's releases follow MuJoCo's: up to 1.0.50 they read MjModel fields that MuJoCo 4
# dropped, and 1.0.52 is the first for MuJoCo 4. pip keeps them together unless something pins
# dm-control low beside MuJoCo 4, which would fail deep inside the suite's first load.
_FIRST_DM_CONTROL_FOR_MUJOCO_4 = (1, 0, 52)


def _check_dm_control_version() -> None:
    try:
        version = importlib.metadata.version("dm-control")
    except importlib.metadata.PackageNotFoundError:
        return  # the import below says it is missing
    release = tuple(int(part) for part in version.split(".")[:3] if part.isdigit())
    if int(mujoco.__version__.split(".")[0]) >= 4 and release < _FIRST_DM_CONTROL_FOR_MUJOCO_4:
        raise TaskError(
            f"dmc/ tasks: dm-control {version} does not run on MuJoCo {mujoco.__version__}, which needs "
            "dm-control >= 1.0.52 (pip install -U dm-control)"
        )
