"""Shared counters and the ratio controller.

The ratios are enforced exactly by counting, not by tuning sleeps. Let a, v, p be the batched
actor steps, critic updates and policy updates made since this launch (a after the warm-up).
With β_a:v = 1:beta_av, β_p:v = 1:beta_pv and a window of `max_lag` actor steps:

* the actor may step while        a < v / beta_av + max_lag
* the V-learner may update while  v < beta_av · a   and   v < beta_pv · p + beta_av · max_lag
* the P-learner may update while  p < v / beta_pv

so over a run v/a → beta_av and v/p → beta_pv, each off by at most the window. A role that may
not run blocks on a multiprocessing Condition that every role notifies after it counts; the
wait has a timeout so a stopped run or a dead parent is noticed within a second.

A role waiting with no progress anywhere for runtime.stall_timeout_s stops the run. Until every
role has counted once in this launch the limit is runtime.startup_timeout_s instead: building
the envs, compiling Warp's kernels cold and capturing CUDA graphs can take minutes.
"""
from __future__ import annotations

import enum
import os
import time

import torch


class C(enum.IntEnum):
    """Slots of the shared int64 counter tensor. Each slot has exactly one writer."""

    ACTOR_STEPS = 0      # batched transitions published by the actor (writer: actor)
    CRITIC_UPDATES = 1   # writer: V-learner
    POLICY_UPDATES = 2   # writer: P-learner
    CONSUMED_V = 3       # staging slots the V-learner has copied into its replay
    CONSUMED_P = 4       # staging slots the P-learner has copied into its replay
    ENV_STEPS = 5        # env transitions stepped (num_envs per actor step; writer: actor)
    ACTOR_DONE = 6       # 1 once the actor reached the step budget (writer: actor or main)
    STOP = 7             # 1: every role leaves its loop (writer: main)
    CKPT_REQUEST = 8     # id of the latest checkpoint asked for (writer: main)
    A0 = 9               # counter values at launch (writer: main, before the roles start)
    V0 = 10
    P0 = 11
    EPISODES = 12        # training episodes finished (writer: actor)
    WARMUP = 13          # actor steps of warm-up in this launch (writer: main)


class S(enum.IntEnum):
    """Slots of the shared float64 stats tensor: the latest value each role reports."""

    CRITIC_LOSS = 0
    POLICY_LOSS = 1
    Q_MEAN = 2
    TRAIN_RETURN = 3     # mean return of the episodes finished in the last actor step with any
    TRAIN_LENGTH = 4
    POLICY_VERSION_LAG = 5


NUM_COUNTERS, NUM_STATS = len(C), len(S)


WAKE_S = 0.5          # a waiting role re-checks at least this often (a missed notify costs no more)
LOCK_TIMEOUT_S = 1.0  # longest wait for the condition's lock


class StallError(RuntimeError):
    """A role waited past runtime.stall_timeout_s with no progress anywhere, or lost its parent."""


class RatioController:
    """The predicates above over the shared counters, and the blocking wait."""

    def __init__(self, counters: torch.Tensor, condition, beta_av: int, beta_pv: int, max_lag: int,
                 stall_timeout_s: float, startup_timeout_s: float):
        self.counters, self.condition = counters, condition
        self.beta_av, self.beta_pv, self.max_lag = beta_av, beta_pv, max_lag
        self.stall_timeout_s, self.startup_timeout_s = stall_timeout_s, startup_timeout_s
        self.parent_pid = os.getppid()

    def get(self, slot: C) -> int:
        return int(self.counters[slot])

    def progress(self) -> tuple[int, int, int]:
        """(a, v, p) since launch, a counted after the warm-up."""
        c = self.counters
        a = int(c[C.ACTOR_STEPS] - c[C.A0] - c[C.WARMUP])
        return a, int(c[C.CRITIC_UPDATES] - c[C.V0]), int(c[C.POLICY_UPDATES] - c[C.P0])

    def actor_may_step(self, in_flight: int = 0) -> bool:
        """in_flight: actor steps made but not counted yet (their ring writes have not landed)."""
        a, v, _ = self.progress()
        return (a + in_flight) * self.beta_av < v + self.max_lag * self.beta_av

    def started(self) -> bool:
        """Whether every role has counted work in this launch."""
        c = self.counters
        return bool(c[C.ACTOR_STEPS] > c[C.A0] and c[C.CRITIC_UPDATES] > c[C.V0] and c[C.POLICY_UPDATES] > c[C.P0])

    def critic_may_update(self) -> bool:
        a, v, p = self.progress()
        return v < self.beta_av * a and v < self.beta_pv * p + self.beta_av * self.max_lag

    def policy_may_update(self) -> bool:
        _, v, p = self.progress()
        return (p + 1) * self.beta_pv <= v

    def stopping(self) -> bool:
        return bool(self.counters[C.STOP])

    def advance(self, slot: C, by: int = 1) -> None:
        """Count work done by this role and wake the others."""
        self.counters[slot] += by
        self.notify()

    def notify(self) -> None:
        notify_all(self.condition)

    def wait(self, ready, idle, what: str) -> bool:
        """Block until `ready()` or the run stops; `idle()` runs on every wake-up (learners copy
        staged data then, so the actor is never held up by a learner that is waiting itself).
        -> True when ready, False when stopping. Raises StallError past the stall timeout."""
        start = time.monotonic()
        snapshot = self.counters[:C.CONSUMED_P + 1].clone()
        while True:
            if self.stopping():
                return False
            if ready():
                return True
            idle()
            if os.getppid() != self.parent_pid:
                raise StallError("the main process is gone")
            current = self.counters[:C.CONSUMED_P + 1]
            limit = self.stall_timeout_s if self.started() else max(self.stall_timeout_s, self.startup_timeout_s)
            if not torch.equal(current, snapshot):
                snapshot, start = current.clone(), time.monotonic()
            elif time.monotonic() - start > limit:
                a, v, p = self.progress()
                raise StallError(f"waited {limit:.0f}s for {what} with no progress "
                                 f"(actor steps {a}, critic updates {v}, policy updates {p})")
            # A timed acquire: a role killed while holding the lock must not block the others. The
            # checks repeat under the lock, so a notify between the ones above and the wait is kept.
            if self.condition.acquire(timeout=LOCK_TIMEOUT_S):
                try:
                    if not (self.stopping() or ready()):
                        self.condition.wait(timeout=WAKE_S)
                finally:
                    self.condition.release()


def notify_all(condition) -> None:
    """Wake every role waiting on `condition` (None in sequential mode: nothing to wake). Gives up
    after LOCK_TIMEOUT_S if a dead process holds the lock: the waiters' own timeouts cover it."""
    if condition is not None and condition.acquire(timeout=LOCK_TIMEOUT_S):
        try:
            condition.notify_all()
        finally:
            condition.release()
