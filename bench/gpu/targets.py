"""The H100/H200 targets, each defined once here: what it measures, its value, its unit and its
direction, and how the check measures it. The report's Targets table, targets.csv and the table in
docs/gpu.md come from TARGETS; tests/test_gpu_check.py holds README's and the docs' quoted
numbers to it.

    python -m bench.gpu.targets               # print docs/gpu.md's table
    python -m bench.gpu.targets docs/gpu.md   # rewrite it there, between the markers
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
import sys
from collections.abc import Callable

from bench.gpu.formats import fmt_measure, table
from bench.gpu.results import Figures, kernel_time, learner_figure, to_float
from pql.generated_docs import rewrite_section

TARGET_ENVS = 32768  # the env target's number of envs; the env step measures at it
BATCH = 8192  # the learner and sum-tree targets' batch size; the learner step measures at it
RETURN_BY_S = 300.0  # the wall time by which the train run's return is measured (return_at_5_min)
TARGET_COLUMNS = ["name", "target", "measured", "unit", "met", "gpu"]
DOCS_START, DOCS_END = "<!-- gpu-targets:start -->", "<!-- gpu-targets:end -->"


@dataclasses.dataclass(frozen=True)
class Target:
    """One H100/H200 target: a row of the report's Targets table, of targets.csv and of docs/gpu.md's."""

    name: str  # short id, targets.csv's name
    text: str  # what is measured, as the report says it
    value: float
    unit: str  # targets.csv's unit; fmt_measure shows it
    direction: str  # ">=": at least value; "<=": at most
    measure: Callable[[Figures], float | None]  # None: not measured

    def met(self, measured: float) -> bool:
        return measured >= self.value if self.direction == ">=" else measured <= self.value

    def threshold(self) -> str:
        """The target as the report and the docs show it, e.g. "≥ 3,000"."""
        return f"{'≥' if self.direction == '>=' else '≤'} {fmt_measure(self.value, self.unit)}"


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
        lambda fig: kernel_time(fig.kernels, "index update + sample, capacity 2^23", "triton"),
    ),
    Target(
        "flat_us",
        f"flat index (prefix sum) update + sample of {BATCH:,}, capacity 2^23",
        100,
        "us",
        "<=",
        lambda fig: kernel_time(fig.kernels, "index update + sample, capacity 2^23", "flat"),
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


def target_rows(fig: Figures) -> list[tuple[Target, float | None]]:
    """Each target with its measure (None: not measured)."""
    return [(t, t.measure(fig)) for t in TARGETS]


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


def docs_table() -> str:
    """docs/gpu.md's table of the targets: targets.csv's name, what is measured, the target."""
    rows = [[f"`{t.name}`", t.text, t.threshold()] for t in TARGETS]
    return "\n".join(table(["name", "what is measured", "target"], rows, "llr"))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        rewrite_section(sys.argv[1], DOCS_START, DOCS_END, docs_table())
    else:
        print(docs_table())
