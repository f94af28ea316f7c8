"""Reading what the steps left: the benches' CSV rows, the training runs' metrics.csv and
checkpoints, and the lines of the steps' output the report quotes."""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import re

from pql.checkpoint import CheckpointError, load_checkpoint
from pql.logging import EVAL_RETURN, METRICS_CSV, read_metrics

# torch prints this as the main process exits when a role process exited still holding the main
# process's CUDA tensors (SharedState.release); the run's results are complete by then.
UNRELEASED_WARNING = "Producer process has been terminated before all shared CUDA tensors released"


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
    learner_eager: list[dict] = dataclasses.field(default_factory=list)
    kernels: list[dict] = dataclasses.field(default_factory=list)
    tests_summary: str | None = None
    train: RunSummary | None = None
    resume: RunSummary | None = None
    resume_start: int | None = None  # the env steps the resume said it started from
    unreleased: list[str] | None = None  # the training runs after which torch warned (None: none ran)
    curve: str | None = None  # the return curve's file name in the report directory
    mps: str | None = None  # the learner bench's line about MPS in its together run


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


def learner_figure(rows: list[dict], quantity: str) -> float | None:
    """One quantity of bench/learner.py's CSV rows."""
    return next((to_float(r["value"]) for r in rows if r["quantity"] == quantity), None)


def kernel_time(rows: list[dict], prefix: str, impl: str) -> float | None:
    """Microseconds per call of the first operation of bench/kernel_speed.py's CSV rows that starts with prefix."""
    return next(
        (to_float(r["microseconds"]) for r in rows if r["operation"].startswith(prefix) and r["impl"] == impl), None
    )


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


def pytest_summary(output: str) -> str | None:
    """pytest's last summary line, e.g. "40 passed, 12 deselected in 31.2s"."""
    lines = [
        line.strip(" =")
        for line in output.splitlines()
        if re.search(r"\d+ (passed|failed|error|errors|skipped|deselected)\b", line)
    ]
    return lines[-1] if lines else None


def release_verdict(unreleased: list[str]) -> tuple[bool, str]:
    """(every role released the shared CUDA tensors, what the runs' output says), as resume_verdict."""
    if unreleased:
        return False, (
            f"torch warned at the end of {' and '.join(unreleased)} that shared CUDA tensors were not "
            "released (a role exited still holding the main process's)"
        )
    return True, "every role let go of the main process's CUDA tensors (torch printed no warning)"


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
