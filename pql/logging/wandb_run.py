"""Optional Weights & Biases mirror of the logged scalars; wandb is imported only when activated."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal, get_args

WandbMode = Literal["online", "offline"]
_MODES = get_args(WandbMode)


@dataclass
class WandbSettings:
    """Mirrors the `wandb` config group; `name` (the run's display name) is for the caller to pick."""

    activate: bool = False
    project: str = "pql"
    entity: str | None = None
    mode: WandbMode = "online"
    group: str | None = None
    name: str | None = None

    def __post_init__(self):
        if self.mode not in _MODES:
            raise ValueError(f"wandb.mode={self.mode!r} is not allowed; expected one of {', '.join(_MODES)}")


def start_wandb(settings: WandbSettings, run_dir: str, config: dict):
    """Start a wandb run whose x axis is env steps; returns the run (has .log and .finish)."""
    try:
        import wandb
    except ImportError as e:
        raise RuntimeError(
            "wandb.activate=true but wandb is not installed: "
            "pip install wandb (or pip install -e .[wandb]), or set wandb.activate=false"
        ) from e
    try:
        run = wandb.init(
            project=settings.project,
            entity=settings.entity,
            mode=settings.mode,
            group=settings.group,
            name=settings.name,
            config=config,
            # The run's wandb files live with the rest of the run unless the user
            # chose a place for all of them with WANDB_DIR.
            dir=os.environ.get("WANDB_DIR") or run_dir,
        )
    except Exception as e:
        raise RuntimeError(
            f"wandb.init failed ({type(e).__name__}: {e}); without network or a wandb "
            "login, run with wandb.mode=offline and upload later with `wandb sync`"
        ) from e
    # Runs with different num_envs or speeds are compared at equal env steps, not equal log calls.
    run.define_metric("env_steps")
    run.define_metric("*", step_metric="env_steps")
    return run
