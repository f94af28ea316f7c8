"""The DeepMind Control Suite on pql's batched simulators: `task=dmc/<domain>-<task>` (suite.py)."""

from __future__ import annotations

from .cheetah import CheetahRun
from .suite import DmcTask
from .walker import WalkerRun, WalkerStand, WalkerWalk

PREFIX = "dmc/"
DMC_TASKS: dict[str, type[DmcTask]] = {
    f"{PREFIX}{cls.domain}-{cls.suite_task}": cls
    for cls in (
        CheetahRun,
        WalkerStand,
        WalkerWalk,
        WalkerRun,
    )
}
