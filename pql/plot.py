"""Compare runs: `python -m pql.plot RUN_DIR [RUN_DIR ...] [--out FILE] [--key eval/return] [--x wall_time]`.

Draws one figure with `key` against env steps and against wall time for every run. A RUN_DIR
is a run directory (it has metrics.csv) or a Hydra multirun directory (its numbered
subdirectories are the runs). Each run is labelled by the Hydra overrides
(`RUN_DIR/.hydra/overrides.yaml`) that differ across the runs, e.g. `algo.beta_pv=4`; the
overrides they share become the title. A run without overrides is labelled by its directory.
Runs of more than one task (config.json's task.name) are drawn in one panel per task, each run
labelled among its task's runs, against env steps or, with `--x wall_time`, against wall time
(to compare runs that step at different speeds, e.g. pql and a peer at equal wall time).
With `--mean-seeds`, runs whose overrides differ only in `runtime.seed` are drawn as one curve:
the mean over the seeds with a band of ± its standard error, at the env steps of the run whose
evaluations end first (the others interpolated there).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import yaml

from pql.logging import EVAL_RETURN, METRICS_CSV, read_metrics
from pql.logging.curves import MEAN_OF_SEEDS, SE, plot_curves, plot_task_panels
from pql.logging.keys import CONFIG_JSON


class PlotError(Exception):
    """A problem with the inputs; its message is the one line shown to the user."""


def find_runs(paths: list[str]) -> list[tuple[str, bool]]:
    """(run directory, found inside a multirun directory) for each run the paths name."""
    runs = []
    for path in paths:
        if not os.path.isdir(path):
            raise PlotError(f"{path}: no such directory")
        if os.path.isfile(os.path.join(path, METRICS_CSV)):
            runs.append((path, False))
            continue
        numbered = sorted(
            (d for d in os.listdir(path) if d.isdigit() and os.path.isfile(os.path.join(path, d, METRICS_CSV))), key=int
        )
        if not numbered:
            raise PlotError(f"{path} has no {METRICS_CSV}, and no numbered run directories (a Hydra multirun) with one")
        runs += [(os.path.join(path, d), True) for d in numbered]
    return runs


def load_curves(runs: list[tuple[str, bool]], key: str) -> list[tuple[str, dict[str, np.ndarray]]]:
    """(run directory, metrics) of the runs that logged `key`.

    A run named on the command line must have `key`; one found inside a multirun directory
    without it (still starting, or crashed early) is skipped with a note, so the rest of the
    sweep can still be compared.
    """
    curves = []
    for run_dir, in_multirun in runs:
        metrics = read_metrics(os.path.join(run_dir, METRICS_CSV))
        if key in metrics and np.isfinite(metrics[key]).any():
            curves.append((run_dir, metrics))
            continue
        problem = f"{os.path.join(run_dir, METRICS_CSV)} has no {key!r} values"
        if not in_multirun:
            raise PlotError(problem)
        print(f"pql.plot: skipping {run_dir}: {problem}", file=sys.stderr)
    if not curves:
        raise PlotError(f"none of the runs has {key!r} values")
    return curves


SEED = "runtime.seed"


def mean_over_seeds(curves: list[tuple[str, dict]], key: str) -> list[tuple[list[str], dict[str, np.ndarray]]]:
    """The runs that set `runtime.seed` grouped by task and by their other overrides, in order of
    first appearance (any other run is a group of its own): (the group's run directories, metrics
    of the group). A group's metrics hold, at the env steps of its run whose `key` values end
    first, the mean of `key` over the runs (each interpolated there), its standard error as
    `key + SE` (none for a single run: no band) and the mean wall time."""
    groups: dict[tuple, list[tuple[str, dict]]] = {}
    for run_dir, metrics in curves:
        overrides = _read_overrides(run_dir)
        setting = (task_of(run_dir), tuple(sorted(v for k, v in overrides.items() if k != SEED)))
        groups.setdefault(setting if SEED in overrides else (run_dir,), []).append((run_dir, metrics))
    merged = []
    for runs in groups.values():
        points = [_points(m, key) for _, m in runs]
        steps = min((p[0] for p in points), key=lambda x: x[-1])
        values = np.stack([np.interp(steps, x, y) for x, y, _ in points])
        wall = np.stack([np.interp(steps, x, w) for x, _, w in points]).mean(axis=0)
        group = {"env_steps": steps, "wall_time_s": wall, key: values.mean(axis=0)}
        if len(runs) > 1:
            group[key + SE] = values.std(axis=0, ddof=1) / np.sqrt(len(runs))
        merged.append(([d for d, _ in runs], group))
    return merged


def seed_means(curves: list[tuple[str, dict]], key: str) -> tuple[list[tuple[str, dict]], dict[str, int]]:
    """`mean_over_seeds` as curves (a group's first run directory, the group's metrics) and
    {that directory: how many seeds the curve is the mean of}, as `labels_and_title` takes it."""
    groups = mean_over_seeds(curves, key)
    return [(dirs[0], metrics) for dirs, metrics in groups], {dirs[0]: len(dirs) for dirs, _ in groups}


def _points(metrics: dict, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(env steps, key, wall time) of the rows that logged `key`."""
    has = np.isfinite(metrics[key])
    return metrics["env_steps"][has], metrics[key][has], metrics["wall_time_s"][has]


def labels_and_title(run_dirs: list[str], seeds: dict[str, int] | None = None) -> tuple[list[str], str | None]:
    """A label per run (the overrides that differ across runs) and a title (those they share).
    With `seeds` ({run directory: how many seeds its curve is the mean of}, from `seed_means`),
    the seed is in neither, and a label says over how many seeds its curve is the mean."""
    overrides = [_read_overrides(d) for d in run_dirs]
    if seeds is not None:
        overrides = [{k: v for k, v in o.items() if k != SEED} for o in overrides]
    keys = list(dict.fromkeys(k for o in overrides for k in o))
    differing = {k for k in keys if len({o.get(k) for o in overrides}) > 1}
    labels = [
        ", ".join(o[k] for k in keys if k in differing and k in o) or _name(d) for d, o in zip(run_dirs, overrides)
    ]
    # Runs with the same overrides (a repeated launch) still need telling apart.
    labels = [f"{label} ({_name(d)})" if labels.count(label) > 1 else label for label, d in zip(labels, run_dirs)]
    if seeds is not None:
        labels = [
            label + MEAN_OF_SEEDS.format(seeds[d]) if seeds[d] > 1 else label for label, d in zip(labels, run_dirs)
        ]
    shared = [overrides[0][k] for k in keys if k not in differing]
    return labels, ", ".join(shared) or None


def task_of(run_dir: str) -> str | None:
    """The run's task.name from its config.json; None without one."""
    path = os.path.join(run_dir, CONFIG_JSON)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        try:
            return json.load(f)["task"]["name"]
        except (ValueError, KeyError, TypeError):
            raise PlotError(f"{path} is not a pql config (no task.name)") from None


def _read_overrides(run_dir: str) -> dict[str, str]:
    """{key: "key=value"} from Hydra's overrides.yaml; {} when the run has none."""
    path = os.path.join(run_dir, ".hydra", "overrides.yaml")
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        items = yaml.safe_load(f) or []
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise PlotError(f'{path} is not a list of overrides like ["task=Ant", "algo.beta_pv=2"]')
    return {i.split("=", 1)[0]: i for i in items}


def _name(run_dir: str) -> str:
    return os.path.basename(os.path.normpath(run_dir))


def task_panels(
    curves: list[tuple[str, dict]], tasks: list[str | None], seeds: dict[str, int] | None = None
) -> list[tuple[str, list]]:
    """(task, [(label, metrics)]) in the order the tasks first appear; a task's only run is
    unlabelled, several are labelled as `labels_and_title` labels them among themselves."""
    panels = []
    for task in dict.fromkeys(tasks):
        group = [c for c, t in zip(curves, tasks) if t == task]
        labels = labels_and_title([d for d, _ in group], seeds)[0] if len(group) > 1 else [None]
        panels.append((task or "(no config.json)", [(label, m) for label, (_, m) in zip(labels, group)]))
    return panels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pql.plot", description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories or Hydra multirun directories")
    parser.add_argument("--key", default=EVAL_RETURN, help=f"the logged scalar to plot (default {EVAL_RETURN})")
    parser.add_argument(
        "--out",
        help="PNG to write (default: compare_<key>.png in RUN_DIR if one was given, else in the current directory)",
    )
    parser.add_argument(
        "--x",
        choices=("env_steps", "wall_time"),
        default="env_steps",
        help="x axis of the per-task panels drawn for runs of several tasks (default env_steps); "
        "runs of one task are always drawn against both",
    )
    parser.add_argument(
        "--mean-seeds",
        action="store_true",
        help=f"draw runs that differ only in {SEED} as one curve: their mean, with a band of ± its standard error",
    )
    args = parser.parse_args(argv)
    out = args.out or os.path.join(
        args.run_dirs[0] if len(args.run_dirs) == 1 else ".", f"compare_{args.key.replace('/', '_')}.png"
    )
    try:
        curves = load_curves(find_runs(args.run_dirs), args.key)
        seeds = None
        if args.mean_seeds:
            curves, seeds = seed_means(curves, args.key)
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        tasks = [task_of(d) for d, _ in curves]
        if len(set(tasks)) > 1:
            plot_task_panels(
                task_panels(curves, tasks, seeds),
                args.key,
                out,
                "wall_time_s" if args.x == "wall_time" else "env_steps",
            )
        else:
            labels, title = labels_and_title([d for d, _ in curves], seeds)
            plot_curves([(label, m) for label, (_, m) in zip(labels, curves)], args.key, out, title=title)
    except (PlotError, OSError) as e:
        print(f"pql.plot: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
