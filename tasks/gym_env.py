"""Any Gymnasium env id as a batched env: `tasks.make("gym:Pendulum-v1", ...)`.

`num_envs` copies made by `gymnasium.make(env_id, **kwargs)` step together in Gymnasium's own
vector env: AsyncVectorEnv (a subprocess per copy, `vectorization="async"`) or SyncVectorEnv (in
this process, "sync"). How they meet the protocol of tasks/base.py:

- **Autoreset.** The vector env runs in AutoresetMode.SAME_STEP: a copy whose episode ends is reset
  inside the step that ended it, so `obs` is the new episode's first observation and
  `info["final_obs"]` the exact one that ended the old. `terminated` and `truncated` are the
  copies' own; a step that is both (the task ends on the limit's last step) is terminated only,
  as there is nothing left to bootstrap.
- **Observations.** A Box is flattened, row-major, to prod(shape) values. A Dict of Boxes is
  flattened key by key: "observation", "achieved_goal", "desired_goal" first (the keys of
  gymnasium-robotics' goal envs, those present), then the other keys in sorted order. `obs_layout`
  lists the (key, width) pairs in that order ([("obs", width)] for a Box). All is cast to float32.
- **Images** are refused: pql's networks are MLPs over a vector. A Box of rank 3 or more is an
  image, and so is one of rank 2 that is uint8 or at least IMAGE_SIDE wide on both sides; a
  smaller rank-2 float Box (a set of points, a short history of features) is flattened.
- **Actions.** The action space must be a float Box with finite bounds: `action_low` and
  `action_high` are its bounds (flattened), onto which pql maps its [-1, 1] actions itself
  (pql.envs.to_env_action). Actions reach the copies on the CPU, in the Box's shape and dtype.
- **Step limit.** `max_episode_steps` is the id's registered TimeLimit; `kwargs["max_episode_steps"]`
  goes to gym.make's own parameter of that name and replaces it. An env without one is refused.
- **Seeding.** The first reset() seeds copy i with seed + i, and the batched action space is
  seeded with seed; later episodes continue each copy's generator, so a run repeats itself.

Everything that can be refused is refused before a subprocess starts, from one copy made in this
process to read its spaces and closed again: an unknown id (with the closest registered ids), an
`import_module` that cannot be imported, a constructor that raises, actions that are not a float
Box (Discrete, MultiDiscrete, MultiBinary, Tuple...: pql's policies output continuous actions) or
are unbounded, observations other than a Box or a Dict of Boxes, images, no step limit, and async
copies asked for in a daemonic process, which may not start subprocesses (pql's role processes are
not daemonic for this reason).
The copies' spaces are then compared with that first one's. A Gymnasium env cannot save its
simulator's state in general, so this env cannot be checkpointed (BatchedEnv's default).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import math
import multiprocessing
import os
import traceback

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv

from .base import ActionCheck, BatchedEnv, TaskError

VECTORIZATIONS = {"async": AsyncVectorEnv, "sync": SyncVectorEnv}
GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
# A rank-2 Box at least this wide on both sides is a grey-scale image (32 x 32 is the smallest
# common image size); feature tables (points x coordinates, frames x features) are narrower.
IMAGE_SIDE = 32


class GymVectorEnv(BatchedEnv):
    """The protocol over `vector_env`, a Gymnasium vector env in SAME_STEP autoreset mode whose
    copies `make_gym_env` has checked; tensors [N, ...] on `device`."""

    def __init__(
        self,
        vector_env: VectorEnv,
        env_id: str,
        obs_layout: list[tuple[str, int]],
        max_episode_steps: int,
        device: torch.device,
        seed: int,
    ):
        self.vector_env = vector_env
        self.env_id = env_id
        self.obs_layout = obs_layout
        self.num_envs = vector_env.num_envs
        self.device = device
        self.obs_dim = sum(width for _, width in obs_layout)
        action_space = vector_env.single_action_space
        self.act_dim = math.prod(action_space.shape)
        self.max_episode_steps = max_episode_steps
        self.action_low = torch.as_tensor(action_space.low.reshape(-1), dtype=torch.float32, device=device)
        self.action_high = torch.as_tensor(action_space.high.reshape(-1), dtype=torch.float32, device=device)
        self._action_shape = (self.num_envs, *action_space.shape)
        self._action_dtype = action_space.dtype
        is_dict = isinstance(vector_env.single_observation_space, spaces.Dict)
        self._keys = [key for key, _ in obs_layout] if is_dict else None
        self._check_actions = ActionCheck(self.num_envs, self.act_dim, device)
        self._seed = seed
        self._started = False
        vector_env.action_space.seed(seed)
        fps = vector_env.metadata.get("render_fps")
        self.dt = 1.0 / fps if fps else None

    def reset(self) -> torch.Tensor:
        # Only the first reset seeds: a later one continues each copy's generator, so that it
        # starts new episodes rather than the first ones over again.
        obs, _ = self.vector_env.reset(seed=None if self._started else self._seed)
        self._started = True
        return self._tensor(self._flatten(obs, self.num_envs))

    def step(self, actions: torch.Tensor):
        self._check_actions(actions)
        if not self._started:
            raise TaskError(f"gym:{self.env_id}: call reset() before the first step")
        env_actions = actions.detach().cpu().numpy().reshape(self._action_shape).astype(self._action_dtype)
        obs, reward, terminated, truncated, info = self.vector_env.step(env_actions)
        obs = self._flatten(obs, self.num_envs)
        final_obs = obs.copy()
        for env in np.flatnonzero(terminated | truncated):
            final_obs[env] = self._flatten(info["final_obs"][env])
        return (
            self._tensor(obs),
            torch.as_tensor(reward, dtype=torch.float32).to(self.device),
            torch.as_tensor(terminated).to(self.device),
            torch.as_tensor(truncated & ~terminated).to(self.device),
            {"final_obs": self._tensor(final_obs)},
        )

    def _flatten(self, obs, *batch: int) -> np.ndarray:
        """An observation of the copies (batch = (N,)) or of one copy (batch = ()) -> [*batch, obs_dim] float32."""
        parts = [obs] if self._keys is None else [obs[key] for key in self._keys]
        return np.concatenate([np.reshape(part, (*batch, -1)) for part in parts], axis=-1, dtype=np.float32)

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device)

    def _cannot_checkpoint(self) -> TaskError:
        return TaskError(
            f"gym:{self.env_id} cannot be checkpointed: a Gymnasium env does not save or restore its simulator's "
            "state; checkpoints are written without the envs, and a resume starts new episodes"
        )

    def render(self, index: int = 0) -> np.ndarray:
        if self.vector_env.render_mode != "rgb_array":
            raise TaskError(
                f"gym:{self.env_id} renders no images: it was made with render_mode={self.vector_env.render_mode!r}, "
                "and pql.play makes it with 'rgb_array' (task.kwargs.render_mode)"
            )
        frames = self.vector_env.render()
        if frames is None:
            raise TaskError(f"gym:{self.env_id} returned no image from render()")
        return np.asarray(frames[index], dtype=np.uint8)

    def close(self) -> None:
        self.vector_env.close()


def make_gym_env(
    env_id: str,
    num_envs: int,
    device: torch.device,
    seed: int,
    kwargs: dict,
    import_module: str | None,
    vectorization: str,
) -> GymVectorEnv:
    """`num_envs` copies of `gymnasium.make(env_id, **kwargs)` as one batched env on `device`.

    import_module: a module imported first, where a package registers its ids ("gymnasium_robotics").
    vectorization: "async" (AsyncVectorEnv, a subprocess per copy) or "sync" (SyncVectorEnv).
    Raises TaskError, in one line, for what the module docstring lists as refused.
    """
    name = f"gym:{env_id}"
    if vectorization not in VECTORIZATIONS:
        raise TaskError(f"task.vectorization must be one of {', '.join(VECTORIZATIONS)}, got {vectorization!r}")
    if vectorization == "async" and multiprocessing.current_process().daemon:
        raise TaskError(
            f"{name}: task.vectorization=async starts a subprocess per copy, which a daemonic process "
            "may not; use task.vectorization=sync"
        )
    make, obs_layout, max_episode_steps, first_spaces = _inspect(env_id, kwargs, import_module)
    vector_env = _start_copies(make, num_envs, vectorization, name, first_spaces)
    return GymVectorEnv(vector_env, env_id, obs_layout, max_episode_steps, device, seed)


def check_gym_id(env_id: str, kwargs: dict, import_module: str | None) -> None:
    """Raise TaskError for what one copy of `gymnasium.make(env_id, **kwargs)` shows pql cannot
    train (the refusals of the module docstring but those of the vector env): the cheap check a
    run makes before it creates anything (tasks.precheck)."""
    _inspect(env_id, kwargs, import_module)


def _inspect(env_id: str, kwargs: dict, import_module: str | None) -> tuple:
    """One copy made and closed again. -> (the copies' constructor, obs_layout, max_episode_steps,
    (observation space, action space)). Raises TaskError for what it shows is refused."""
    name = f"gym:{env_id}"
    if import_module is not None:
        try:
            importlib.import_module(import_module)
        except Exception as err:
            why = _summary(err)
            raise TaskError(f"{name}: task.import_module={import_module} could not be imported: {why}") from err
    if env_id not in gymnasium.registry:
        raise TaskError(_unknown_id(env_id, import_module))
    make = functools.partial(gymnasium.make, env_id, **kwargs)
    try:
        first = make()
    except Exception as err:
        raise TaskError(f"{name} could not be made: {_summary(err)}") from err
    try:
        obs_layout = _observation_layout(name, first.observation_space)
        _check_action_space(name, first.action_space)
        max_episode_steps = first.spec.max_episode_steps if first.spec is not None else None
        if max_episode_steps is None:
            raise TaskError(
                f"{name} has no step limit, and pql truncates episodes at one: "
                "pass task.kwargs.max_episode_steps=<steps>"
            )
        return make, obs_layout, max_episode_steps, (first.observation_space, first.action_space)
    finally:
        first.close()


def _unknown_id(env_id: str, import_module: str | None) -> str:
    closest = difflib.get_close_matches(env_id, list(gymnasium.registry), n=3)
    message = f"unknown Gymnasium id gym:{env_id}"
    if import_module is not None:
        message += f" (after importing {import_module})"
    if closest:
        message += f"; closest registered: {', '.join(closest)}"
    if import_module is None and ("/" in env_id or not closest):
        message += "; a package's ids are registered when its module is imported: pass task.import_module=<module>"
    return message


def _observation_layout(name: str, space: spaces.Space) -> list[tuple[str, int]]:
    """(key, width) of each part of the flattened observation, in order (see the module docstring)."""
    if isinstance(space, spaces.Box):
        return [("obs", _box_width(name, "observation space", space))]
    if isinstance(space, spaces.Dict):
        keys = [key for key in GOAL_KEYS if key in space.spaces]
        keys += sorted((key for key in space.spaces if key not in GOAL_KEYS), key=str)
        return [(key, _box_width(name, f"observation {key!r}", space[key])) for key in keys]
    raise TaskError(
        f"{name}: pql's networks take a vector of floats, a Box or a Dict of Boxes flattened; "
        f"its observation space is {space}"
    )


def _box_width(name: str, what: str, space: spaces.Space) -> int:
    if not isinstance(space, spaces.Box):
        raise TaskError(f"{name}: pql flattens a Box or a Dict of Boxes (no nested Dicts); its {what} is {space}")
    shape = space.shape
    if len(shape) >= 3 or (len(shape) == 2 and (space.dtype == np.uint8 or min(shape) >= IMAGE_SIDE)):
        raise TaskError(
            f"{name}: its {what} {space} is an image, and pql's networks are MLPs over a vector "
            "(register the id with a flattening wrapper if it is not an image)"
        )
    return math.prod(shape)


def _check_action_space(name: str, space: spaces.Space) -> None:
    if not isinstance(space, spaces.Box) or not np.issubdtype(space.dtype, np.floating):
        raise TaskError(f"{name}: pql's policies output continuous actions; its action space is {space}")
    if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
        raise TaskError(
            f"{name}: its action space {space} is unbounded; pql maps its [-1, 1] actions onto the Box's "
            "bounds, which must be finite"
        )


def _start_copies(make, num_envs: int, vectorization: str, name: str, expected: tuple) -> VectorEnv:
    """The vector env of `num_envs` copies made by `make`, each with the (observation, action)
    spaces `expected`. Raises TaskError, with no copy left running, if one cannot be made or differs."""
    cls = VECTORIZATIONS[vectorization]
    # Gymnasium's constructors start the copies before they compare their spaces and leave them
    # running when that, or a copy, fails: the object held from before __init__ can stop them.
    vector_env = cls.__new__(cls)
    failure = None
    try:
        # copy=False: _flatten copies the observations anyway. Async copies fork, Gymnasium's
        # default on Linux, also in pql's role processes, whose own default may be spawn (a
        # spawned role's is): a spawned copy imports pql's main module again (8 Pendulum copies
        # took 9.6 s to start in a role process and 3.8 s to close; forked, 0.06 s).
        start = {"context": "fork"} if cls is AsyncVectorEnv else {}
        vector_env.__init__([make] * num_envs, copy=False, autoreset_mode=AutoresetMode.SAME_STEP, **start)
    except (EOFError, ConnectionError) as err:  # a pipe broke: a copy's subprocess died (and printed why)
        _stop(vector_env)
        raise TaskError(
            f"{name} could not be made: a copy's subprocess exited while starting (its traceback is printed above)"
        ) from err
    except Exception as err:
        failure = err
    differing = _differing_copy(vector_env, expected)
    if failure is None and differing is None:
        return vector_env
    _stop(vector_env)
    if differing is not None:
        raise TaskError(f"{name}: the copies' spaces differ: {differing}; pql steps copies of one space") from failure
    raise TaskError(f"{name} could not be made: {_summary(failure)}") from failure


def _differing_copy(vector_env: VectorEnv, expected: tuple) -> str | None:
    """The first copy whose spaces differ from `expected`, in words, or None (also when they cannot be read)."""
    if isinstance(vector_env, SyncVectorEnv):
        copies = [(env.observation_space, env.action_space) for env in getattr(vector_env, "envs", ())]
    else:
        processes = getattr(vector_env, "processes", [])
        running = len(processes) == vector_env.num_envs and all(process.is_alive() for process in processes)
        if not running or None in vector_env.parent_pipes:
            return None
        copies = list(zip(vector_env.get_attr("observation_space"), vector_env.get_attr("action_space")))
    for index, spaces_of_copy in enumerate(copies):
        for kind, space, wanted in zip(("observation", "action"), spaces_of_copy, expected):
            if space != wanted:
                return f"copy {index}'s {kind} space is {space} where the first one made had {wanted}"
    return None


def _stop(vector_env: VectorEnv) -> None:
    """Closes a vector env whose constructor may have stopped half way."""
    for env in getattr(vector_env, "envs", ()):
        env.close()
    for process in getattr(vector_env, "processes", ()):
        if process.pid is not None:
            process.terminate()
            process.join()
    for pipe in getattr(vector_env, "parent_pipes", ()):
        if pipe is not None:
            pipe.close()
    vector_env.closed = True  # what is left has been released: its __del__ would try again


def _summary(err: BaseException) -> str:
    """The exception's type and first line; where it was raised when it says nothing (a bare assert)."""
    lines = str(err).strip().splitlines()
    if lines:
        return f"{type(err).__name__}: {lines[0]}"
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return type(err).__name__
    return f"{type(err).__name__} at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}"
