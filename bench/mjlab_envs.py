"""mjlab's tasks through pql (examples/mjlab_task.py) against mjlab's own loop and its own PPO.
Needs mjlab beside pql (docs/own_env.md, "mjlab"). Run by hand, never in CI.

    python bench/mjlab_envs.py throughput [--tasks ID ...] [--sizes 64 ...] [--seconds 10] [--device cpu]
    python bench/mjlab_envs.py race --task ID [--seconds 900] [--num-envs N] [--device cpu] [--out DIR]
                               [--pql-overrides KEY=VALUE ...]

throughput: env steps/s of each task at each env count, uniform random actions in [-1, 1] for
about `seconds` after a few warm-up steps (which also take Warp's kernel compilation), one row
per path:
    mjlab loop       mjlab's RslRlVecEnvWrapper over ManagerBasedRlEnv with its own auto-reset:
                     the loop mjlab's rsl_rl PPO steps
    pql, final obs   pql's env of examples.mjlab_task:make (auto_reset=False, finished envs reset
                     by id, their last observations handed on; the adapter's group pick, copies
                     and action checks)
    pql, auto-reset  the same with task.kwargs.final_obs=false (mjlab's auto-reset under pql's adapter)

race: pql and mjlab's PPO on one task for the same wall time, one after the other: `python
train.py task=examples.mjlab_task:make task.kwargs.task=ID task.num_envs=N runtime.max_time_s=S`,
then mjlab's own train script (`python -m mjlab.scripts.train ID --env.scene.num-envs N
--agent.logger tensorboard`, its PPO with the task's settings), stopped by SIGINT S seconds
after its start. Each side's mean return of its training episodes over the wall time since its
process started (pql: train/return of metrics.csv; PPO: Train/mean_reward, the mean of its last
100 episodes, from its TensorBoard events), and pql's evaluations, go to OUT/race.csv and one
figure, OUT/race.png. Both print the machine, the commit and the commands first.
"""

from __future__ import annotations

import argparse
import csv
import glob
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

from bench.env_throughput import factory_rate, synchronizer, timed_steps
from bench.learning import ROOT, cpu_model, git_commit

EXAMPLE = "examples.mjlab_task:make"


def mjlab_loop_rate(task: str, num_envs: int, device: str, seconds: float) -> float:
    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.rl import RslRlVecEnvWrapper
    from mjlab.tasks.registry import load_env_cfg

    cfg = load_env_cfg(task)
    cfg.scene.num_envs, cfg.seed = num_envs, 0
    env = RslRlVecEnvWrapper(ManagerBasedRlEnv(cfg=cfg, device=device))
    gen = torch.Generator(device=env.device).manual_seed(0)
    step = lambda: env.step(torch.rand((num_envs, env.num_actions), generator=gen, device=env.device) * 2 - 1)
    calls, elapsed = timed_steps(step, seconds, synchronizer(env.device))
    env.close()
    return num_envs * calls / elapsed


def throughput(args) -> None:
    print(f"| task | envs | path | env steps/s ({args.device}) |\n|---|---|---|---|", flush=True)
    for task in args.tasks:
        for n in args.sizes:
            where = (n, args.device, args.seconds)
            rows = {
                "mjlab loop": lambda: mjlab_loop_rate(task, *where),
                "pql, final obs": lambda: factory_rate(EXAMPLE, *where, {"task": task, "final_obs": True}),
                "pql, auto-reset": lambda: factory_rate(EXAMPLE, *where, {"task": task, "final_obs": False}),
            }
            for path, rate in rows.items():
                print(f"| {task} | {n} | {path} | {rate():,.0f} |", flush=True)


def ppo_curve(log_root: str) -> list[tuple[float, float]]:
    """(seconds since the first event, Train/mean_reward) of the PPO run under log_root."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = glob.glob(os.path.join(log_root, "**", "events.out.tfevents.*"), recursive=True)
    if not files:
        return []
    events = EventAccumulator(os.path.dirname(files[0]))
    events.Reload()
    if "Train/mean_reward" not in events.Tags()["scalars"]:
        return []
    return [(e.wall_time, e.value) for e in events.Scalars("Train/mean_reward")]


def pql_curves(run_dir: str) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(wall time, train/return) and (wall time, eval/return) rows of a pql run's metrics.csv, the
    former where episodes finished."""
    train, evals = [], []
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
        for row in csv.DictReader(f):
            t = float(row["wall_time_s"])
            if row.get("train/return"):  # empty until an episode has finished
                train.append((t, float(row["train/return"])))
            if row.get("eval/return"):
                evals.append((t, float(row["eval/return"])))
    return train, evals


def race(args) -> None:
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    pql_dir, ppo_root = os.path.join(out, "pql"), os.path.join(out, "ppo")
    device_env = dict(
        os.environ, CUDA_VISIBLE_DEVICES="" if args.device == "cpu" else os.environ.get("CUDA_VISIBLE_DEVICES", "0")
    )
    pql_cmd = [
        sys.executable,
        "train.py",
        f"task={EXAMPLE}",
        f"task.kwargs.task={args.task}",
        f"task.num_envs={args.num_envs}",
        f"runtime.max_time_s={args.seconds}",
        f"hydra.run.dir={pql_dir}",
        *args.pql_overrides,
    ]
    ppo_cmd = [
        sys.executable,
        "-m",
        "mjlab.scripts.train",
        args.task,
        "--env.scene.num-envs",
        str(args.num_envs),
        "--agent.logger",
        "tensorboard",
        "--agent.max-iterations",
        "1000000",
        "--log-root",
        ppo_root,
    ]
    for name, cmd in (("pql", pql_cmd), ("mjlab PPO", ppo_cmd)):
        print(f"bench/mjlab_envs.py: {name}: {' '.join(cmd)}", flush=True)
    started = time.time()
    subprocess.run(pql_cmd, cwd=ROOT, env=device_env, check=True, stdout=subprocess.DEVNULL)
    print(f"bench/mjlab_envs.py: pql ran {time.time() - started:.0f} s", flush=True)
    ppo_start = time.time()
    with open(os.path.join(out, "ppo.log"), "w") as log:
        proc = subprocess.Popen(ppo_cmd, cwd=out, env=device_env, stdout=log, stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=args.seconds)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)  # KeyboardInterrupt: its TensorBoard writer flushes on the way out
            proc.wait(timeout=60)
    print(f"bench/mjlab_envs.py: mjlab PPO ran {time.time() - ppo_start:.0f} s", flush=True)
    ppo = [(t - ppo_start, v) for t, v in ppo_curve(ppo_root)]
    train, evals = pql_curves(pql_dir)
    with open(os.path.join(out, "race.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["curve", "seconds", "return"])
        for curve, rows in (("pql train", train), ("pql eval", evals), ("mjlab ppo train", ppo)):
            writer.writerows((curve, f"{t:.1f}", f"{v:.4g}") for t, v in rows)
    summary = {
        "pql train, last": train[-1][1] if train else float("nan"),
        "pql eval, last": evals[-1][1] if evals else float("nan"),
        "mjlab PPO train, last": ppo[-1][1] if ppo else float("nan"),
    }
    print("bench/mjlab_envs.py: " + ", ".join(f"{k} {v:.3g}" for k, v in summary.items()), flush=True)
    plot(args.task, train, evals, ppo, os.path.join(out, "race.png"))
    print(f"bench/mjlab_envs.py: wrote {out}/race.csv and {out}/race.png", flush=True)


def plot(task, train, evals, ppo, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for rows, label, style in (
        (train, "pql, training episodes", "-"),
        (evals, "pql, evaluations", "o-"),
        (ppo, "mjlab's PPO, training episodes (last 100)", "-"),
    ):
        if rows:
            ax.plot([t / 60 for t, _ in rows], [v for _, v in rows], style, label=label)
    ax.set_xlabel("wall time since the process started (minutes)")
    ax.set_ylabel("return")
    ax.set_title(task)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--tasks", nargs="+", default=["Mjlab-Cartpole-Balance", "Mjlab-Velocity-Flat-Unitree-Go1"])
    t.add_argument("--sizes", type=int, nargs="+", default=[64])
    t.add_argument("--seconds", type=float, default=10.0)
    t.add_argument("--device", default="cpu")
    r = sub.add_parser("race")
    r.add_argument("--task", default="Mjlab-Cartpole-Swingup")
    r.add_argument("--seconds", type=int, default=900)
    r.add_argument("--num-envs", type=int, default=128)
    r.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    r.add_argument("--out", default="runs/mjlab-race")
    r.add_argument("--pql-overrides", nargs="*", default=[])
    args = parser.parse_args()
    print(f"bench/mjlab_envs.py: machine {cpu_model()}, {os.cpu_count()} cores; torch {torch.__version__}", flush=True)
    print(f"bench/mjlab_envs.py: commit {git_commit()}", flush=True)
    throughput(args) if args.command == "throughput" else race(args)


if __name__ == "__main__":
    main()
