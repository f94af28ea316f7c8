"""A factory of the user's own as a task: `task=<module>:<factory>`.

The factory is called as `factory(num_envs=..., device=..., seed=..., **task.kwargs)`, `device` a
string such as "cpu" or "cuda:0", and returns either a pql BatchedEnv (tasks/base.py) or an env
with rsl_rl's VecEnv interface, which tasks/rsl_rl_env.py adapts (Isaac Lab, mjlab and Genesis
wrap their envs in it). In process mode the actor builds its envs in its own process, which
imports the factory by its name again: so it must be a module-level name (a lambda, a local
function or a bound method cannot be found there).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch

from .base import BatchedEnv, TaskError, resolve_device
from .rsl_rl_env import RslRlEnv, missing_vec_env_members


def resolve_factory(spec: str) -> Callable:
    """The callable `spec` ("<module>:<factory>", the factory a module-level name, possibly dotted
    for a class attribute) names. Raises TaskError naming what could not be found, and for a
    lambda or a local function, which a role process could not import."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr or ":" in attr:
        raise TaskError(f"task {spec!r}: expected <module>:<factory>, e.g. my_envs.cartpole:make_env")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise TaskError(f"task {spec}: cannot import module {module_name!r} ({type(e).__name__}: {e})") from None
    factory = module
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise TaskError(f"task {spec}: module {module_name} has no {attr!r}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise TaskError(
            f"task {spec}: {attr} is not callable (a {type(factory).__name__}); name a function that makes envs"
        )
    qualname = getattr(factory, "__qualname__", attr)
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise TaskError(
            f"task {spec}: {qualname} is a lambda or a local function; the actor's process imports the factory "
            "by its name, so define it at a module's top level"
        )
    return factory


def make_factory_env(
    spec: str,
    num_envs: int,
    device: torch.device,
    seed: int,
    kwargs: dict,
    policy_group: str | None = None,
    critic_group: str | None = None,
) -> BatchedEnv:
    """The env `spec`'s factory makes with these arguments, adapted to the protocol if it has
    rsl_rl's VecEnv interface (the policy seeing `policy_group`, the critic `critic_group`:
    tasks/rsl_rl_env.py). Raises TaskError if the factory raises or returns something else, or an
    env of another size or device, or a BatchedEnv where a group is named."""
    factory = resolve_factory(spec)
    try:
        env = factory(num_envs=num_envs, device=str(device), seed=seed, **kwargs)
    except TaskError:
        raise
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else ""
        raise TaskError(
            f"task {spec}: the factory raised {type(e).__name__}: {first} (it is called as "
            f"factory(num_envs=..., device=..., seed=...{''.join(f', {k}=...' for k in kwargs)}))"
        ) from e
    if not isinstance(env, BatchedEnv):
        missing = missing_vec_env_members(env)
        if missing:
            raise TaskError(
                f"task {spec}: the factory returned a {type(env).__name__}, neither a pql BatchedEnv (tasks/base.py) "
                f"nor an env with rsl_rl's VecEnv interface (it lacks {', '.join(missing)})"
            )
        env = RslRlEnv(env, policy_group, critic_group)
    else:
        for setting, group in (("policy_group", policy_group), ("critic_group", critic_group)):
            if group is not None:
                raise TaskError(
                    f"task {spec}: task.{setting}={group} names an observation group, but the factory returned a "
                    f"pql BatchedEnv, whose observations are one tensor; leave task.{setting} null"
                )
    if env.num_envs != num_envs:
        raise TaskError(f"task {spec}: the factory was asked for {num_envs} envs and made {env.num_envs}")
    if resolve_device(env.device) != device:
        raise TaskError(f"task {spec}: the factory was asked for envs on {device} and made them on {env.device}")
    return env
