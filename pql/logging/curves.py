"""Return-vs-env-steps and return-vs-wall-time panels, for one run or several."""

from __future__ import annotations

import math
import re
import textwrap
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LEGEND_CHARS = 170  # characters of a "small" legend that fit across plot_curves' figure
SE = " s.e."  # metrics[key + SE]: the standard error of a curve that is a mean over runs, drawn as a band
MEAN_OF_SEEDS = " (mean of {} seeds)"  # the end of a label whose curve is a mean over seeds
_MEAN_OF_SEEDS = re.compile(re.escape(MEAN_OF_SEEDS).replace(r"\{\}", r"\d+") + "$")


def _figure(**kwargs) -> Figure:
    """A Figure without pyplot: it renders with Agg and touches no global backend state, so
    drawing works on a headless machine and inside a process that uses another backend.
    matplotlib loads on first use (about a second): role processes, which import this module
    with the run's logging, never draw."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def plot_curves(
    curves: list[tuple[str | None, dict[str, np.ndarray]]], key: str, out_path: str, title: str | None = None
) -> Figure:
    """Draw `key` against env_steps (left) and wall_time_s (right) for each (label, metrics), and
    return the figure it saved.

    `metrics` is what `read_metrics` returns; rows where `key` is empty are skipped. A label of
    None draws no legend entry.
    """
    unit, scale = _time_unit(curves)
    fig = _figure(figsize=(11, 4.2), layout="constrained")
    ax_steps, ax_time = fig.subplots(1, 2, sharey=True)
    _draw(ax_steps, curves, key, "env_steps")
    _draw(ax_time, curves, key, "wall_time_s", scale)
    ax_steps.set_xlabel("env steps")
    ax_steps.set_ylabel(key)
    ax_time.set_xlabel(f"wall time ({unit})")
    labels = [label for label, _ in curves if label is not None]
    if labels:
        # Below both panels: inside one, a legend of several runs hid the curves it names. As many
        # columns as the longest label leaves room for: wider ones ran off the figure's edges.
        ncols = max(1, min(3, len(labels), LEGEND_CHARS // (max(map(len, labels)) + 6)))
        fig.legend(handles=ax_time.get_lines(), loc="outside lower center", ncols=ncols, fontsize="small")
    if title:
        # A sweep's shared overrides can run wider than the figure: wrapped, not cut off.
        fig.suptitle(textwrap.fill(title, width=130), fontsize="medium")
    fig.savefig(out_path, dpi=120)
    return fig


def plot_task_panels(
    panels: list[tuple[str, list[tuple[str | None, dict[str, np.ndarray]]]]],
    key: str,
    out_path: str,
    x_key: str = "env_steps",
) -> Figure:
    """Draw `key` against `x_key` (env_steps or wall_time_s) in one panel per (task, curves):
    returns of different tasks share no scale. Curves are (label, metrics) as for `plot_curves`.
    Returns the figure it saved."""
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    # Each panel's legend sits below it, one line per labelled run.
    legend_lines = max(sum(label is not None for label, _ in curves) for _, curves in panels)
    fig = _figure(figsize=(3.6 * cols, (2.9 + 0.17 * legend_lines) * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    if x_key == "wall_time_s":
        unit, scale = _time_unit([c for _, curves in panels for c in curves])
        x_label = f"wall time ({unit})"
    else:
        scale, x_label = 1.0, "env steps"
    # One colour per setting across the panels, so a setting reads the same in every task even
    # where a panel lacks some settings, or averages seeds the others do not.
    settings = dict.fromkeys(
        _MEAN_OF_SEEDS.sub("", label) for _, curves in panels for label, _ in curves if label is not None
    )
    colors = {setting: f"C{i % 10}" for i, setting in enumerate(settings)}
    for ax, (task, curves) in zip(axes, panels):
        _draw(ax, curves, key, x_key, scale, colors)
        ax.set_title(task, fontsize="medium")
        if x_key == "env_steps":
            from matplotlib.ticker import EngFormatter

            ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 200k: narrow panels have no room for 200000
        if any(label is not None for label, _ in curves):
            # Below the panel: inside it, a legend of several runs hid the curves it names.
            ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.15))
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    fig.supxlabel(x_label, fontsize="medium")
    fig.supylabel(key, fontsize="medium")
    fig.savefig(out_path, dpi=120)
    return fig


def _time_unit(curves) -> tuple[str, float]:
    """(unit, seconds per unit) that keeps the longest run's wall-time axis readable."""
    max_wall = max(float(np.nanmax(m["wall_time_s"], initial=0.0)) for _, m in curves)
    return next(
        (u, s) for u, s, limit in (("s", 1.0, 120.0), ("min", 60.0, 7200.0), ("h", 3600.0, np.inf)) if max_wall < limit
    )


def _draw(ax, curves, key: str, x_key: str, scale: float = 1.0, colors: dict[str, str] | None = None) -> None:
    """Each (label, metrics) as `key` against `x_key` / scale, skipping rows without `key`;
    `colors` maps a label, less its MEAN_OF_SEEDS ending, to its colour (default: matplotlib's cycle)."""
    for label, metrics in curves:
        y = metrics[key]
        has = np.isfinite(y)
        x = metrics[x_key][has] / scale
        color = (colors or {}).get(_MEAN_OF_SEEDS.sub("", label)) if label is not None else None
        (line,) = ax.plot(x, y[has], marker=".", label=label, color=color)
        if key + SE in metrics:
            se = metrics[key + SE][has]
            ax.fill_between(x, y[has] - se, y[has] + se, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.grid(alpha=0.3)
