"""A suite of tasks under named sets of overrides (candidates), one run after another, for a
wall-clock or env-step budget each: how a change to the learner does across tasks, measured the
same way for every candidate. Run by hand, never in CI.

    python bench/suite.py --tasks SUITE_OR_TASK ... --candidates NAME ... [--seconds S | --env-steps N]
                          [--seeds N] [--out DIR] [--list]

A task is any `task=` name (dmc/humanoid-run, Ant, ...) or a suite's name (SUITES below, e.g.
`hard`). A candidate is a name of CANDIDATES below, or `NAME=OVERRIDE,OVERRIDE,...` for one made
on the command line (`probe=algo=sac,algo.value=categorical`). Every run is `python train.py
task=<task> <candidate's overrides> runtime.seed=<s>` plus the budget (none: the device's default,
on a CPU README's 15 minutes; runtime.max_time_s=S; or runtime.max_env_steps=N with no time limit),
as a subprocess from the repository root with no GPU visible (CPU figures; --gpu lets it see one),
writing to OUT/<candidate>/<task>/seed<s>.

The order is task-major: every candidate on the first task, then on the next, so that a report cut
short compares the candidates on the tasks it reached, and a slow day of the machine falls on all
of them alike. Each candidate's table is OUT/<candidate>.md and OUT/<candidate>.csv, rewritten
after every run, one row per run: the task, the seed, the final evaluation's return, the mean of
the last five evaluations, the best evaluation, the env steps and the wall time of the training,
and the command. OUT/summary.md puts the candidates side by side (mean of the last five, per task;
with several seeds, their mean). Both files are headed by the machine: its CPU, a 2-thread sgemm
as the day's speed, torch, MuJoCo, the commit. A run's replay files are deleted once it is read
(a 15-minute run's replay is about a gigabyte); its train.log, metrics.csv and checkpoint.pt stay.

Exit code 0 when every run finished, 1 otherwise, 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import math
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass

# Run as `python bench/suite.py`, Python puts bench/ on sys.path, not the repository root.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.learning import ROOT, STDERR, cpu_model, git_commit, sgemm_gflops

SUITES = {
    # The DeepMind Control Suite's tasks where pql fell furthest behind, its smooth runners, and the
    # Gymnasium tasks README reports: the learner's suite (docs/benchmarks.md).
    "learner": [
        "dmc/humanoid-run",
        "dmc/dog-run",
        "dmc/hopper-hop",
        "dmc/walker-run",
        "dmc/cheetah-run",
        "Ant",
        "Humanoid",
    ],
    "hard": ["dmc/humanoid-run", "dmc/dog-run"],
    # The PQL paper's six tasks, as pql has them (Gymnasium's Ant and Humanoid for Isaac Gym's).
    "paper": ["Ant", "Humanoid", "Anymal", "ShadowHandCube", "AllegroHand", "FrankaCubeStack"],
    # The robots of IsaacGymEnvs' tasks (docs/tasks.md).
    "robots": ["Anymal", "AllegroHand", "FrankaCubeStack"],
    "dmc": ["dmc/humanoid-run", "dmc/dog-run", "dmc/hopper-hop", "dmc/walker-run", "dmc/cheetah-run"],
    "gym": ["Ant", "Humanoid"],
}

# The learners compared (docs/tuning.md says what each element is for and how it did). The
# residual networks are sized for 2 CPU cores, one block of width 128 each, and compiled: a
# hyperspherical critic of that size made 131 updates/s on humanoid-run at batch 128 eager, 196
# compiled, the MLP's 220 eager (docs/benchmarks.md, "the learner's options").
NORMALIZED = ("algo.value=categorical", "algo.return_scaling=true")
# SAC's temperature starts where SimbaV2's and FlashSAC's does: with the return scaled to about
# ±5, SAC's default 0.1 let the entropy bonus swamp the reward (humanoid-run stayed at 1.2).
SAC = ("algo=sac", "algo.init_alpha=0.01")
RESIDUAL_CPU = ("algo.net.critic_hidden=[128]", "algo.net.actor_hidden=[128]", "runtime.compile=true")
CANDIDATES: dict[str, tuple[str, ...]] = {
    "defaults": (),
    # The baselines on the same runtime, at their defaults (the paper's comparison).
    "sac": ("algo=sac",),
    "ppo": ("algo=ppo",),
    # The categorical value on the fixed, return-scaled support, alone.
    "pql-categorical": NORMALIZED,
    "sac-categorical": (*SAC, *NORMALIZED),
    # The same heads and support trained toward HL-Gauss's histogram of the scalar target.
    "pql-hlgauss": ("algo.value=hl_gauss", "algo.return_scaling=true"),
    # With noise held for Zeta-long spans.
    "pql-held": (*NORMALIZED, "algo.noise_hold=16"),
    # SimbaV2's form: hyperspherical networks.
    "pql-hyperspherical": (*NORMALIZED, "algo.net.kind=hyperspherical", *RESIDUAL_CPU),
    "sac-hyperspherical": (*SAC, *NORMALIZED, "algo.net.kind=hyperspherical", *RESIDUAL_CPU),
    # FlashSAC's form: batch-normalized networks, held noise, the fixed-σ entropy target.
    "sac-batchnorm": (
        *SAC,
        *NORMALIZED,
        "algo.net.kind=batchnorm",
        *RESIDUAL_CPU,
        "algo.noise_hold=16",
        "algo.target_entropy_std=0.15",
    ),
}

NO_TIME_LIMIT_S = 7 * 24 * 3600  # --env-steps's runtime.max_time_s: a week, none in effect
LAST_EVALS = 5  # "the mean of the last five evaluations"


@dataclass
class Result:
    """One run's row."""

    candidate: str
    task: str
    seed: int
    final: float
    last5: float
    best: float
    evaluations: int
    env_steps: int | None
    wall_s: float
    command: str
    note: str = ""  # why the run failed
    metrics: str = ""  # the final evaluation's episode metrics (Anymal's tracking errors, ...)


def parse_candidate(spec: str) -> tuple[str, tuple[str, ...]]:
    """A candidate's name and overrides: a name of CANDIDATES, or NAME=OVERRIDE,OVERRIDE,..."""
    if spec in CANDIDATES:
        return spec, CANDIDATES[spec]
    name, sep, overrides = spec.partition("=")
    if not sep or not name or name in CANDIDATES or "/" in name:
        raise ValueError(
            f"unknown candidate {spec!r}; expected one of {', '.join(CANDIDATES)}, or NAME=OVERRIDE,... "
            "with a new NAME (no slash)"
        )
    return name, tuple(o for o in overrides.split(",") if o)


def expand_tasks(names: list[str]) -> list[str]:
    """Suites expanded in place, duplicates dropped, order kept."""
    tasks: list[str] = []
    for name in names:
        tasks.extend(SUITES.get(name, [name]))
    return list(dict.fromkeys(tasks))


def budget_overrides(seconds: float | None, env_steps: int | None) -> list[str]:
    """The runs' budget: the device's default (on a CPU, README's 15 minutes: runtime.max_time_s
    885) unless --seconds or --env-steps says otherwise."""
    if env_steps is not None:
        # null would be the device's default, 885 s on a CPU.
        return [f"runtime.max_env_steps={env_steps}", f"runtime.max_time_s={NO_TIME_LIMIT_S}"]
    return [] if seconds is None else [f"runtime.max_time_s={seconds:g}"]


def run_dir_of(out: str, candidate: str, task: str, seed: int) -> str:
    return os.path.join(out, candidate, task.replace("/", "-").replace(":", "-"), f"seed{seed}")


# An evaluation's own columns of metrics.csv; any other eval/ column is an episode metric of the task.
EVAL_BOOKKEEPING = ("eval/return", "eval/length", "eval/policy_version", "eval/env_steps")


def summarize(run_dir: str) -> tuple[float, float, float, int, int | None, str]:
    """(final, mean of the last five, best, evaluations, env steps, the final evaluation's episode
    metrics as "name value, ...") of a finished run's metrics.csv."""
    import numpy as np

    from pql.logging import EVAL_RETURN, METRICS_CSV, read_metrics

    metrics = read_metrics(os.path.join(run_dir, METRICS_CSV))
    evals = metrics.get(EVAL_RETURN, np.array([]))
    ok = np.isfinite(evals)
    scores = evals[ok]
    steps = metrics.get("env_steps", np.array([]))
    env_steps = int(np.nanmax(steps)) if len(steps) and np.isfinite(steps).any() else None
    if not len(scores):
        return math.nan, math.nan, math.nan, 0, env_steps, ""
    episode_metrics = ", ".join(
        f"{key.removeprefix('eval/')} {fmt(float(values[ok][-1]))}"
        for key, values in metrics.items()
        if key.startswith("eval/") and key not in EVAL_BOOKKEEPING
    )
    final, last5, best = float(scores[-1]), float(scores[-LAST_EVALS:].mean()), float(scores.max())
    return final, last5, best, len(scores), env_steps, episode_metrics


def launch(candidate: str, overrides: tuple[str, ...], task: str, seed: int, budget: list[str], out: str, gpu: bool):
    from pql.bulk import remove_unreferenced

    args = [f"task={task}", *overrides, f"runtime.seed={seed}", *budget]
    run_dir = run_dir_of(out, candidate, task, seed)
    command = shlex.join(["python", "train.py", *args])
    print(f"bench/suite.py: {candidate} / {task} / seed {seed}: {command}", flush=True)
    os.makedirs(run_dir)
    env = dict(os.environ) if gpu else {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    start = time.perf_counter()
    with open(os.path.join(run_dir, STDERR), "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "train.py", *args, f"hydra.run.dir={run_dir}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            proc.wait()
        except KeyboardInterrupt:
            proc.wait()  # the run got the Ctrl-C too: it checkpoints and stops its roles first
            raise
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        with open(os.path.join(run_dir, STDERR)) as err:
            lines = [line.strip() for line in err if line.strip()]
        note = f"train.py exited {proc.returncode}: {lines[-1] if lines else ''}"
        return Result(candidate, task, seed, math.nan, math.nan, math.nan, 0, None, wall, command, note)
    final, last5, best, evaluations, env_steps, episode_metrics = summarize(run_dir)
    remove_unreferenced(run_dir, set())
    return Result(candidate, task, seed, final, last5, best, evaluations, env_steps, wall, command, "", episode_metrics)


def machine_header(budget: list[str]) -> dict[str, str]:
    import mujoco
    import torch

    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": f"{cpu_model()}, {os.cpu_count()} cores",
        "sgemm": f"{sgemm_gflops():.0f} GFLOP/s (2048² float32, 2 threads)",
        "software": f"torch {torch.__version__}, mujoco {mujoco.__version__}, Python {sys.version.split()[0]}",
        "commit": git_commit(),
        "budget": " ".join(budget) or "the device's defaults (a CPU: runtime.max_time_s=885)",
    }


def fmt(x: float) -> str:
    if not math.isfinite(x):
        return "—"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


COLUMNS = (
    "task",
    "seed",
    "final",
    "last 5",
    "best",
    "episode metrics",
    "evaluations",
    "env steps",
    "wall s",
    "command",
)


def cells(r: Result) -> list[str]:
    final = fmt(r.final) + (f" ({r.note})" if r.note else "")
    steps = "—" if r.env_steps is None else f"{r.env_steps:,}"
    return [
        r.task,
        str(r.seed),
        final,
        fmt(r.last5),
        fmt(r.best),
        r.metrics or "—",
        str(r.evaluations),
        steps,
        f"{r.wall_s:.0f}",
        f"`{r.command}`",
    ]


def header_lines(title: str, header: dict[str, str]) -> list[str]:
    return [f"# {title}", ""] + [f"- {k}: {v}" for k, v in header.items()] + [""]


def write_candidate(out: str, header: dict[str, str], name: str, overrides: tuple[str, ...], rows: list[Result]):
    lines = header_lines(f"bench/suite.py: {name}", {**header, "overrides": " ".join(overrides) or "(none)"})
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    with open(os.path.join(out, f"{name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, f"{name}.csv"), "w", newline="") as f:
        f.writelines(f"# {k}: {v}\n" for k, v in {**header, "overrides": " ".join(overrides)}.items())
        writer = csv.writer(f)
        writer.writerow(
            ["task", "seed", "final", "last5", "best", "metrics", "evaluations", "env_steps", "wall_s", "command"]
        )
        writer.writerows(
            [r.task, r.seed, r.final, r.last5, r.best, r.metrics]
            + [r.evaluations, r.env_steps or "", f"{r.wall_s:.1f}", r.command]
            for r in rows
        )


def summary(header: dict[str, str], candidates: list[str], tasks: list[str], results: list[Result]) -> str:
    """Mean of the last five evaluations per task (columns) and candidate (rows), seeds averaged."""
    lines = header_lines("bench/suite.py: the mean of the last five evaluations", header)
    lines += ["| candidate | " + " | ".join(tasks) + " |", "|" + "---|" * (len(tasks) + 1)]
    for name in candidates:
        row = []
        for task in tasks:
            got = [r.last5 for r in results if r.candidate == name and r.task == task]
            finite = [x for x in got if math.isfinite(x)]
            cell = fmt(sum(finite) / len(finite)) if finite else ("failed" if got else "")
            row.append(cell + (f" ({len(finite)} seeds)" if len(finite) > 1 else ""))
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


CURVES = "curves.png"


def plot_curves(out: str, finished: list[Result]) -> None:
    """OUT/curves.png: every finished run's evaluation returns against wall time, one panel per
    task, each candidate a curve (the seeds' mean where there are several): the candidates at
    equal wall time. Rewritten after each task."""
    from pql.plot import main as plot

    if finished:
        dirs = [run_dir_of(out, r.candidate, r.task, r.seed) for r in finished]
        plot([*dirs, "--x", "wall_time", "--mean-seeds", "--out", os.path.join(out, CURVES)])


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--tasks", nargs="+", default=["learner"], help="tasks or suites (default: learner)")
    p.add_argument("--candidates", nargs="+", default=["defaults"], help="candidates (default: defaults)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument(
        "--seconds", type=float, default=None, help="each run's wall-time budget (default: the device's, 885 on a CPU)"
    )
    budget.add_argument("--env-steps", type=int, default=None, help="each run's env-step budget, no time limit")
    p.add_argument("--seeds", type=int, default=1, help="runs seeds 0 .. N-1 (default 1)")
    p.add_argument("--out", help="report directory (default runs/bench_suite/<date_time>)")
    p.add_argument("--gpu", action="store_true", help="let the runs see the GPU (GPU figures)")
    p.add_argument("--list", action="store_true", help="print the suites and candidates and exit")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error(f"--seeds must be >= 1, got {args.seeds}")
    if args.seconds is not None and args.seconds <= 0:
        p.error(f"--seconds must be > 0, got {args.seconds:g}")
    if args.env_steps is not None and args.env_steps <= 0:
        p.error(f"--env-steps must be > 0, got {args.env_steps}")
    try:
        args.parsed = dict(parse_candidate(c) for c in args.candidates)
    except ValueError as e:
        p.error(str(e))
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.list:
        for name, tasks in SUITES.items():
            print(f"suite {name:<20}{' '.join(tasks)}")
        for name, overrides in CANDIDATES.items():
            print(f"candidate {name:<20}{' '.join(overrides) or '(the defaults)'}")
        return 0
    tasks = expand_tasks(args.tasks)
    out = os.path.abspath(
        args.out or os.path.join("runs", "bench_suite", datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S"))
    )
    taken = [
        d
        for name in args.parsed
        for task in tasks
        for seed in range(args.seeds)
        if os.path.exists(d := run_dir_of(out, name, task, seed))
    ]
    if taken:
        print(f"bench/suite.py: {taken[0]} exists; give another --out", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    budget = budget_overrides(args.seconds, args.env_steps)
    header = machine_header(budget)
    for k, v in header.items():
        print(f"bench/suite.py: {k}: {v}", flush=True)
    results: list[Result] = []
    for task in tasks:
        for seed in range(args.seeds):
            for name, overrides in args.parsed.items():
                r = launch(name, overrides, task, seed, budget, out, args.gpu)
                results.append(r)
                print(
                    f"bench/suite.py: {name} / {task} / seed {seed}: final {fmt(r.final)}, last 5 {fmt(r.last5)}, "
                    f"{r.env_steps or 0:,} env steps in {r.wall_s:.0f} s{(' — ' + r.note) if r.note else ''}",
                    flush=True,
                )
                write_candidate(out, header, name, overrides, [x for x in results if x.candidate == name])
                report = summary(header, list(args.parsed), tasks, results)
                with open(os.path.join(out, "summary.md"), "w") as f:
                    f.write(report)
        plot_curves(out, [r for r in results if not r.note])
    print("\n" + report + f"\nwritten: {out}/summary.md, one .md and .csv per candidate, and {CURVES}", flush=True)
    return 0 if all(not r.note for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
