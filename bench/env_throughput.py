"""Batched env throughput: env steps/s of a task for several env counts, per backend and device,
next to Gymnasium's own synchronous vector env and MuJoCo's raw multi-threaded physics.

    python bench/env_throughput.py [--task Ant] [--sizes 64 1024 4096] [--seconds 5]
                                   [--backends mujoco mjwarp] [--devices cpu cuda]
                                   [--gym-sizes 64 1024] [--rollout-sizes N ...] [--csv PATH]

Every row steps `N` envs with uniform random actions in the action box for about `seconds`
(after a few warm-up steps that also absorb Warp's kernel compilation and CUDA graph capture)
and reports N × steps / elapsed. The env rows are the full protocol: physics, task logic in
torch (observation, reward, termination), auto-reset and the action checks. The two reference
rows are not: "gymnasium sync" is `gymnasium.vector.SyncVectorEnv` of `<Task>-v5` (one MjData
per env, stepped in a Python loop), and "mujoco rollout (physics only)" is `mujoco.rollout` with
one thread per core stepping the same model and frame skip with no task logic at all: what the
physics alone costs on this machine. `--gym-sizes` and `--rollout-sizes` with no value leave
those rows out.

A row that raises (out of memory at the largest size, say) prints its error and the bench goes
on with the next row; the exit code is then 1. --csv writes each row as it is measured
(task, row, device, num_envs, env_steps_per_s, error).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tasks  # noqa: E402
from learner import CsvRows  # noqa: E402  (bench/learner.py)
from tasks.mujoco import TASKS  # noqa: E402
from tasks.mujoco.task import load_asset  # noqa: E402

WARMUP_STEPS = 3


def timed_steps(step, seconds: float, sync=lambda: None) -> tuple[int, float]:
    """Call step() for about `seconds` after WARMUP_STEPS calls. -> (calls, elapsed seconds)."""
    for _ in range(WARMUP_STEPS):
        step()
    sync()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        calls += 1
    sync()
    return calls, time.perf_counter() - start


def pql_env_rate(task: str, num_envs: int, device: str, backend: str, seconds: float) -> float:
    env = tasks.make(task, num_envs=num_envs, device=device, seed=0, backend=backend)
    env.reset()
    gen = torch.Generator(device=device).manual_seed(0)
    low, high = env.action_low, env.action_high

    def step():
        u = torch.rand((num_envs, env.act_dim), generator=gen, device=device)
        env.step(low + u * (high - low))

    sync = (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else (lambda: None)
    calls, elapsed = timed_steps(step, seconds, sync)
    env.close()
    return num_envs * calls / elapsed


def gymnasium_rate(task: str, num_envs: int, seconds: float) -> float:
    import gymnasium

    envs = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make(f"{task}-v5") for _ in range(num_envs)])
    envs.reset(seed=0)
    envs.action_space.seed(0)
    calls, elapsed = timed_steps(lambda: envs.step(envs.action_space.sample()), seconds)
    envs.close()
    return num_envs * calls / elapsed


def rollout_rate(task: str, num_envs: int, seconds: float) -> float:
    """MuJoCo's physics alone: mujoco.rollout over num_envs worlds, one thread per core."""
    import mujoco
    from mujoco import rollout

    model = load_asset(TASKS[task].xml)
    frame_skip = TASKS[task].frame_skip
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
    parser.add_argument("--task", default="Ant", choices=tasks.TASK_NAMES)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 1024, 4096])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--backends", nargs="+", default=["mujoco", "mjwarp"], choices=["mujoco", "mjwarp"])
    parser.add_argument("--devices", nargs="+", default=None,
                        help="default: cpu, and cuda when it is available")
    parser.add_argument("--gym-sizes", type=int, nargs="*", default=[64, 1024],
                        help="sizes for Gymnasium's SyncVectorEnv (it holds one Python env per copy)")
    parser.add_argument("--rollout-sizes", type=int, nargs="*", default=None,
                        help="sizes for the mujoco.rollout physics-only row (default: --sizes)")
    parser.add_argument("--csv", default=None, help="also write the rows to this CSV file")
    args = parser.parse_args()
    devices = args.devices or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rollout_sizes = args.sizes if args.rollout_sizes is None else args.rollout_sizes
    cores = len(os.sched_getaffinity(0))
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(f"{args.task} env steps/s; {cores} CPU cores, {gpu}, torch {torch.__version__}, "
          f"{args.seconds:g} s per row", flush=True)

    csv_rows = CsvRows(args.csv, ["task", "row", "device", "num_envs", "env_steps_per_s", "error"])
    rows = []

    def add(name: str, device: str, n: int, measure) -> None:
        try:
            rate, error = measure(), None
        except Exception as e:  # one failing row (OOM at the largest N) must not lose the others
            message = str(e).strip().splitlines()
            rate, error = None, f"{type(e).__name__}: {message[0]}" if message else type(e).__name__
        rows.append((name, device, n, rate, error))
        csv_rows.write(task=args.task, row=name, device=device, num_envs=n,
                       env_steps_per_s=None if rate is None else f"{rate:.1f}", error=error)
        result = f"{rate:>12,.0f} steps/s" if error is None else f"failed: {error}"
        print(f"  {name:32} {device:5} N={n:<6} {result}", flush=True)

    for backend in args.backends:
        for device in devices:
            if backend == "mujoco" and device != "cpu":
                continue  # MuJoCo C steps on the CPU; its state would only be copied to the GPU
            for n in args.sizes:
                add(f"pql {backend}", device, n, lambda: pql_env_rate(args.task, n, device, backend, args.seconds))
    for n in args.gym_sizes:
        add("gymnasium sync", "cpu", n, lambda: gymnasium_rate(args.task, n, args.seconds))
    for n in rollout_sizes:
        add("mujoco rollout (physics only)", "cpu", n, lambda: rollout_rate(args.task, n, args.seconds))
    csv_rows.close()

    print(f"\n| {args.task} | device | N | env steps/s |\n|---|---|---:|---:|")
    for name, device, n, rate, error in rows:
        print(f"| {name} | {device} | {n} | {'failed' if rate is None else f'{rate:,.0f}'} |")
    if any(error is not None for *_, error in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
