"""One check: its steps in order, each within what is left of the budget, the report and
targets.csv rewritten after each step, so that a check stopped from outside still leaves one."""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import time

import torch

from bench.gpu import ROOT
from bench.gpu.formats import fmt_duration
from bench.gpu.machine import machine_info
from bench.gpu.report import FILES, build_report, console_summary
from bench.gpu.results import (
    UNRELEASED_WARNING,
    Figures,
    checkpoint_env_steps,
    mps_note,
    pytest_summary,
    read_csv,
    resumed_from,
    run_summary,
)
from bench.gpu.steps import OK, Step, StepResult, run_step, skipped
from bench.gpu.targets import BATCH, TARGET_ENVS, write_targets_csv
from pql.logging import METRICS_CSV

STEPS = ("tests", "env", "learner", "kernels", "train", "resume", "plot")
ENV_SIZES = (4096, 16384, TARGET_ENVS)
# Time a training run takes beyond its runtime.max_time_s: process start, CUDA and Warp kernel
# loading (compiling, on a cold cache), the final evaluation and checkpoint (docs/gpu.md gives the
# times seen on an H200). EXPECTED_OVERHEAD_S is what budgeting counts on; RUN_OVERHEAD_S is how
# long past its max_time_s a run may go before it is stopped.
EXPECTED_OVERHEAD_S, RUN_OVERHEAD_S = 60.0, 120.0
MIN_RUN_S = 20.0  # shorter than this, a run would show nothing: skip it instead
PLOT_RESERVE_S = 15.0
MIN_STEP_S = 20.0  # a bench or the tests with less time left than this are skipped
# The train run may have stopped at its env-step budget (runtime.max_env_steps): the resumed run
# gets this many env steps past the checkpoint to go on.
RESUME_ENV_STEPS = 20_000_000
TRAIN = os.path.join(ROOT, "train.py")


def fit_run_seconds(wanted_s: float, time_left_s: float) -> float | None:
    """runtime.max_time_s for a training run expected to end, overhead included, within
    time_left_s: wanted_s, or less when less is left; None when not even MIN_RUN_S fits."""
    fitting = min(wanted_s, math.floor(time_left_s - EXPECTED_OVERHEAD_S))
    return fitting if fitting >= min(MIN_RUN_S, wanted_s) else None


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
        # 3 min 43 s on an H200 with cold caches, most of it compiling each learner's whole update
        # (the roles alone, then each learner process of the together run).
        360,
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
        if args.with_eager and "learner" in self.order:
            self.order.insert(self.order.index("learner") + 1, "learner_eager")
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
            # The roles alone only: what compiling the updates wins (the together run is the compiled one's).
            "learner_eager": learner_step(
                "learner_eager",
                f"learner bench, eager updates (batch {BATCH:,}, runtime.compile=false)",
                self.path("learner_eager"),
                "--compile",
                "false",
                "--together-seconds",
                "0",
            ),
            "kernels": Step(
                "kernels",
                "kernels bench (Triton vs reference vs flat index vs torchrl)",
                bench("kernel_speed.py", "--device", "cuda", "--csv", self.path("kernels")),
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
            step = train_step(
                name,
                step.title,
                self.resume_dir,
                self.resume_s,
                (f"checkpoint={self.checkpoint}", f"runtime.max_env_steps={train_steps + RESUME_ENV_STEPS}"),
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
            learner_eager=read_csv(self.path("learner_eager")),
            kernels=read_csv(self.path("kernels")),
        )
        if "learner" in self.results:
            fig.mps = mps_note(self.results["learner"].output)
        if "tests" in self.results:
            fig.tests_summary = pytest_summary(self.results["tests"].output)
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
        """Every step in order, the report rewritten after each. -> the exit code."""
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


def run(args: argparse.Namespace) -> int:
    """The whole check as bench/gpu_check.py's arguments ask for it. -> the exit code: 2 without a
    CUDA device or when a run directory is taken, before any work."""
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
