"""metrics.csv: one row per `RunLogger.log` call, written so a crash loses nothing logged.

Columns: `env_steps`, `wall_time_s`, then one column per scalar key in the order keys first
appeared. A row leaves the keys it did not log empty. When a row brings a new key, the file is
rewritten once with the wider header (into a temporary file renamed over the old one, so a crash
during the rewrite leaves the old file whole); rows are flushed as they are written.
"""

from __future__ import annotations

import csv
import math
import os

import numpy as np

FIXED_COLUMNS = ["env_steps", "wall_time_s"]


class MetricsCsv:
    """start_env_steps: where the run writing now starts (0, or the env steps of the checkpoint
    it resumes from). A run resumed into its own directory appends after the rows up to there;
    rows logged beyond it (by the launch that went on past its last checkpoint and then stopped)
    are dropped, so the file is one timeline with no row twice. `dropped` counts them."""

    def __init__(self, path: str, start_env_steps: int = 0):
        self.path = path
        self.last_wall_time_s = 0.0
        self.dropped = 0
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path, newline="") as f:
                rows = list(csv.reader(f))
            if rows[0][:2] != FIXED_COLUMNS:
                raise ValueError(
                    f"{path} exists but is not a pql metrics file "
                    f"(its header starts {rows[0][:2]}, expected {FIXED_COLUMNS})"
                )
            self.columns = rows[0]
            kept = [r for r in rows[1:] if len(r) >= 2 and _to_float(r[0]) <= start_env_steps]
            self.dropped = len(rows) - 1 - len(kept)
            if self.dropped:
                self._rewrite(kept)
            if kept:  # wall time carries on from the last row: curves against wall time stay continuous
                self.last_wall_time_s = _to_float(kept[-1][1])
            self._open("a")
        else:
            self.columns = list(FIXED_COLUMNS)
            self._open("w")
            self._writer.writerow(self.columns)
            self._file.flush()

    def _open(self, mode: str) -> None:
        self._file = open(self.path, mode, newline="")
        self._writer = csv.writer(self._file, lineterminator="\n")

    def write(self, env_steps: int, wall_time_s: float, scalars: dict[str, float]) -> None:
        new = [k for k in scalars if k not in self.columns]
        if new:
            self._widen(new)
        row = {"env_steps": str(int(env_steps)), "wall_time_s": f"{wall_time_s:.3f}"}
        row.update((k, repr(v)) for k, v in scalars.items())
        self._writer.writerow([row.get(c, "") for c in self.columns])
        # flush, not fsync: a crashed process loses nothing once the OS has the bytes; an fsync
        # per row would only guard against a machine crash.
        self._file.flush()

    def _widen(self, new_columns: list[str]) -> None:
        self._file.close()
        with open(self.path, newline="") as f:
            rows = list(csv.reader(f))[1:]
        self.columns += new_columns
        self._rewrite(rows)
        self._open("a")

    def _rewrite(self, rows: list[list[str]]) -> None:
        """The file with the current header and `rows`, replaced whole (a crash keeps the old one)."""
        tmp = self.path + ".tmp"
        with open(tmp, "w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(self.columns)
            writer.writerows(r + [""] * (len(self.columns) - len(r)) for r in rows)
        os.replace(tmp, self.path)

    def close(self) -> None:
        self._file.close()


def read_metrics(path: str) -> dict[str, np.ndarray]:
    """Columns of a metrics.csv as float64 arrays; empty or unreadable cells are NaN.

    Tolerates a file being written (a last row cut short) so a live run can be plotted.
    """
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return {}
    header, body = rows[0], rows[1:]
    return {
        name: np.array([_to_float(r[i]) if i < len(r) else math.nan for r in body], dtype=np.float64)
        for i, name in enumerate(header)
    }


def _to_float(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        return math.nan
