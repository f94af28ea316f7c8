"""Why a run stops before its env-step budget, as one small code its replicas agree on, and the
stop signals of a replica's main process.

A stop code is what a replica's main process asks its actors for (`counters.finish`): GO_ON,
FINISH (runtime.max_time_s reached, or solved) or a stop signal's exit code (128 + the signal:
130 for SIGINT, 143 for SIGTERM). The actors agree on the largest every FINISH_CHECK_EVERY steps
(`ReplicaGroup.agree`, one all-reduce), so every replica learns why it stops, also those that
received no signal: a signal outranks FINISH, and SIGTERM outranks SIGINT.

The first SIGINT or SIGTERM is only recorded (`StopSignals`): the replicas finish at that agreed
step, the learners catch up to the ratios' final counts, rank 0 writes its checkpoint, and every
replica then ends with the signal's exit code (`Stopped`). A second signal raises `Stopped` at
once, without a new checkpoint (one whose write is under way is finished first:
pql.checkpoint), unless it comes within SAME_STOP_S of the first: SLURM signals every process of
a job step, and torchrun, signalled too, forwards the signal to its replicas, so each replica
gets the same stop twice. The role processes ignore both (pql/runtime/supervisor.py).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time

from pql.checkpoint import STOP_SIGNALS

GO_ON = 0
FINISH = 1  # the time limit, or solved
SAME_STOP_S = 2.0  # a signal this soon after the first is the same stop, delivered twice


def exit_code(signum: int) -> int:
    """The stop code, and the exit code, of a stop signal (a shell's convention: 128 + signal)."""
    return 128 + signum


def signal_name(code: int) -> str:
    return signal.Signals(code - 128).name


def by_signal(code: int) -> bool:
    return code > FINISH


class Stopped(KeyboardInterrupt):
    """The run stopped on a stop signal: after the agreed stop (its checkpoint written), or at
    once on a second signal. `code`: the exit code, 130 (SIGINT) or 143 (SIGTERM). A
    KeyboardInterrupt, so that no `except Exception` takes it for a failure."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


class StopSignals:
    """The stop signals a replica's main process has received: `code` is the first one's stop
    code (GO_ON: none yet)."""

    def __init__(self):
        self.code = GO_ON
        self.first_at = 0.0  # time.monotonic() of the first signal

    def received(self, signum: int, frame=None) -> None:
        """The handler of SIGINT and SIGTERM."""
        if not self.code:
            self.code, self.first_at = exit_code(signum), time.monotonic()
        elif time.monotonic() - self.first_at > SAME_STOP_S:
            raise Stopped(exit_code(signum))

    @contextlib.contextmanager
    def handled(self):
        """Record SIGINT and SIGTERM while in the block. Only the main thread may handle
        signals (a test's worker thread changes nothing), and a signal this process was started
        with ignored (a shell's background job: SIGINT) stays ignored."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        saved = {s: signal.getsignal(s) for s in STOP_SIGNALS}
        for s, handler in saved.items():
            if handler is not signal.SIG_IGN:
                signal.signal(s, self.received)
        try:
            yield self
        finally:
            for s, handler in saved.items():
                signal.signal(s, handler)
