"""Batched simulators for pql, and the user's own envs: `tasks.make(name, num_envs, device, seed, ...)`.

See tasks/base.py for the protocol every env follows, docs/tasks.md for pql's tasks and their
backends, and docs/own_env.md for the forms that bring an env of the user's own:

    <Task>                pql's own (TASK_NAMES)
    dmc/<domain>-<task>   the DeepMind Control Suite's, on pql's simulators (DMC_TASK_NAMES, tasks/dmc/)
    gym:<EnvId>           a Gymnasium id, vectorised by Gymnasium (tasks/gym_env.py)
    <module>:<factory>    a factory of the user's own returning a pql BatchedEnv or an env with
                          rsl_rl's VecEnv interface (tasks/factory.py, tasks/rsl_rl_env.py)
    isaacgym/<Task>       an IsaacGymEnvs task (tasks/isaacgym.py)
"""

from __future__ import annotations

from .base import BatchedEnv, TaskError, check_num_envs, resolve_device
from .dmc import DMC_TASKS
from .dmc import PREFIX as DMC_PREFIX
from .mujoco import TASKS, make_mujoco_env, resolve_backend

TASK_NAMES = tuple(TASKS)
DMC_TASK_NAMES = tuple(DMC_TASKS)
ISAACGYM_PREFIX = "isaacgym/"
GYM_PREFIX = "gym:"
FORMS = f"gym:<EnvId>, <module>:<factory> or {ISAACGYM_PREFIX}<Task>"


def task_form(name: str) -> str | None:
    """Which form `name` takes: "own", "dmc", "gym", "factory", "isaacgym", or None for no task name at all."""
    if name in TASKS:
        return "own"
    if name.startswith(DMC_PREFIX):
        return "dmc"
    if name.startswith(ISAACGYM_PREFIX):
        return "isaacgym"
    if name.startswith(GYM_PREFIX):
        return "gym"
    if ":" in name:
        return "factory"
    return None


def precheck(name: str, kwargs: dict | None = None, import_module: str | None = None) -> None:
    """Check what can be checked of task `name` without making its envs, so that a task refused
    leaves nothing behind (train.py calls it before Hydra creates the run directory): a
    Gymnasium id is registered and its spaces are ones pql takes (one plain env is made and
    closed), a factory imports by its name, Isaac Gym is installed. Raises TaskError."""
    form = task_form(name)
    if form == "dmc":
        check_dmc_name(name)
    elif form == "gym":
        from .gym_env import check_gym_id

        check_gym_id(name[len(GYM_PREFIX) :], dict(kwargs or {}), import_module)
    elif form == "factory":
        from .factory import resolve_factory

        resolve_factory(name)
    elif form == "isaacgym":
        from .isaacgym import check_isaacgym_installed

        check_isaacgym_installed(name[len(ISAACGYM_PREFIX) :])


def make(
    name: str,
    num_envs: int,
    device="cpu",
    seed: int = 0,
    backend: str = "auto",
    kwargs: dict | None = None,
    import_module: str | None = None,
    vectorization: str = "async",
    action_repeat: int = 1,
    policy_group: str | None = None,
    critic_group: str | None = None,
) -> BatchedEnv:
    """A batched env of `num_envs` copies of task `name`, its tensors on `device`.

    name: one of TASK_NAMES or DMC_TASK_NAMES, or one of the forms of the module docstring.
    backend: "auto" (mjwarp on CUDA, mujoco on the CPU; the choice is printed), "mujoco" (MuJoCo C
    on CPU threads) or "mjwarp" (MuJoCo Warp on `device`); pql's own tasks only.
    action_repeat: each action applied for that many control steps, their rewards summed
    (dmc/ tasks only; tasks.mujoco.env.MujocoEnv).
    kwargs: the env's keyword arguments (gym:<EnvId>: gym.make's; <module>:<factory>: the
    factory's); import_module: imported before a gym:<EnvId> is made (where a package registers
    its ids); vectorization: "async" or "sync" Gymnasium vector env, for gym:<EnvId>;
    policy_group, critic_group: the observation groups the policy and the critic see, for a
    <module>:<factory> env with groups (tasks/rsl_rl_env.py; None: "policy", else "actor"; and
    "critic" where the env has it).
    Raises TaskError for an unknown task or backend, num_envs <= 0, an unusable device, or an
    env that the adapters refuse (the message says why).
    """
    num_envs = check_num_envs(num_envs)
    device = resolve_device(device)
    kwargs = dict(kwargs or {})
    form = task_form(name) if isinstance(name, str) else None
    if form is None:
        raise TaskError(
            f"unknown task {name!r}; known tasks: {', '.join(TASK_NAMES)}, {DMC_PREFIX}<domain>-<task>, or {FORMS}"
        )
    if form == "dmc":
        check_dmc_name(name)
    if action_repeat != 1 and form != "dmc":
        raise TaskError(
            f"task {name}: action_repeat must be 1, got {action_repeat}: "
            f"only {DMC_PREFIX}<domain>-<task> tasks repeat actions"
        )
    if form not in ("own", "dmc") and backend != "auto":
        raise TaskError(f"task {name}: task.backend={backend!r} picks a simulator of pql's own tasks; leave it auto")
    if form not in ("gym", "factory") and kwargs:
        raise TaskError(
            f"task {name} takes no keyword arguments; task.kwargs is for gym:<EnvId> and <module>:<factory>"
        )
    if import_module and form != "gym":
        raise TaskError(
            f"task {name}: task.import_module is for gym:<EnvId> tasks (a factory's module is imported anyway)"
        )
    for setting, group in (("policy_group", policy_group), ("critic_group", critic_group)):
        if group is not None and form != "factory":
            raise TaskError(
                f"task {name}: {setting} names an observation group of a <module>:<factory> env; leave it None"
            )
    if form == "isaacgym":
        from .isaacgym import make_isaacgym_env

        return make_isaacgym_env(name[len(ISAACGYM_PREFIX) :], num_envs, device, seed)
    if form == "gym":
        from .gym_env import make_gym_env

        return make_gym_env(name[len(GYM_PREFIX) :], num_envs, device, int(seed), kwargs, import_module, vectorization)
    if form == "factory":
        from .factory import make_factory_env

        return make_factory_env(name, num_envs, device, int(seed), kwargs, policy_group, critic_group)
    chosen = resolve_backend(backend, device)
    if backend == "auto":
        print(f"tasks: {name} x{num_envs} on {device} with backend '{chosen}' (auto)")
    task_cls = DMC_TASKS[name] if form == "dmc" else TASKS[name]
    return make_mujoco_env(task_cls, num_envs, device, int(seed), chosen, action_repeat)


def check_dmc_name(name: str) -> None:
    """Raises TaskError unless `name` is one of DMC_TASK_NAMES."""
    if name not in DMC_TASKS:
        raise TaskError(f"unknown DeepMind Control Suite task {name!r}; known: {', '.join(DMC_TASK_NAMES)}")
