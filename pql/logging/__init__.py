"""Run logging: metrics.csv, TensorBoard, optional wandb, the console line, learning curves."""

from .keys import CONFIG_JSON, EVAL_RETURN, LEARNING_CURVE_PNG, LOSS, METRICS_CSV, RATIO, UPDATES_PER_S
from .metrics_csv import read_metrics
from .run_logger import RunLogger
from .wandb_run import WandbSettings

__all__ = [
    "RunLogger",
    "WandbSettings",
    "read_metrics",
    "EVAL_RETURN",
    "UPDATES_PER_S",
    "RATIO",
    "LOSS",
    "METRICS_CSV",
    "LEARNING_CURVE_PNG",
    "CONFIG_JSON",
]
