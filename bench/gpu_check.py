"""One command for a CUDA machine: the GPU kernel tests, the benchmarks, a short training run and
its resume, measured in one go and written up as one Markdown report.

    python bench/gpu_check.py [--out DIR] [--runs-dir DIR] [--steps STEP ...] [--without-mps]
                              [--budget-s 560] [--train-seconds 180] [--resume-seconds 45]

Steps, in this order, each a subprocess with its own time limit (a step that fails or hangs is
stopped, recorded with the last lines of its output, and the check goes on with the next):

    tests    python -m pytest tests/kernels -m gpu
    env      bench/env_throughput.py --profile: Ant on MuJoCo Warp (CUDA) at 4,096 / 16,384 / 32,768
             envs, and the parts of one step (physics, restart, pql's own work)
    learner  bench/learner.py at batch 8,192, its together run on the MPS path of a training run
             (runtime.mps=auto); with --without-mps a second time with --mps off (learner_no_mps)
    kernels  bench/kernels.py: Triton vs the PyTorch reference vs torchrl (where it loads)
    train    python train.py task=Ant runtime.max_time_s=180
    resume   python train.py task=Ant checkpoint=<train run>/checkpoint.pt runtime.max_time_s=45,
             and a check that its env-step counter went on from the checkpoint's
    plot     python -m pql.plot on the train run: its return curve

The report directory (--out; default runs/gpu_check/<date_time>) receives report.md, log.txt
(every step's whole output), the benches' CSVs (env_throughput.csv, env_profile.csv, learner.csv,
learner_no_mps.csv with --without-mps, kernels.csv), targets.csv (one row per H100/H200 target:
name, target, measured, unit, met, gpu) and return_curve.png: at most 9 files. report.md and
targets.csv are rewritten after every step. The two training runs go to --runs-dir (default
<report dir>/runs). --budget-s bounds the whole check: a step gets at most the time left, and the
train run is shortened when less than its length is left.

Exit code: 0 when every step passed; 1 when one failed, timed out or was skipped; 2 without a
CUDA device (one line on stderr, before any work) or with bad arguments.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import importlib.metadata
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "bench")]

from kernels import table_rows as kernel_table_rows  # noqa: E402  (bench/kernels.py)

from pql.checkpoint import CheckpointError, load_checkpoint  # noqa: E402
from pql.logging import EVAL_RETURN, METRICS_CSV, read_metrics  # noqa: E402
from pql.runtime.mps import pipe_directory  # noqa: E402

STEPS = ("tests", "env", "learner", "kernels", "train", "resume", "plot")
OK, FAILED, TIMED_OUT, SKIPPED = "ok", "failed", "timed out", "skipped"
ENV_SIZES = (4096, 16384, 32768)
TARGET_ENVS = 32768  # the env target's size, the largest of ENV_SIZES
BATCH = 8192
# Time a training run takes beyond its runtime.max_time_s: process start, CUDA and Warp kernel
# loading (compiling, on a cold cache), the final evaluation and checkpoint: what a run is expected
# to need when budgeting, and what it may take before it is stopped. Measured on an H200: 41-57 s
# beyond a 104-s and a 30-s run sharing the GPU with four others
# (docs/notes/2026-11-26-gpu-check-and-halfcheetah-posture.md).
EXPECTED_OVERHEAD_S, RUN_OVERHEAD_S = 60.0, 120.0
MIN_RUN_S = 20.0  # shorter than this, a run would show nothing: skip it instead
PLOT_RESERVE_S = 15.0
MIN_STEP_S = 20.0  # a bench or the tests with less time left than this are skipped
TAIL_LINES = 25
FILES = {
    "report": "report.md",
    "log": "log.txt",
    "env": "env_throughput.csv",
    "env_profile": "env_profile.csv",
    "learner": "learner.csv",
    "learner_no_mps": "learner_no_mps.csv",
    "kernels": "kernels.csv",
    "targets": "targets.csv",
    "curve": "return_curve.png",
}
TARGET_COLUMNS = ["name", "target", "measured", "unit", "met", "gpu"]
RETURN_BY_S = 300.0  # the wall time by which the train run's return is measured (return_at_5_min)


@dataclasses.dataclass
class Step:
    name: str
    title: str
    argv: list[str]
    timeout_s: float


@dataclasses.dataclass
class StepResult:
    name: str
    title: str
    command: str
    status: str
    seconds: float = 0.0
    detail: str = ""  # the exit code, the time limit, or why it did not run
    output: str = ""  # the step's whole output (stdout and stderr)

    def tail(self, lines: int = TAIL_LINES) -> list[str]:
        return self.output.rstrip().splitlines()[-lines:]


@dataclasses.dataclass(frozen=True)
class Eval:
    """One evaluation a training run logged."""

    env_steps: int
    wall_s: float  # the run's wall time when it was logged
    eval_return: float


@dataclasses.dataclass
class RunSummary:
    """A training run as its files tell it."""

    max_time_s: float
    env_steps: int | None  # the checkpoint's env-step counter; None: no readable checkpoint
    wall_s: float | None  # the last metrics.csv row's wall time
    evals: list[Eval]  # in order
    eval_s: list[float] = dataclasses.field(default_factory=list)  # each evaluation's seconds (time/eval_s)
    eval_share: float | None = None  # the last time/eval_share: evaluation seconds / elapsed


@dataclasses.dataclass
class Figures:
    """Everything the report shows besides the step table, read from the steps' files."""

    env: list[dict] = dataclasses.field(default_factory=list)
    env_profile: list[dict] = dataclasses.field(default_factory=list)
    learner: list[dict] = dataclasses.field(default_factory=list)
    learner_no_mps: list[dict] = dataclasses.field(default_factory=list)
    kernels: list[dict] = dataclasses.field(default_factory=list)
    tests_summary: str | None = None
    train: RunSummary | None = None
    resume: RunSummary | None = None
    resume_start: int | None = None  # the env steps the resume said it started from
    unreleased: list[str] | None = None  # the training runs after which torch warned (None: none ran)
    curve: str | None = None  # the return curve's file name in the report directory
    mps: str | None = None  # the learner bench's line about MPS in its together run


# ---------------------------------------------------------------------------------------------
# Running a step


def command_line(argv: list[str]) -> str:
    """argv as one would type it: the interpreter as `python`, paths inside the repo relative."""

    def word(i: int, arg: str) -> str:
        if i == 0 and arg == sys.executable:
            return "python"
        return os.path.relpath(arg, ROOT) if arg.startswith(ROOT + os.sep) else arg

    return shlex.join(word(i, a) for i, a in enumerate(argv))


def exited(proc: subprocess.Popen) -> bool:
    """Whether the step's process has exited, leaving it unreaped: until it is reaped its PID,
    which is also its process group's ID, cannot be reused, so the group can still be signalled
    safely."""
    return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def wait_for_exit(proc: subprocess.Popen, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not exited(proc):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def end_group(proc: subprocess.Popen, stop: bool) -> int:
    """End the step's process group: with stop, SIGTERM first and 10 s to exit; then SIGKILL to
    whatever of the group is left (a role process that outlived train.py would hold the GPU
    through the next step). -> the step's exit code."""
    if stop:
        os.killpg(proc.pid, signal.SIGTERM)
        wait_for_exit(proc, 10.0)
    os.killpg(proc.pid, signal.SIGKILL)  # the unreaped leader keeps the group's ID valid
    return proc.wait()


def run_step(step: Step, log_path: str, time_left_s: float) -> StepResult:
    """Run one step with its output appended to log_path; stop it (and its children) at
    min(step.timeout_s, time_left_s)."""
    limit = min(step.timeout_s, time_left_s)
    command = command_line(step.argv)
    with open(log_path, "ab") as log:
        log.write(f"\n===== {step.title}: {command}  (time limit {limit:.0f} s)\n".encode())
        log.flush()
        offset = log.tell()
        start = time.monotonic()
        # A session of its own: the whole group can be ended, and a Ctrl-C in the terminal
        # reaches only the check, which then ends the step.
        proc = subprocess.Popen(
            step.argv,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
        try:
            timed_out = not wait_for_exit(proc, limit)
        except BaseException:  # Ctrl-C: leave nothing running on the GPU
            end_group(proc, stop=True)
            raise
        returncode = end_group(proc, stop=timed_out)
        seconds = time.monotonic() - start
    with open(log_path, "rb") as log:
        log.seek(offset)
        output = log.read().decode(errors="replace")
    if timed_out:
        return StepResult(
            step.name, step.title, command, TIMED_OUT, seconds, f"stopped at its {limit:.0f} s limit", output
        )
    status = OK if returncode == 0 else FAILED
    return StepResult(
        step.name, step.title, command, status, seconds, "" if status == OK else f"exit {returncode}", output
    )


def skipped(step: Step, reason: str) -> StepResult:
    return StepResult(step.name, step.title, command_line(step.argv), SKIPPED, detail=reason)


def fit_run_seconds(wanted_s: float, time_left_s: float) -> float | None:
    """runtime.max_time_s for a training run expected to end, overhead included, within
    time_left_s: wanted_s, or less when less is left; None when not even MIN_RUN_S fits."""
    fitting = min(wanted_s, math.floor(time_left_s - EXPECTED_OVERHEAD_S))
    return fitting if fitting >= min(MIN_RUN_S, wanted_s) else None


# ---------------------------------------------------------------------------------------------
# Reading what the steps left


def read_csv(path: str) -> list[dict]:
    """The rows of a bench's CSV; [] when the bench never wrote it."""
    if not os.path.isfile(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def to_float(cell: str | None) -> float | None:
    try:
        value = float(cell)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def checkpoint_env_steps(path: str) -> int | None:
    """The env-step counter of a pql checkpoint; None when there is no readable one."""
    try:
        return load_checkpoint(path)["counters"]["env_steps"]
    except (CheckpointError, KeyError):
        return None


def finite(values) -> list[float]:
    return [float(v) for v in values if math.isfinite(v)]


def last_finite(values) -> float | None:
    kept = finite(values)
    return kept[-1] if kept else None


def run_summary(run_dir: str, max_time_s: float) -> RunSummary:
    metrics_path = os.path.join(run_dir, METRICS_CSV)
    metrics = read_metrics(metrics_path) if os.path.isfile(metrics_path) else {}
    summary = RunSummary(max_time_s, checkpoint_env_steps(os.path.join(run_dir, "checkpoint.pt")), None, [])
    if not metrics:
        return summary
    walls = metrics["wall_time_s"]
    returns = metrics.get(EVAL_RETURN)
    if returns is not None:
        summary.evals = [
            Eval(int(s), float(w), float(r))
            for s, w, r in zip(metrics["env_steps"], walls, returns)
            if math.isfinite(r)
        ]
    summary.wall_s = last_finite(walls)
    summary.eval_s = finite(metrics.get("time/eval_s", []))
    summary.eval_share = last_finite(metrics.get("time/eval_share", []))
    return summary


def mps_note(output: str) -> str | None:
    """What the learner bench says of MPS in its together run ("together run, runtime.mps=auto: pql: MPS: …")."""
    match = re.search(r"^together run, (runtime\.mps=.*)$", output, re.MULTILINE)
    return match.group(1) if match else None


def resumed_from(output: str) -> int | None:
    """The env-step count a resumed run reports it started from ("pql: resuming from … at N env steps")."""
    match = re.search(r"resuming from .* at ([\d,]+) env steps", output)
    return int(match.group(1).replace(",", "")) if match else None


# torch prints this as the main process exits when a role process exited still holding the main
# process's CUDA tensors (SharedState.release); the run's results are complete by then.
UNRELEASED_WARNING = "Producer process has been terminated before all shared CUDA tensors released"


def release_verdict(unreleased: list[str]) -> tuple[bool, str]:
    """(every role released the shared CUDA tensors, what the runs' output says), as resume_verdict."""
    if unreleased:
        return False, (
            f"torch warned at the end of {' and '.join(unreleased)} that shared CUDA tensors were not "
            "released (a role exited still holding the main process's)"
        )
    return True, "every role let go of the main process's CUDA tensors (torch printed no warning)"


def tests_summary(output: str) -> str | None:
    """pytest's last summary line, e.g. "40 passed, 12 deselected in 31.2s"."""
    lines = [
        line.strip(" =")
        for line in output.splitlines()
        if re.search(r"\d+ (passed|failed|error|errors|skipped|deselected)\b", line)
    ]
    return lines[-1] if lines else None


def resume_verdict(train_steps: int | None, resume_start: int | None, resume_end: int | None) -> tuple[bool, str]:
    """Did the resumed run's env-step counter go on from the train run's checkpoint?"""
    if train_steps is None:
        return False, "no readable checkpoint from the train run"
    if resume_start is None:
        return False, "the resumed run never said it was resuming (no 'resuming from … at N env steps' line)"
    if resume_start != train_steps:
        return False, f"the resumed run started at {resume_start:,} env steps, the checkpoint holds {train_steps:,}"
    if resume_end is None:
        return False, f"the resumed run started at {resume_start:,} env steps but left no readable checkpoint"
    if resume_end <= train_steps:
        return False, f"the resumed run ended at {resume_end:,} env steps, not past the checkpoint's {train_steps:,}"
    return True, (
        f"started at {resume_start:,} env steps (the train checkpoint's count) and ended at "
        f"{resume_end:,}: the counter went on"
    )


# ---------------------------------------------------------------------------------------------
# The report


def fmt_rate(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"


def fmt_duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def table(header: list[str], rows: list[list[str]], align: str) -> list[str]:
    """Markdown table lines; align has one 'l' or 'r' per column."""
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    return ["| " + " | ".join(header) + " |", rule] + ["| " + " | ".join(r) + " |" for r in rows]


LEARNER_LABELS = {
    "critic_updates_per_s_alone": "critic updates/s, V-learner alone",
    "policy_updates_per_s_alone": "policy updates/s, P-learner alone",
    "actor_env_steps_per_s_alone": "env steps/s, actor alone",
    "bound_env_steps_per_s": "env steps/s the slowest role alone allows",
    "together_env_steps_per_s": "env steps/s, three roles together",
    "together_critic_updates_per_s": "critic updates/s, together",
    "together_policy_updates_per_s": "policy updates/s, together",
    "together_ratio_beta_av": "critic updates per actor step, together",
    "together_ratio_beta_pv": "critic updates per policy update, together",
    "together_efficiency": "together / bound",
}


def learner_value(quantity: str, value: float | None) -> str:
    if value is None:
        return "—"
    if quantity == "together_efficiency":
        return f"{value:.0%}"
    if quantity.startswith("together_ratio"):
        return f"{value:.2f}"
    return fmt_rate(value)


def learner_figure(rows: list[dict], quantity: str) -> float | None:
    return next((to_float(r["value"]) for r in rows if r["quantity"] == quantity), None)


def kernel_time(rows: list[dict], prefix: str, impl: str) -> float | None:
    return next(
        (to_float(r["microseconds"]) for r in rows if r["operation"].startswith(prefix) and r["impl"] == impl), None
    )


def env_rate(fig: Figures) -> float | None:
    """Ant env steps/s of pql on mjwarp (CUDA) at TARGET_ENVS envs."""
    return next(
        (
            to_float(r["env_steps_per_s"])
            for r in fig.env
            if r["row"] == "pql mjwarp" and r["device"].startswith("cuda") and int(r["num_envs"]) == TARGET_ENVS
        ),
        None,
    )


def vtrace_speedup(fig: Figures) -> float | None:
    tri, ref = kernel_time(fig.kernels, "V-trace", "triton"), kernel_time(fig.kernels, "V-trace", "torch")
    return ref / tri if tri and ref else None


def median_eval_s(fig: Figures) -> float | None:
    return statistics.median(fig.train.eval_s) if fig.train and fig.train.eval_s else None


def return_by(fig: Figures, seconds: float = RETURN_BY_S) -> float | None:
    """The train run's best eval return logged by `seconds` of wall time; None when the run ended
    sooner (the default --train-seconds does) or had evaluated nothing by then."""
    run = fig.train
    if run is None or run.wall_s is None or run.wall_s < seconds:
        return None
    returns = [e.eval_return for e in run.evals if e.wall_s <= seconds]
    return max(returns) if returns else None


@dataclasses.dataclass(frozen=True)
class Target:
    """One H100/H200 target (docs/gpu.md): a row of the report's Targets table and of targets.csv."""

    name: str  # short id, targets.csv's name
    text: str  # what is measured, as the report says it
    value: float
    unit: str  # targets.csv's unit; fmt_measure shows it
    direction: str  # ">=": at least value; "<=": at most
    measure: Callable[[Figures], float | None]  # None: not measured

    def met(self, measured: float) -> bool:
        return measured >= self.value if self.direction == ">=" else measured <= self.value


TARGETS = (
    Target(
        "env_steps_per_s",
        f"Ant env steps/s, mjwarp (CUDA), N = {TARGET_ENVS:,}",
        1_000_000,
        "env steps/s",
        ">=",
        env_rate,
    ),
    Target(
        "critic_updates_per_s",
        f"critic updates/s alone at batch {BATCH:,}",
        3_000,
        "updates/s",
        ">=",
        lambda fig: learner_figure(fig.learner, "critic_updates_per_s_alone"),
    ),
    Target(
        "policy_updates_per_s",
        f"policy updates/s alone at batch {BATCH:,}",
        4_000,
        "updates/s",
        ">=",
        lambda fig: learner_figure(fig.learner, "policy_updates_per_s_alone"),
    ),
    Target(
        "together_efficiency",
        "three roles together / bound from the slowest alone (runtime.mps=auto)",
        0.9,
        "fraction",
        ">=",
        lambda fig: learner_figure(fig.learner, "together_efficiency"),
    ),
    Target(
        "sumtree_us",
        f"Triton SumTree update + sample of {BATCH:,}, capacity 2^23",
        100,
        "us",
        "<=",
        lambda fig: kernel_time(fig.kernels, "SumTree update + sample, capacity 2^23", "triton"),
    ),
    Target("vtrace_speedup", "Triton V-trace vs the PyTorch recursion", 20, "x", ">=", vtrace_speedup),
    Target(
        "eval_s",
        "Ant evaluation (10 episodes) while the roles run, median of the train run's",
        2,
        "s",
        "<=",
        median_eval_s,
    ),
    Target(
        "eval_share",
        "share of the train run's wall time spent evaluating",
        0.05,
        "fraction",
        "<=",
        lambda fig: fig.train.eval_share if fig.train else None,
    ),
    Target(
        "return_at_5_min",
        f"eval return of python train.py task=Ant by {RETURN_BY_S:.0f} s of wall time (--train-seconds 300)",
        6_000,
        "return",
        ">=",
        return_by,
    ),
)


def fmt_measure(value: float, unit: str) -> str:
    """A target's value or a measure as the report shows it."""
    if unit == "fraction":
        return f"{value:.0%}" if value >= 0.1 else f"{value:.1%}"
    if unit == "us":
        return f"{value:,.0f} µs"
    if unit == "x":
        return f"{value:.0f}×"
    if unit == "s":
        return f"{value:.1f} s"
    return fmt_rate(value)


def target_rows(fig: Figures) -> list[tuple[Target, float | None]]:
    """Each target with its measure (None: not measured)."""
    return [(t, t.measure(fig)) for t in TARGETS]


def targets_table(fig: Figures) -> list[list[str]]:
    """The report's [target, measured, verdict] rows."""
    rows = []
    for t, measured in target_rows(fig):
        verdict = "not measured" if measured is None else "met" if t.met(measured) else "**not met**"
        rows.append(
            [
                f"{t.text}: {'≥' if t.direction == '>=' else '≤'} {fmt_measure(t.value, t.unit)}",
                "—" if measured is None else fmt_measure(measured, t.unit),
                verdict,
            ]
        )
    return rows


def write_targets_csv(path: str, fig: Figures, gpu: str) -> None:
    """targets.csv: one row per target (TARGET_COLUMNS); measured and met empty when not measured."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=TARGET_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for t, measured in target_rows(fig):
            writer.writerow(
                {
                    "name": t.name,
                    "target": f"{t.value:g}",
                    "unit": t.unit,
                    "gpu": gpu,
                    "measured": "" if measured is None else f"{measured:.6g}",
                    "met": "" if measured is None else str(t.met(measured)).lower(),
                }
            )


def env_section(rows: list[dict]) -> list[str]:
    body = [
        [
            r["row"],
            r["device"],
            f"{int(r['num_envs']):,}",
            fmt_rate(to_float(r["env_steps_per_s"])) if not r.get("error") else f"failed: {r['error']}",
        ]
        for r in rows
    ]
    return ["## Env throughput (Ant, random actions)", "", *table(["", "device", "N", "env steps/s"], body, "llrr"), ""]


PROFILE_LABELS = {"physics": "physics", "restart": "restart", "rest": "pql's own work", "step": "whole step"}


def profile_cell(row: dict | None) -> str:
    """One part of a step as "ms (share)"; the whole step without its share."""
    ms, share = (to_float(row["ms_per_step"]), to_float(row["share"])) if row else (None, None)
    if ms is None:
        return "—"
    return f"{ms:.2f} ms" if row["part"] == "step" or share is None else f"{ms:.2f} ms ({share:.0%})"


def env_profile_section(rows: list[dict]) -> list[str]:
    """ms per step and share of each part (bench/env_throughput.py --profile), one line per N."""
    body = []
    for row, device, n in dict.fromkeys((r["row"], r["device"], r["num_envs"]) for r in rows):
        parts = {r["part"]: r for r in rows if (r["row"], r["device"], r["num_envs"]) == (row, device, n)}
        body.append([row, device, f"{int(n):,}", *(profile_cell(parts.get(part)) for part in PROFILE_LABELS)])
    return [
        "## One env step, in parts (bench/env_throughput.py --profile: physics = env.physics.step, restart = "
        "env.physics.reset, pql's own work = the rest)",
        "",
        *table(["", "device", "N", *PROFILE_LABELS.values()], body, "llrrrrr"),
        "",
    ]


def learner_section(rows: list[dict], no_mps_rows: list[dict]) -> list[str]:
    first = rows[0] if rows else no_mps_rows[0]
    quantities = list(dict.fromkeys([r["quantity"] for r in rows] + [r["quantity"] for r in no_mps_rows]))
    header = ["", "value"] + (["without MPS"] if no_mps_rows else [])
    body = []
    for q in quantities:
        line = [LEARNER_LABELS.get(q, q), learner_value(q, learner_figure(rows, q))]
        if no_mps_rows:
            line.append(learner_value(q, learner_figure(no_mps_rows, q)))
        body.append(line)
    return [
        f"## Learner (bench/learner.py: {first['task']}, {int(first['num_envs']):,} envs, "
        f"batch {int(first['batch_size']):,}, {first['device']}, runtime.compile={first['compile']}, "
        f"together run with runtime.mps={first.get('mps') or 'auto'})",
        "",
        *table(header, body, "l" + "r" * (len(header) - 1)),
        "",
    ]


def kernels_section(rows: list[dict]) -> list[str]:
    records = [
        {"operation": r["operation"], "impl": r["impl"], "microseconds": to_float(r["microseconds"]), "note": r["note"]}
        for r in rows
    ]
    return [
        "## Kernels (bench/kernels.py, median per call)",
        "",
        *table(["", "Triton", "PyTorch reference", "torchrl PrioritizedSampler"], kernel_table_rows(records), "lrrr"),
        "",
    ]


def training_section(fig: Figures) -> list[str]:
    body = []
    for name, run in (("train", fig.train), ("resume", fig.resume)):
        if run is None:
            continue
        returns = [e.eval_return for e in run.evals]
        body.append(
            [
                name,
                f"{run.max_time_s:.0f}",
                "—" if run.env_steps is None else f"{run.env_steps:,}",
                "—" if run.wall_s is None else f"{run.wall_s:.0f}",
                str(len(returns)),
                f"{returns[-1]:,.1f}" if returns else "—",
                f"{max(returns):,.1f}" if returns else "—",
            ]
        )
    lines = [
        "## Training (python train.py task=Ant) and resume",
        "",
        *table(
            [
                "run",
                "max_time_s",
                "env steps (checkpoint)",
                "wall s",
                "evaluations",
                "last eval return",
                "best eval return",
            ],
            body,
            "lrrrrrr",
        ),
        "",
    ]
    if fig.train is not None and fig.train.evals:
        lines += [
            "Train evaluations (env steps: return): "
            + ", ".join(f"{e.env_steps:,}: {e.eval_return:,.0f}" for e in fig.train.evals),
            "",
        ]
    if fig.resume is not None:
        ok, text = resume_verdict(fig.train.env_steps if fig.train else None, fig.resume_start, fig.resume.env_steps)
        lines += [f"Resume: {'ok' if ok else '**failed**'}: {text}.", ""]
    if fig.unreleased is not None:
        ok, text = release_verdict(fig.unreleased)
        lines += [f"Shared CUDA tensors: {'' if ok else '**not released**: '}{text}.", ""]
    if fig.curve:
        lines += [f"![eval return of the train run]({fig.curve})", ""]
    return lines


def build_report(info: dict, results: list[StepResult], fig: Figures, budget_s: float) -> str:
    """report.md from the machine's description (info: "title", "lines"), the step results and
    the figures read from the steps' files."""
    passed = sum(r.status == OK for r in results)
    total_s = sum(r.seconds for r in results)
    lines = [f"# {info['title']}", "", *[f"- {line}" for line in info["lines"]], ""]
    if fig.mps:
        lines += [f"- MPS in the learner bench's together run: {fig.mps}", ""]
    lines += [
        f"**{passed} of {len(results)} steps passed** in {fmt_duration(total_s)} (budget {fmt_duration(budget_s)}). "
        f"Every step's whole output: {FILES['log']}.",
        "",
    ]
    step_rows = []
    for r in results:
        status = r.status
        if r.name == "tests" and r.status == OK and fig.tests_summary:
            status = f"ok: {fig.tests_summary}"
        if r.detail:
            status += f" ({r.detail})"
        step_rows.append(
            [
                r.title,
                status if r.status == OK else f"**{status}**",
                "—" if r.status == SKIPPED else fmt_duration(r.seconds),
            ]
        )
    lines += table(["step", "status", "time"], step_rows, "llr") + [""]
    lines += [
        f"## Targets (docs/gpu.md, H100/H200; also in {FILES['targets']})",
        "",
        *table(["target", "measured", ""], targets_table(fig), "lrl"),
        "",
    ]
    if fig.env:
        lines += env_section(fig.env)
    if fig.env_profile:
        lines += env_profile_section(fig.env_profile)
    if fig.learner or fig.learner_no_mps:
        lines += learner_section(fig.learner, fig.learner_no_mps)
    if fig.kernels:
        lines += kernels_section(fig.kernels)
    if fig.train is not None or fig.resume is not None:
        lines += training_section(fig)
    failures = [r for r in results if r.status in (FAILED, TIMED_OUT)]
    if failures:
        lines += ["## Failures", ""]
        for r in failures:
            lines += [f"### {r.title}: {r.status} ({r.detail})", "", "```", *r.tail(), "```", ""]
    lines += ["## Commands", "", "```", *[r.command for r in results], "```", ""]
    return "\n".join(lines)


def console_summary(results: list[StepResult], fig: Figures, report_path: str) -> list[str]:
    """The few lines printed at the end: the targets, the resume, where the report is."""
    lines = ["", "targets:"]
    lines += [f"  {target}: {measured} ({verdict.strip('*')})" for target, measured, verdict in targets_table(fig)]
    if fig.resume is not None:
        ok, text = resume_verdict(fig.train.env_steps if fig.train else None, fig.resume_start, fig.resume.env_steps)
        lines.append(f"resume: {'ok' if ok else 'FAILED'}: {text}")
    if fig.unreleased is not None:
        ok, text = release_verdict(fig.unreleased)
        lines.append(f"shared CUDA tensors: {'' if ok else 'NOT RELEASED: '}{text}")
    if fig.train is not None and fig.train.evals:
        lines.append(
            f"train: eval return {fig.train.evals[-1].eval_return:,.1f} at {fig.train.evals[-1].env_steps:,} env steps"
        )
    failed = [r for r in results if r.status != OK]
    lines.append(
        f"gpu_check: {len(results) - len(failed)} of {len(results)} steps passed"
        + (f" (not: {', '.join(r.name for r in failed)})" if failed else "")
        + f"; report: {report_path}"
    )
    return lines


# ---------------------------------------------------------------------------------------------
# The machine


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def gpu_properties() -> dict:
    """Name, memory and compute capability of GPU 0, asked in a child process: this process
    must hold no CUDA context, or an MPS daemon started later (or an exclusive-process GPU)
    would find the GPU taken."""
    code = (
        "import json, torch; p = torch.cuda.get_device_properties(0); "
        "print(json.dumps({'name': p.name, 'memory_gib': p.total_memory / 2**30, "
        "'capability': f'{p.major}.{p.minor}', 'cuda': torch.version.cuda}))"
    )
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return {"error": "could not read the GPU's properties: no answer within 120 s"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"could not read the GPU's properties: {last}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def nvidia_smi() -> dict:
    """Driver version and compute mode of GPU 0 from nvidia-smi; {} without it."""
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,compute_mode", "--format=csv,noheader", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        return {}
    fields = [f.strip() for f in done.stdout.strip().split(",")]
    return {"driver": fields[0], "compute_mode": fields[1]} if done.returncode == 0 and len(fields) == 2 else {}


def git_revision() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (no git)"
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    return head.stdout.strip() + (" with uncommitted changes" if dirty.stdout.strip() else "")


def machine_info(started: datetime.datetime) -> dict:
    gpu, smi = gpu_properties(), nvidia_smi()
    gpu_line = gpu.get("error") or (
        f"{gpu['name']}, {gpu['memory_gib']:.1f} GiB, compute capability {gpu['capability']}"
    )
    if smi:
        gpu_line += f", driver {smi['driver']}, compute mode {smi['compute_mode']}"
    versions = ", ".join(
        f"{name} {package_version(name)}"
        for name in ("torch", "triton", "warp-lang", "mujoco", "mujoco-warp", "torchrl")
    )
    control = os.path.join(pipe_directory(), "control")
    mps = (
        f"an MPS control daemon is running ({control} exists): every CUDA process of this check is its client"
        if os.path.exists(control)
        else f"no MPS control daemon ({control} absent): each process has its own CUDA context"
    )
    return {
        "title": f"pql GPU check, {started:%Y-%m-%d %H:%M:%S}",
        "gpu_name": gpu.get("name", "unknown GPU"),
        "lines": [
            f"GPU: {gpu_line}",
            f"Software: Python {sys.version.split()[0]}, CUDA {gpu.get('cuda', '?')} (torch's), {versions}",
            f"Host: {os.cpu_count()} CPU cores; pql {git_revision()}",
            f"MPS before the check: {mps}",
        ],
    }


# ---------------------------------------------------------------------------------------------
# The check

TRAIN = os.path.join(ROOT, "train.py")


def bench(script: str, *args: str) -> list[str]:
    return [sys.executable, os.path.join(ROOT, "bench", script), *args]


def learner_step(name: str, title: str, csv_path: str, *args: str) -> Step:
    return Step(
        name,
        title,
        bench(
            "learner.py",
            "--task",
            "Ant",
            "--device",
            "cuda",
            "--batch-size",
            str(BATCH),
            "--seconds",
            "2",
            "--together-seconds",
            "60",
            "--csv",
            csv_path,
            *args,
        ),
        240,
    )


def train_step(name: str, title: str, run_dir: str, seconds: float, overrides: tuple[str, ...] = ()) -> Step:
    """python train.py task=Ant [overrides] runtime.max_time_s=seconds, into run_dir."""
    return Step(
        name,
        title,
        [sys.executable, TRAIN, "task=Ant", *overrides, f"runtime.max_time_s={seconds:g}", f"hydra.run.dir={run_dir}"],
        seconds + RUN_OVERHEAD_S,
    )


class Check:
    """The steps of one check, what they left, and the report."""

    def __init__(self, args: argparse.Namespace, out: str, runs: str, info: dict):
        self.args, self.out, self.info = args, out, info
        self.deadline = time.monotonic() + args.budget_s
        self.log_path, self.report_path = os.path.join(out, FILES["log"]), os.path.join(out, FILES["report"])
        self.results: dict[str, StepResult] = {}
        self.train_s: float | None = None  # the runs' runtime.max_time_s, once they ran
        self.resume_s: float | None = None
        self.order = [s for s in STEPS if s in args.steps]
        if args.without_mps and "learner" in self.order:
            self.order.insert(self.order.index("learner") + 1, "learner_no_mps")
        self.train_dir, self.resume_dir = os.path.join(runs, "train"), os.path.join(runs, "resume")
        self.checkpoint = os.path.join(self.train_dir, "checkpoint.pt")
        self.steps = {
            "tests": Step(
                "tests",
                "kernel tests (pytest tests/kernels -m gpu)",
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    os.path.join(ROOT, "tests", "kernels"),
                    "-m",
                    "gpu",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                ],
                240,
            ),
            "env": Step(
                "env",
                "env throughput and step profile (Ant, mjwarp, CUDA)",
                bench(
                    "env_throughput.py",
                    "--task",
                    "Ant",
                    "--backends",
                    "mjwarp",
                    "--devices",
                    "cuda",
                    "--sizes",
                    *map(str, ENV_SIZES),
                    "--seconds",
                    "2",
                    "--gym-sizes",
                    "--rollout-sizes",
                    "--csv",
                    self.path("env"),
                    "--profile-csv",
                    self.path("env_profile"),
                ),
                240,
            ),
            "learner": learner_step("learner", f"learner bench (batch {BATCH:,})", self.path("learner")),
            "learner_no_mps": learner_step(
                "learner_no_mps",
                f"learner bench without MPS (batch {BATCH:,})",
                self.path("learner_no_mps"),
                "--mps",
                "off",
            ),
            "kernels": Step(
                "kernels",
                "kernels bench (Triton vs reference vs torchrl)",
                bench("kernels.py", "--device", "cuda", "--csv", self.path("kernels")),
                180,
            ),
            "train": train_step("train", "train (python train.py task=Ant)", self.train_dir, args.train_seconds),
            "resume": train_step(
                "resume",
                "resume from the train checkpoint",
                self.resume_dir,
                args.resume_seconds,
                (f"checkpoint={self.checkpoint}",),
            ),
            "plot": Step(
                "plot",
                "return curve (python -m pql.plot)",
                [sys.executable, "-m", "pql.plot", self.train_dir, "--out", self.path("curve")],
                60,
            ),
        }

    def path(self, key: str) -> str:
        return os.path.join(self.out, FILES[key])

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def reserve_after_train(self) -> float:
        """Budget the train run leaves for the resumed run and the plot."""
        reserve = self.args.resume_seconds + EXPECTED_OVERHEAD_S if "resume" in self.order else 0.0
        return reserve + (PLOT_RESERVE_S if "plot" in self.order else 0.0)

    def run(self, name: str) -> StepResult:
        step, left = self.steps[name], self.time_left()
        if name == "train":
            reserve = self.reserve_after_train()
            self.train_s = fit_run_seconds(self.args.train_seconds, left - reserve)
            if self.train_s is None:
                return skipped(step, f"{left:.0f} s of the budget left")
            step = train_step(name, step.title, self.train_dir, self.train_s)
            return self.shortened(run_step(step, self.log_path, left - reserve), self.args.train_seconds, self.train_s)
        if name in ("resume", "plot") and "train" not in self.order:
            return skipped(step, "needs the train step")
        if name == "resume":
            train_steps = checkpoint_env_steps(self.checkpoint)
            if train_steps is None:
                return skipped(step, "the train run left no readable checkpoint")
            available = left - (PLOT_RESERVE_S if "plot" in self.order else 0.0)
            self.resume_s = fit_run_seconds(self.args.resume_seconds, available)
            if self.resume_s is None:
                return skipped(step, f"{left:.0f} s of the budget left")
            # The train run may have stopped at its env-step budget (20M on CUDA): the resumed run
            # needs room to go on past the checkpoint.
            step = train_step(
                name,
                step.title,
                self.resume_dir,
                self.resume_s,
                (f"checkpoint={self.checkpoint}", f"runtime.max_env_steps={train_steps + 20_000_000}"),
            )
            return self.shortened(run_step(step, self.log_path, available), self.args.resume_seconds, self.resume_s)
        if name == "plot" and not os.path.isfile(os.path.join(self.train_dir, METRICS_CSV)):
            return skipped(step, f"the train run left no {METRICS_CSV}")
        if left < MIN_STEP_S:
            return skipped(step, f"{left:.0f} s of the budget left")
        return run_step(step, self.log_path, left)

    @staticmethod
    def shortened(result: StepResult, wanted_s: float, seconds: float) -> StepResult:
        if seconds < wanted_s:
            note = f"runtime.max_time_s={seconds:.0f} instead of {wanted_s:g}, to fit the budget"
            result.detail = f"{result.detail}; {note}" if result.detail else note
        return result

    def figures(self) -> Figures:
        fig = Figures(
            env=read_csv(self.path("env")),
            env_profile=read_csv(self.path("env_profile")),
            learner=read_csv(self.path("learner")),
            learner_no_mps=read_csv(self.path("learner_no_mps")),
            kernels=read_csv(self.path("kernels")),
        )
        if "learner" in self.results:
            fig.mps = mps_note(self.results["learner"].output)
        if "tests" in self.results:
            fig.tests_summary = tests_summary(self.results["tests"].output)
        if self.train_s is not None and os.path.isdir(self.train_dir):
            fig.train = run_summary(self.train_dir, self.train_s)
        if self.resume_s is not None and os.path.isdir(self.resume_dir):
            fig.resume = run_summary(self.resume_dir, self.resume_s)
            fig.resume_start = resumed_from(self.results["resume"].output)
        runs = [name for name in ("train", "resume") if name in self.results and self.results[name].output]
        if runs:
            fig.unreleased = [name for name in runs if UNRELEASED_WARNING in self.results[name].output]
        if os.path.isfile(self.path("curve")):
            fig.curve = FILES["curve"]
        return fig

    def write_report(self) -> Figures:
        """report.md and targets.csv from what the steps so far left."""
        fig = self.figures()
        with open(self.report_path, "w") as f:
            f.write(build_report(self.info, list(self.results.values()), fig, self.args.budget_s))
        write_targets_csv(self.path("targets"), fig, self.info["gpu_name"])
        return fig

    def run_all(self) -> int:
        """Every step in order, the report rewritten after each (a check stopped from outside still
        leaves one). -> the exit code."""
        try:
            for i, name in enumerate(self.order, 1):
                print(f"gpu_check: [{i}/{len(self.order)}] {self.steps[name].title} ...", end=" ", flush=True)
                result = self.results[name] = self.run(name)
                print(
                    f"{result.status} ({fmt_duration(result.seconds)}{', ' + result.detail if result.detail else ''})",
                    flush=True,
                )
                fig = self.write_report()
        except KeyboardInterrupt:
            self.write_report()
            print(f"\ngpu_check: interrupted; partial report: {self.report_path}", file=sys.stderr)
            return 130
        print("\n".join(console_summary(list(self.results.values()), fig, self.report_path)), flush=True)
        return 0 if all(r.status == OK for r in self.results.values()) else 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/gpu_check.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=None, help="report directory (default runs/gpu_check/<date_time>)")
    parser.add_argument(
        "--runs-dir",
        default=None,
        help="where the train and resume runs go (default <report dir>/runs); on a machine that "
        "returns only a few files from the report directory, put them elsewhere",
    )
    parser.add_argument(
        "--steps",
        nargs="+",
        choices=STEPS,
        default=list(STEPS),
        help="the steps to run (default: all); resume and plot need train",
    )
    parser.add_argument(
        "--without-mps",
        action="store_true",
        help="also run the learner bench with --mps off (its together run's role processes taking "
        "turns on the GPU), to compare with the MPS path of a training run",
    )
    parser.add_argument("--budget-s", type=float, default=560.0, help="wall-clock budget of the whole check")
    parser.add_argument(
        "--train-seconds",
        type=float,
        default=180.0,
        help="runtime.max_time_s of the train run; --train-seconds 300 measures the "
        "return_at_5_min target, which a shorter run leaves unmeasured (raise --budget-s with "
        "it, or the run is shortened to fit)",
    )
    parser.add_argument("--resume-seconds", type=float, default=45.0, help="runtime.max_time_s of the resumed run")
    args = parser.parse_args(argv)
    for name in ("budget_s", "train_seconds", "resume_seconds"):
        if getattr(args, name) <= 0:
            parser.error(
                f"--{name.replace('_', '-')} {getattr(args, name):g} is not allowed; give a number of seconds > 0"
            )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print(
            f"gpu_check: no CUDA device (torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'}); "
            "run it on a machine with an NVIDIA GPU",
            file=sys.stderr,
        )
        return 2
    started = datetime.datetime.now()
    out = os.path.abspath(args.out or os.path.join(ROOT, "runs", "gpu_check", f"{started:%Y-%m-%d_%H-%M-%S}"))
    runs = os.path.abspath(args.runs_dir or os.path.join(out, "runs"))
    taken = [d for d in (os.path.join(runs, "train"), os.path.join(runs, "resume")) if os.path.exists(d)]
    if taken and ("train" in args.steps or "resume" in args.steps):
        print(
            f"gpu_check: {taken[0]} already exists (a run there would append to it); name a new --out or --runs-dir",
            file=sys.stderr,
        )
        return 2
    os.makedirs(out, exist_ok=True)
    info = machine_info(started)
    print(f"gpu_check: {info['gpu_name']}, torch {torch.__version__}; report in {out}", flush=True)
    return Check(args, out, runs, info).run_all()


if __name__ == "__main__":
    sys.exit(main())
