"""The blocking wait of a role that may not run yet, and the stall check.

A role that may not run sleeps (`shared.Wakeup`) until a role that counts work wakes it
(`SharedState.add`); the sleep has a timeout, so a stopped run or a dead parent is noticed within
a second and a missed wake-up costs no more than WAKE_S. Who may run is not decided here: the
caller passes its predicate (control.RatioController for PQL's roles, the trajectory queue for
IMPALA's).

A role waiting with no progress anywhere for runtime.stall_timeout_s stops the run. Until every
role has counted once in this launch the limit is runtime.startup_timeout_s instead: building
the envs, compiling Warp's kernels cold and capturing CUDA graphs can take minutes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from pql.runtime.shared import RunCounters, Wakeup

WAKE_S = 0.1  # a waiting role re-checks at least this often


class StallError(RuntimeError):
    """A role waited past runtime.stall_timeout_s with no progress anywhere, or lost its parent."""


class Waiter:
    """The wait of role `role` (a name `wakeup` knows). counters.progress names the counters whose
    change is progress; started() says whether every role has counted work in this launch."""

    def __init__(
        self,
        counters: RunCounters,
        wakeup: Wakeup,
        role: str,
        stall_timeout_s: float,
        startup_timeout_s: float,
        started: Callable[[], bool],
    ):
        self.counters, self.wakeup, self.role, self.started = counters, wakeup, role, started
        self.stall_timeout_s, self.startup_timeout_s = stall_timeout_s, startup_timeout_s
        self.parent_pid = os.getppid()

    def _progress(self) -> dict:
        return self.counters.as_dict(self.counters.progress)

    def wait(self, ready: Callable[[], bool], idle: Callable[[], None], what: str) -> bool:
        """Block until `ready()` or the run stops; `idle()` runs on every wake-up (learners copy
        staged data then, so the actor is never held up by a learner that is waiting itself).
        -> True when ready, False when stopping. Raises StallError past the stall timeout."""
        start = time.monotonic()
        snapshot = self._progress()
        while True:
            if self.counters.stop:
                return False
            if ready():
                return True
            idle()
            if os.getppid() != self.parent_pid:
                raise StallError("the main process is gone")
            current = self._progress()
            limit = self.stall_timeout_s if self.started() else max(self.stall_timeout_s, self.startup_timeout_s)
            if current != snapshot:
                snapshot, start = current, time.monotonic()
            elif time.monotonic() - start > limit:
                counts = ", ".join(f"{k} {v}" for k, v in current.items())
                raise StallError(f"waited {limit:.0f}s for {what} with no progress ({counts})")
            self.wakeup.sleep(self.role, lambda: bool(self.counters.stop) or ready(), WAKE_S)
