"""The live console line: where the run is, how fast it goes, and how long it has left."""

from __future__ import annotations

import math
import time

from .keys import EVAL_RETURN, LOSS, RATIO, UPDATES_PER_S


class Progress:
    """Prints `format_progress` lines, at most one every `every_s` seconds.

    Steps/s is measured between printed lines (not since the start), so the remaining-time
    estimate follows a run that speeds up after warm-up or slows down when evaluation kicks in.
    """

    def __init__(self, total_env_steps: int, every_s: float, max_time_s: float | None = None):
        self.total_env_steps, self.max_time_s = total_env_steps, max_time_s
        self.every_s = every_s
        self._start = time.monotonic()
        self._last: tuple[float, int] | None = None  # (time, env_steps) of the last line printed

    def maybe_print(self, env_steps: int, scalars: dict[str, float]) -> None:
        now = time.monotonic()
        if self._last is not None and now - self._last[0] < self.every_s:
            return
        steps_per_s = None
        if self._last is not None and now > self._last[0]:
            steps_per_s = (env_steps - self._last[1]) / (now - self._last[0])
        self._last = (now, env_steps)
        print(
            format_progress(env_steps, self.total_env_steps, steps_per_s, now - self._start, scalars, self.max_time_s),
            flush=True,
        )


def format_progress(
    env_steps: int,
    total_env_steps: int,
    steps_per_s: float | None,
    elapsed_s: float,
    scalars: dict[str, float],
    max_time_s: float | None = None,
) -> str:
    """One line, e.g.
    `1.20M/2.00M steps 60.0% | 41.3k steps/s | upd/s v_learner 5.2k p_learner 2.6k |
    ratio beta_av 8.00 beta_pv 2.00 | return 3512.4 | loss critic 0.412 actor -61.3 |
    0:00:29 elapsed, 0:00:19 left`. The time left is the sooner of the step budget at the current
    speed and the wall-time limit `max_time_s` (None: none); when the limit comes first the line
    starts with the share of it spent (`120k steps 13.6% of 0:14:45`).
    """
    estimates = []
    if steps_per_s is not None and steps_per_s > 0:
        estimates.append(max(total_env_steps - env_steps, 0) / steps_per_s)
    head = f"{_si(env_steps)}/{_si(total_env_steps)} steps {100.0 * env_steps / total_env_steps:.1f}%"
    if max_time_s is not None:
        time_left = max(max_time_s - elapsed_s, 0.0)
        if not estimates or time_left < estimates[0]:
            head = f"{_si(env_steps)} steps {100.0 * min(elapsed_s / max_time_s, 1.0):.1f}% of {_hms(max_time_s)}"
        estimates.append(time_left)
    optional = [
        head,
        f"{_si(steps_per_s) if steps_per_s is not None else '-'} steps/s",
        _group("upd/s", UPDATES_PER_S, _si, scalars),
        _group("ratio", RATIO, "{:.2f}".format, scalars),
        f"return {scalars[EVAL_RETURN]:.1f}" if EVAL_RETURN in scalars else None,
        _group("loss", LOSS, "{:.3g}".format, scalars),
    ]
    parts = [p for p in optional if p]
    left = _hms(min(estimates)) if estimates else "?"
    parts.append(f"{_hms(elapsed_s)} elapsed, {left} left")
    return " | ".join(parts)


def _group(title: str, prefix: str, fmt, scalars: dict[str, float]) -> str | None:
    items = [f"{k[len(prefix) :]} {fmt(v)}" for k, v in scalars.items() if k.startswith(prefix)]
    return f"{title} {' '.join(items)}" if items else None


def _si(x: float) -> str:
    """1234567 -> '1.23M': about three significant figures keep the line's width steady."""
    if not math.isfinite(x):
        return str(x)
    scale, suffix = next(((s, p) for s, p in ((1e9, "G"), (1e6, "M"), (1e3, "k")) if abs(x) >= s), (1.0, ""))
    v = x / scale
    if suffix == "" and float(x).is_integer():
        return str(int(x))
    decimals = 2 if abs(v) < 10 else 1 if abs(v) < 100 else 0
    return f"{v:.{decimals}f}{suffix}"


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
