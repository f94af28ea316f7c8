"""RunLogger: everything a run records about itself, in its run directory.

One object in the main process receives the scalars and writes them to metrics.csv,
TensorBoard and (when activated) wandb; it prints the live console line and, on close, draws
learning_curve.png. See docs/logging.md for what lands in a run directory.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from pql.video import gif

from .console import Progress
from .curves import plot_curves
from .keys import CONFIG_JSON, EVAL_RETURN, EVAL_VIDEO, LEARNING_CURVE_PNG, METRICS_CSV
from .metrics_csv import FIXED_COLUMNS, MetricsCsv, read_metrics
from .wandb_run import WandbSettings, start_wandb


class RunLogger:
    """Logs scalars against env steps for one run.

    run_dir: created if missing; a run resumed into an existing run_dir appends to it.
    config: the resolved config as plain data (`pql.config.to_dict`), saved as config.json,
        shown in TensorBoard's text tab and given to wandb.
    total_env_steps: the run's env-step budget, for the console's percentage and time left.
    progress_every_s: the console line is printed at most this often.
    max_time_s: the run's wall-time limit (None: none), for the console's time left.
    start_env_steps: where this run starts (a resumed run: its checkpoint's env steps); what an
        earlier launch logged past it in this run_dir is dropped (metrics.csv, TensorBoard).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        config: dict,
        total_env_steps: int,
        wandb: WandbSettings | None = None,
        progress_every_s: float = 10.0,
        max_time_s: float | None = None,
        start_env_steps: int = 0,
    ):
        if total_env_steps <= 0:
            raise ValueError(f"total_env_steps={total_env_steps!r} is not allowed; expected an integer > 0")
        self.run_dir = os.fspath(run_dir)
        os.makedirs(self.run_dir, exist_ok=True)
        # wandb first: it is the part most likely to fail (no login, no network), and failing
        # before any file is open leaves nothing to clean up.
        self._wandb = start_wandb(wandb, self.run_dir, config) if wandb is not None and wandb.activate else None
        config_text = json.dumps(config, indent=2, default=str)
        with open(os.path.join(self.run_dir, CONFIG_JSON), "w") as f:
            f.write(config_text + "\n")
        self._csv = MetricsCsv(os.path.join(self.run_dir, METRICS_CSV), start_env_steps)
        if self._csv.dropped:
            print(
                f"pql: {METRICS_CSV}: dropped {self._csv.dropped} rows logged after env step {start_env_steps:,}, "
                "where this run starts (after the checkpoint it resumes from)",
                flush=True,
            )
        from torch.utils.tensorboard import SummaryWriter  # on use: role processes import this module, never write

        self._tb = SummaryWriter(log_dir=self.run_dir, flush_secs=10, purge_step=start_env_steps + 1)
        self._tb.add_text("config", "```\n" + config_text + "\n```")  # TensorBoard renders markdown
        self._progress = Progress(total_env_steps, progress_every_s, max_time_s)
        self._start = time.monotonic()
        self._latest: dict[str, float] = {}  # the console shows the last value of each key, e.g. the last eval
        self._closed = False

    def log(self, env_steps: int, scalars: dict[str, float]) -> None:
        """Record `scalars` (floats, ints or 0-d tensors) at `env_steps` in CSV, TensorBoard and wandb."""
        values = _as_floats(scalars)
        wall_time_s = self._csv.last_wall_time_s + time.monotonic() - self._start
        self._csv.write(env_steps, wall_time_s, values)
        for key, value in values.items():
            self._tb.add_scalar(key, value, global_step=env_steps)
        if self._wandb is not None:
            self._wandb.log({"env_steps": env_steps, "wall_time_s": wall_time_s, **values})
        self._latest.update(values)

    def video(self, env_steps: int, path: str, frames: np.ndarray, fps: float) -> None:
        """An evaluation's video, written to `path` (MP4) already: TensorBoard's eval/video (an
        animated GIF, what its video summaries hold) and wandb's."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        height, width = frames.shape[1:3]
        image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif(frames, fps))
        writer = self._tb._get_file_writer()
        writer.add_summary(Summary(value=[Summary.Value(tag=EVAL_VIDEO, image=image)]), env_steps)
        if self._wandb is not None:
            import wandb

            self._wandb.log({"env_steps": env_steps, EVAL_VIDEO: wandb.Video(path, format="mp4")})

    def progress(self, env_steps: int, scalars: dict[str, float]) -> None:
        """Print the console line if `progress_every_s` has passed since the last one.

        Shown keys: `updates_per_s/<role>`, `ratio/<name>`, `eval/return`, `loss/<name>`; the
        latest value of each, from this call or earlier `log`/`progress` calls.
        """
        self._latest.update(_as_floats(scalars))
        self._progress.maybe_print(env_steps, self._latest)

    def close(self) -> None:
        """Flush and close every sink, then draw learning_curve.png (if any eval/return was logged)."""
        if self._closed:
            return
        self._closed = True
        self._csv.close()
        self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
        metrics = read_metrics(self._csv.path)
        if EVAL_RETURN not in metrics or not np.isfinite(metrics[EVAL_RETURN]).any():
            print(f"no {EVAL_RETURN} logged: {LEARNING_CURVE_PNG} not drawn", flush=True)
            return
        out = os.path.join(self.run_dir, LEARNING_CURVE_PNG)
        plot_curves([(None, metrics)], EVAL_RETURN, out, title=os.path.basename(os.path.abspath(self.run_dir)))
        print(f"learning curve: {out}", flush=True)

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _as_floats(scalars: dict) -> dict[str, float]:
    values = {}
    for key, value in scalars.items():
        if key in FIXED_COLUMNS:
            raise ValueError(f"scalar key {key!r} is reserved: the logger writes it itself")
        try:
            values[key] = float(value)
        except (TypeError, ValueError, RuntimeError) as e:  # RuntimeError: a tensor of more than one element
            raise TypeError(f"scalar {key!r} is {value!r}, not a number") from e
    return values
