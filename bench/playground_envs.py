"""MuJoCo Playground's tasks through pql (examples/playground_task.py) against Playground's own
loops. Needs Playground beside pql (docs/own_env.md, "MuJoCo Playground"). Run by hand, never in CI.

    python bench/playground_envs.py [--tasks CartpoleBalance ...] [--sizes 64 1024] [--seconds 10]
                                    [--device cpu|cuda] [--impl jax|warp]

Env steps/s of each task at each env count, uniform random actions in [-1, 1] for about
`seconds` after warm-up steps (compilation is not timed), one row per path:
    Playground's jitted loop   Playground's training stack (`wrapper.wrap_for_brax_training`)
                               stepped 100 steps per call inside one jitted `lax.scan`, the
                               actions drawn in JAX: how brax's trainers step it, no per-step
                               call at all
    Playground, a call a step  the same stack, one jitted call per step, actions drawn in JAX
    Playground's torch wrapper `wrapper_torch.RSLRLBraxWrapper` (needs tensordict), actions from
                               torch: the path Playground's rsl_rl script takes
    pql                        pql's env of examples.playground_task:make: one jitted call per
                               step with the final observations kept, DLPack both ways, the
                               adapter's group pick, copies and action checks
It prints the machine, the versions and the commit first.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

from bench.env_throughput import factory_rate, synchronizer, timed_steps
from bench.learning import cpu_model, git_commit

EXAMPLE = "examples.playground_task:make"
UNROLL = 100  # steps per call of the jitted loop


def playground_stack(task: str, num_envs: int, device: str, impl: str):
    """(Playground's training stack over `task`, its first state, the JAX device), as
    examples.playground_task makes the env but without what pql adds."""
    import jax
    from mujoco_playground import registry, wrapper

    from examples.playground_task import jax_device, ppo_params

    params, where = ppo_params(task), jax_device(device)
    with jax.default_device(where):
        env = registry.load(task, config_overrides={"impl": impl})
    stack = wrapper.wrap_for_brax_training(env, params.episode_length, params.action_repeat)
    keys = jax.random.split(jax.device_put(jax.random.PRNGKey(0), where), num_envs)
    return stack, jax.jit(stack.reset)(keys), where


def jitted_loop_rate(task: str, num_envs: int, device: str, impl: str, seconds: float, unroll: int) -> float:
    import jax

    stack, state, where = playground_stack(task, num_envs, device, impl)
    shape = (num_envs, stack.action_size)

    @jax.jit
    def steps(state, key):
        def one(carry, _):
            state, key = carry
            key, draw = jax.random.split(key)
            return (stack.step(state, jax.random.uniform(draw, shape, minval=-1, maxval=1)), key), None

        return jax.lax.scan(one, (state, key), None, length=unroll)[0]

    carry = (state, jax.device_put(jax.random.PRNGKey(1), where))

    def call():
        nonlocal carry
        carry = steps(*carry)

    calls, elapsed = timed_steps(call, seconds, lambda: jax.block_until_ready(carry), warmup=2)
    return num_envs * unroll * calls / elapsed


def torch_wrapper_rate(task: str, num_envs: int, device: str, impl: str, seconds: float) -> float:
    from mujoco_playground import registry
    from mujoco_playground._src import wrapper_torch  # where it lives in every release

    from examples.playground_task import ppo_params

    params, where = ppo_params(task), torch.device(device)
    env = wrapper_torch.RSLRLBraxWrapper(
        registry.load(task, config_overrides={"impl": impl}),
        num_envs,
        0,
        params.episode_length,
        params.action_repeat,
        device_rank=(where.index or 0) if where.type == "cuda" else None,  # CPU: no rank, as its script cannot
    )
    env.reset()
    gen = torch.Generator(device=where).manual_seed(0)
    step = lambda: env.step(torch.rand((num_envs, env.num_actions), generator=gen, device=where) * 2 - 1)
    calls, elapsed = timed_steps(step, seconds, synchronizer(where))
    return num_envs * calls / elapsed


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["CartpoleBalance"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[64, 1024])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--impl", default="jax", choices=["jax", "warp"])
    args = parser.parse_args(argv)

    from importlib.metadata import version

    import jax
    import mujoco

    import examples.playground_task  # noqa: F401  (JAX's settings, before anything compiles)

    print(
        f"bench/playground_envs.py: {cpu_model()}, {os.cpu_count()} cores; Python {platform.python_version()}, "
        f"torch {torch.__version__}, JAX {jax.__version__}, playground {version('playground')}, "
        f"MuJoCo {mujoco.__version__}, MJX {version('mujoco-mjx')}; impl={args.impl}; commit {git_commit()}",
        flush=True,
    )
    print(f"| task | envs | path | env steps/s ({args.device}) |\n|---|---:|---|---:|", flush=True)
    for task in args.tasks:
        for n in args.sizes:
            where = (task, n, args.device, args.impl, args.seconds)
            rows = {
                "Playground's jitted loop": lambda: jitted_loop_rate(*where, UNROLL),
                "Playground, a call a step": lambda: jitted_loop_rate(*where, 1),
                "Playground's torch wrapper": lambda: torch_wrapper_rate(*where),
                "pql": lambda: factory_rate(EXAMPLE, n, args.device, args.seconds, {"task": task, "impl": args.impl}),
            }
            for path, rate in rows.items():
                started = time.perf_counter()
                try:
                    figure = f"{rate():,.0f}"
                except Exception as e:  # a row that cannot run (tensordict missing, say) says why
                    figure = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                print(f"| {task} | {n} | {path} | {figure} |", flush=True)
                print(f"  ({time.perf_counter() - started:.0f} s with the compilation)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
