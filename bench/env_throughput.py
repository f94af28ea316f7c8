"""Batched env throughput: env steps/s of a task for several env counts, per backend and device,
next to Gymnasium's own synchronous vector env and MuJoCo's raw multi-threaded physics.

    python bench/env_throughput.py [--task Ant] [--sizes 64 1024 4096] [--seconds 5]
                                   [--backends mujoco mjwarp] [--devices cpu cuda]
                                   [--gym-sizes 64 1024] [--adapter-sizes 8 64]
                                   [--rollout-sizes N ...] [--csv PATH]
                                   [--profile] [--profile-csv PATH]

Every row steps `N` envs with uniform random actions in the action box for about `seconds`
(after a few warm-up steps that also absorb Warp's kernel compilation and CUDA graph capture)
and reports N × steps / elapsed. The env rows are the full protocol: physics, task logic in
torch (observation, reward, termination), auto-reset and the action checks. The two reference
rows are not: "gymnasium sync" is `gymnasium.vector.SyncVectorEnv` of `<Task>-v5` (one MjData
per env, stepped in a Python loop; left out for ShadowHandCube, which has no Gymnasium env),
"dm_control loop" its counterpart for a dmc/<domain>-<task>: dm_control's own environments, one
per env, stepped one after another in a Python loop, and
"mujoco rollout (physics only)" is `mujoco.rollout` with one thread per core stepping the same
model and frame skip with no task logic at all: what the physics alone costs on this machine.
"pql gym:<Task>-v5 async|sync" is the generic path a user's own Gymnasium env takes
(`task=gym:<Task>-v5`, tasks/gym_env.py: Gymnasium's vector env, a subprocess per copy or one
loop, behind pql's protocol). `--gym-sizes`, `--adapter-sizes` and `--rollout-sizes` with no
value leave those rows out.

A row that raises (out of memory at the largest size, say) prints its error and the bench goes
on with the next row; the exit code is then 1. --csv writes each row as it is measured
(task, row, device, num_envs, env_steps_per_s, error).

--profile splits one `MujocoEnv.step` of every pql row into its parts, in a second window as long
as the first (the timing adds work of its own, so the throughput is measured without it):
"physics" (`env.physics.step`, less the mjwarp backend's overflow check), "restart"
(`env.physics.reset` inside the auto-reset) and "rest" (pql's own torch work: observations,
rewards, auto-reset bookkeeping, copies, casts, the action and overflow checks: the whole step less
the other two), with "step", the whole `env.step`, as their sum. The env's methods are wrapped by
the bench, tasks/ is untouched. On CUDA each part is a pair of CUDA events on torch's stream, read
after one synchronize at the end of the window (the mjwarp backend orders its stream after torch's
both ways, so the events bracket the physics); on the CPU, time.perf_counter. It prints a table
per row (part, ms per step, share of the step); --profile-csv (implies --profile) writes one row
per part: task, row, device, num_envs, part, ms_per_step, share (row as in --csv, "pql mjwarp").
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from learner import CsvRows

import tasks
from tasks.dmc import DMC_TASKS
from tasks.dmc.suite import control_substeps
from tasks.mujoco import GYMNASIUM_TASKS, TASKS
from tasks.mujoco.task import load_asset

WARMUP_STEPS = 3


def timed_steps(step, seconds: float, sync=lambda: None, warmup: int = WARMUP_STEPS) -> tuple[int, float]:
    """Call step() for about `seconds` after `warmup` calls. -> (calls, elapsed seconds)."""
    for _ in range(warmup):
        step()
    sync()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        calls += 1
    sync()
    return calls, time.perf_counter() - start


def random_steps(env) -> Callable[[], None]:
    """One env.step with uniform random actions in the action box, drawn on the env's device."""
    gen = torch.Generator(device=env.device).manual_seed(0)
    low, high = env.action_low, env.action_high

    def step():
        u = torch.rand((env.num_envs, env.act_dim), generator=gen, device=env.device)
        env.step(low + u * (high - low))

    return step


def factory_rate(spec: str, num_envs: int, device: str, seconds: float, kwargs: dict) -> float:
    """Env steps/s of `task=spec` with task.kwargs `kwargs` as pql makes it (the adapter's work
    included), random actions, for about `seconds`."""
    import tasks

    env = tasks.make(spec, num_envs, device, seed=0, kwargs=kwargs)
    env.reset()
    calls, elapsed = timed_steps(random_steps(env), seconds, synchronizer(env.device))
    env.close()
    return num_envs * calls / elapsed


def synchronizer(device: torch.device) -> Callable[[], None]:
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


PARTS = ("physics", "restart", "rest", "step")
PART_LABELS = {
    "physics": "physics step (env.physics.step)",
    "restart": "restart (env.physics.reset)",
    "rest": "pql's own work (obs, rewards, resets, checks, copies)",
    "step": "whole env.step",
}


class Spans:
    """The time spent inside one kind of call over a window: CUDA event pairs on torch's current
    stream, summed after the window's final synchronize (none per call, which would stall the
    stream), or time.perf_counter on the CPU."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.pairs = []

    def now(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def around(self, fn: Callable) -> Callable:
        """fn, with each call's span recorded."""

        def timed(*args, **kwargs):
            start = self.now()
            try:
                return fn(*args, **kwargs)
            finally:
                self.pairs.append((start, self.now()))

        return timed

    def total_ms(self) -> float:
        """The spans' sum; on CUDA only once the stream has passed the last event."""
        if self.cuda:
            return sum(start.elapsed_time(end) for start, end in self.pairs)
        return 1e3 * sum(end - start for start, end in self.pairs)


@contextlib.contextmanager
def wrapped(obj, methods: dict[str, Spans]) -> Iterator[None]:
    """obj's methods timed into their Spans, as instance attributes removed on the way out (the
    class's own methods then show again)."""
    for name, spans in methods.items():
        setattr(obj, name, spans.around(getattr(obj, name)))
    try:
        yield
    finally:
        for name in methods:
            delattr(obj, name)


@dataclasses.dataclass
class StepProfile:
    """ms per env.step of each part (PARTS; "step" is their sum), and the window's wall-clock ms
    per call of `step` (the action draw included): an independent measure of the whole."""

    ms: dict[str, float]
    wall_ms: float

    def share(self, part: str) -> float:
        return self.ms[part] / self.ms["step"]


def profile_step(env, step: Callable[[], None], seconds: float) -> StepProfile:
    """Time the parts of env.step (a tasks.mujoco MujocoEnv) while step() calls it for about
    `seconds`; env is warm (its graphs captured) before."""
    spans = {key: Spans(env.device) for key in ("step", "physics", "restart", "overflow")}
    physics = env.physics
    methods = {"step": spans["physics"], "reset": spans["restart"]}
    if hasattr(physics, "_check_overflow"):  # mjwarp: pql's check, called inside physics.step
        methods["_check_overflow"] = spans["overflow"]
    sync = synchronizer(env.device)
    with wrapped(physics, methods), wrapped(env, {"step": spans["step"]}):
        calls, elapsed = timed_steps(step, seconds, sync, warmup=0)
    ms = {key: s.total_ms() / calls for key, s in spans.items()}
    physics_ms = ms["physics"] - ms["overflow"]
    parts = {
        "physics": physics_ms,
        "restart": ms["restart"],
        "rest": ms["step"] - physics_ms - ms["restart"],
        "step": ms["step"],
    }
    return StepProfile(parts, 1e3 * elapsed / calls)


def pql_env_rate(
    task: str, num_envs: int, device: str, backend: str, seconds: float, profile: bool = False
) -> tuple[float, StepProfile | None]:
    """Env steps/s of `num_envs` envs, and with profile the parts of a step (in a second window).
    -> (rate, profile or None)."""
    env = tasks.make(task, num_envs=num_envs, device=device, seed=0, backend=backend)
    env.reset()
    step = random_steps(env)
    calls, elapsed = timed_steps(step, seconds, synchronizer(env.device))
    parts = profile_step(env, step, seconds) if profile else None
    env.close()
    return num_envs * calls / elapsed, parts


def gymnasium_rate(task: str, num_envs: int, seconds: float) -> float:
    import gymnasium

    envs = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make(f"{task}-v5") for _ in range(num_envs)])
    envs.reset(seed=0)
    envs.action_space.seed(0)
    calls, elapsed = timed_steps(lambda: envs.step(envs.action_space.sample()), seconds)
    envs.close()
    return num_envs * calls / elapsed


def gym_adapter_rate(task: str, num_envs: int, vectorization: str, seconds: float) -> float:
    """Env steps/s of `task=gym:<Task>-v5`: Gymnasium's env behind pql's protocol (tasks/gym_env.py),
    what a user's own Gymnasium env costs next to pql's batched one."""
    env = tasks.make(f"gym:{task}-v5", num_envs=num_envs, device="cpu", seed=0, vectorization=vectorization)
    env.reset()
    calls, elapsed = timed_steps(random_steps(env), seconds, synchronizer(env.device))
    env.close()
    return num_envs * calls / elapsed


def dm_control_rate(task: str, num_envs: int, seconds: float) -> float:
    """dm_control's own environments of a dmc/ task, stepped one after another in a Python loop."""
    task_cls = DMC_TASKS[task]
    envs = [task_cls.load_suite() for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.task._random = np.random.RandomState(i)
        env.reset()
    spec = envs[0].action_spec()
    rng = np.random.default_rng(0)

    def step():
        for env, action in zip(envs, rng.uniform(spec.minimum, spec.maximum, (num_envs, *spec.shape))):
            env.step(action)  # a finished episode restarts at the next step, as dm_control's loop does

    calls, elapsed = timed_steps(step, seconds)
    return num_envs * calls / elapsed


def model_and_frame_skip(task: str):
    """The MuJoCo model of pql's task `task` and its physics substeps per env step."""
    if task in DMC_TASKS:
        suite = DMC_TASKS[task].load_suite()
        return DMC_TASKS[task].load_model(), control_substeps(suite)
    return load_asset(TASKS[task].xml), TASKS[task].frame_skip


def rollout_rate(task: str, num_envs: int, seconds: float) -> float:
    """MuJoCo's physics alone: mujoco.rollout over num_envs worlds, one thread per core."""
    import mujoco
    from mujoco import rollout

    model, frame_skip = model_and_frame_skip(task)
    threads = len(os.sched_getaffinity(0))
    datas = [mujoco.MjData(model) for _ in range(threads)]
    state = np.zeros((num_envs, mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_FULLPHYSICS)))
    mujoco.mj_getState(model, datas[0], state[0], mujoco.mjtState.mjSTATE_FULLPHYSICS)
    state[:] = state[0]
    rng = np.random.default_rng(0)
    low, high = model.actuator_ctrlrange.T
    runner = rollout.Rollout(nthread=threads)

    def step():
        nonlocal state
        control = rng.uniform(low, high, (num_envs, frame_skip, model.nu))
        out, _ = runner.rollout([model] * num_envs, datas, state, control, nstep=frame_skip)
        state = out[:, -1]

    calls, elapsed = timed_steps(step, seconds)
    runner.close()
    return num_envs * calls / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="Ant", choices=[*tasks.TASK_NAMES, *tasks.DMC_TASK_NAMES])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 1024, 4096])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--backends", nargs="+", default=["mujoco", "mjwarp"], choices=["mujoco", "mjwarp"])
    parser.add_argument("--devices", nargs="+", default=None, help="default: cpu, and cuda when it is available")
    parser.add_argument(
        "--gym-sizes",
        type=int,
        nargs="*",
        default=[64, 1024],
        help="sizes for Gymnasium's SyncVectorEnv, or for a dmc/ task dm_control's own environments in a "
        "Python loop (one Python env per copy)",
    )
    parser.add_argument(
        "--adapter-sizes",
        type=int,
        nargs="*",
        default=[8, 64],
        help="sizes for task=gym:<Task>-v5, pql's Gymnasium adapter, async and sync",
    )
    parser.add_argument(
        "--rollout-sizes",
        type=int,
        nargs="*",
        default=None,
        help="sizes for the mujoco.rollout physics-only row (default: --sizes)",
    )
    parser.add_argument("--csv", default=None, help="also write the rows to this CSV file")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also time the parts of one env step (physics, restart, pql's own work) per pql row",
    )
    parser.add_argument(
        "--profile-csv", default=None, help="write the profile's parts to this CSV file (implies --profile)"
    )
    args = parser.parse_args()
    profile = args.profile or args.profile_csv is not None
    devices = args.devices or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rollout_sizes = args.sizes if args.rollout_sizes is None else args.rollout_sizes
    cores = len(os.sched_getaffinity(0))
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(
        f"{args.task} env steps/s; {cores} CPU cores, {gpu}, torch {torch.__version__}, "
        f"{args.seconds:g} s per row{' (and as long again for the profile)' if profile else ''}",
        flush=True,
    )

    csv_rows = CsvRows(args.csv, ["task", "row", "device", "num_envs", "env_steps_per_s", "error"])
    profile_rows = CsvRows(args.profile_csv, ["task", "row", "device", "num_envs", "part", "ms_per_step", "share"])
    rows, profiles = [], []

    def add(name: str, device: str, n: int, measure) -> None:
        """measure() -> (env steps/s, StepProfile or None)."""
        try:
            (rate, parts), error = measure(), None
        except Exception as e:  # one failing row (OOM at the largest N) must not lose the others
            message = str(e).strip().splitlines()
            rate, parts = None, None
            error = f"{type(e).__name__}: {message[0]}" if message else type(e).__name__
        rows.append((name, device, n, rate, error))
        csv_rows.write(
            task=args.task,
            row=name,
            device=device,
            num_envs=n,
            env_steps_per_s=None if rate is None else f"{rate:.1f}",
            error=error,
        )
        result = f"{rate:>12,.0f} steps/s" if error is None else f"failed: {error}"
        print(f"  {name:32} {device:5} N={n:<6} {result}", flush=True)
        if parts is not None:
            profiles.append((name, device, n, parts))
            for part in PARTS:
                profile_rows.write(
                    task=args.task,
                    row=name,
                    device=device,
                    num_envs=n,
                    part=part,
                    ms_per_step=f"{parts.ms[part]:.6g}",
                    share=f"{parts.share(part):.4f}",
                )

    for backend in args.backends:
        for device in devices:
            if backend == "mujoco" and device != "cpu":
                continue  # MuJoCo C steps on the CPU; its state would only be copied to the GPU
            for n in args.sizes:
                add(
                    f"pql {backend}",
                    device,
                    n,
                    lambda: pql_env_rate(args.task, n, device, backend, args.seconds, profile),
                )
    gym_sizes = args.gym_sizes if args.task in GYMNASIUM_TASKS else []  # no <Task>-v5 to compare with
    for n in gym_sizes:
        add("gymnasium sync", "cpu", n, lambda: (gymnasium_rate(args.task, n, args.seconds), None))
    for n in args.gym_sizes if args.task in DMC_TASKS else []:
        add("dm_control loop", "cpu", n, lambda: (dm_control_rate(args.task, n, args.seconds), None))
    for vectorization in ("async", "sync"):
        for n in args.adapter_sizes if args.task in GYMNASIUM_TASKS else []:
            add(
                f"pql gym:{args.task}-v5 {vectorization}",
                "cpu",
                n,
                lambda: (gym_adapter_rate(args.task, n, vectorization, args.seconds), None),
            )
    for n in rollout_sizes:
        add("mujoco rollout (physics only)", "cpu", n, lambda: (rollout_rate(args.task, n, args.seconds), None))
    csv_rows.close()
    profile_rows.close()

    print(f"\n| {args.task} | device | N | env steps/s |\n|---|---|---:|---:|")
    for name, device, n, rate, _ in rows:
        print(f"| {name} | {device} | {n} | {'failed' if rate is None else f'{rate:,.0f}'} |")
    for name, device, n, parts in profiles:
        print(f"\n| {args.task}, {name}, {device}, N={n} | ms per step | share |\n|---|---:|---:|")
        for part in PARTS:
            print(f"| {PART_LABELS[part]} | {parts.ms[part]:.3f} | {parts.share(part):.0%} |")
    if any(error is not None for *_, error in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
