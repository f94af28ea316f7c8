"""The process supervisor: role processes started (`role_context`, `role`) and watched by the
main process.

If a role raises or dies, every role is stopped, the cause is reported and the run exits
non-zero within seconds; children also die with the main process (PR_SET_PDEATHSIG), so none
is orphaned. Used by every runner with role processes (PQL's three roles, IMPALA's actor).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import io
import os
import queue
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from multiprocessing import forkserver
from multiprocessing.context import BaseContext

import torch
import torch.multiprocessing as mp

from pql.checkpoint import STOP_SIGNALS
from pql.logging.console_log import console_log
from pql.runtime.distributed import ReplicaLost
from pql.runtime.divergence import Diverged
from pql.runtime.shared import SharedState

POLL_S = 0.1
STOP_GRACE_S = 3.0


def role_context(devices: Iterable[torch.device], target: Callable) -> BaseContext:
    """How this run starts its role processes, whose work is on `devices` and whose entry point is
    `target`. A role that uses CUDA is spawned: a fresh interpreter, since a forked process cannot
    use CUDA set up before the fork (and importing the tasks sets up Warp's). On the CPU a
    forkserver: one process imports the main module and target's module once, and forks each role
    from there; spawn would import torch, pql and the tasks in every role, 2-3 s of CPU each (on 2
    cores a 300-env-step run in process mode took 7.2-7.5 s spawned, 3.2-3.8 s forked from a
    started forkserver: docs/notes/2026-12-05-forked-roles-on-the-cpu.md). The server runs no
    torch work, so its forks are safe, where a fork of the main process, whose torch has run
    OpenMP threads, may hang."""
    # Isaac Gym must be imported before torch in each process that uses it (train.py does so), and
    # the forkserver imports torch through pql: spawned too.
    if any(device.type != "cpu" for device in devices) or "isaacgym" in sys.modules:
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    # Only before its server starts; the last one makes the server exit without a teardown.
    ctx.set_forkserver_preload(["__main__", target.__module__, "pql.runtime.forkserver_exit"])
    with _stop_signals_ignored():  # the server's, for good: a group's SIGTERM cannot kill the roles' parent
        forkserver.ensure_running()  # now, so that it imports while this process builds the run
    return ctx


@contextlib.contextmanager
def _stop_signals_ignored():
    """The stop signals ignored in the processes started inside: an ignored signal stays ignored
    across fork and exec, where a blocked mask does not reach a process that multiprocessing
    spawns (measured: `SigBlk: 0` in /proc/<pid>/status). So a stop signal sent to the whole process
    group (a terminal's Ctrl-C, SLURM's SIGTERM) cannot kill a role before it has set up
    (role_process), nor a forkserver and with it (PR_SET_PDEATHSIG) its roles. Blocked here
    meanwhile, one that comes in waits for this process's own handler."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    handlers = {s: signal.signal(s, signal.SIG_IGN) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in handlers.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def role(ctx: BaseContext, name: str, target: Callable, args: tuple):
    """Role process `name` (not yet started) running target(*args) in this process's environment
    as it is at this call: a forkserver started earlier (by an earlier run in this process) holds
    the environment it started with."""
    return ctx.Process(  # type: ignore[attr-defined]
        target=_in_environment,
        name=f"pql-{name}",
        daemon=False,  # its envs may start processes (Gymnasium's async copies): see ProcessRuntime
        args=(dict(os.environ), target, *args),
    )


def _in_environment(environ: dict[str, str], target: Callable, *args) -> None:
    os.environ.clear()
    os.environ.update(environ)
    target(*args)


class RoleFailure(RuntimeError):
    """A role raised or died; str() names the role and the cause."""


def _prepare_role_process(name: str) -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so no role outlives the run, and
    name it after its role (`ps -o comm`, `top`: pql-v_learner)."""
    # Not Linux (no libc.so.6): the stall check's parent test still ends the role.
    with contextlib.suppress(OSError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        libc.prctl(15, ctypes.c_char_p(f"pql-{name}".encode()[:15]))  # PR_SET_NAME


@contextlib.contextmanager
def role_process(name: str, shared: SharedState, threads: int, log_path: str | None):
    """The frame of every role process: it dies with its parent, leaves Ctrl-C and SIGTERM to
    the main process (which asks for this role's state, then stops it), copies what it prints
    into log_path (train.log; None: no copy), and on any exception hands its traceback to the
    main process through shared.errors, stops the run and exits. The body must keep no reference
    to the shared tensors once it is done (call a function that holds them): on a normal exit this
    frame releases them (SharedState.release) while CUDA still runs."""
    _prepare_role_process(name)
    for s in STOP_SIGNALS:  # sent to the whole process group by a terminal, SLURM (ignored since its start)
        signal.signal(s, signal.SIG_IGN)
    torch.set_num_threads(threads)
    try:
        with console_log(log_path):
            yield
    except BaseException as e:
        # Divergence is a finding about the training, not a bug, and a lost replica is another
        # replica's failure: their messages say it all.
        said = isinstance(e, (Diverged, ReplicaLost))
        shared.errors.put((name, str(e) if said else traceback.format_exc(), isinstance(e, ReplicaLost)))
        shared.errors.close()
        shared.errors.join_thread()  # the traceback must leave before the process does
        shared.counters.stop = 1
        shared.wake()
        os._exit(1)
    shared.release()
    gc.collect()  # the role's objects refer to each other


def exit_without_teardown() -> None:
    """Called by a role process's target as it returns: multiprocessing then runs its exit
    handlers (queues flushed, finalizers, children joined) as usual, and the process exits without
    the interpreter's teardown, which frees torch's, MuJoCo's and Warp's modules one by one for
    1-1.5 s of CPU per process (measured on 2 cores: the three roles took 2.2 s to exit after a
    run's last step, the main process waiting on them). A fork-started process exits so anyway."""
    atexit.register(os._exit, 0)  # registered last, so it runs first of the interpreter's exit handlers


def hand_in(shared: SharedState, request: object, name: str, state: dict) -> None:
    """A role's answer to checkpoint request `request` (or its part of a cut): its state,
    serialized for the queue."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    shared.checkpoint_parts.put((request, name, buffer.getvalue()))


class ProcessRuntime:
    """Starts, supervises (`check`) and stops the role processes `procs` ({name: Process}) that
    share `shared` (its errors queue, counters and wake-ups).

    The roles are not daemonic processes, which Python forbids children, so that an actor's envs
    may run in processes of their own (Gymnasium's AsyncVectorEnv). Daemonic roles would be
    terminated by multiprocessing at this process's exit; these are ended by `stop`, which the
    runners call on every way out, and by PR_SET_PDEATHSIG if this process dies."""

    def __init__(self, shared: SharedState, procs: dict):
        self.shared, self.procs = shared, procs

    def start(self) -> None:
        # A role sets its own handling up only once its imports are done (role_process); a stop
        # signal sent to the whole group before that would kill it.
        with _stop_signals_ignored():
            for p in self.procs.values():
                p.start()
        print("pql: roles started: " + " ".join(f"{n}={p.pid}" for n, p in self.procs.items()), flush=True)

    def check(self) -> None:
        """Raise RoleFailure if any role reported an error or is no longer alive, or ReplicaLost if
        the only news is a role's collective with the other replicas failing.

        A role of this replica that died or raised is the cause, and a lost replica only its
        echo: when one role dies, its peers in the other replicas stop, and this replica's other
        roles then lose their collectives too, often before this check runs. Reported as lost,
        each replica would wait for the other's cause (failure_elsewhere) and neither would have one.

        Either way the run is over, and the other roles are killed first: they have nothing to hand
        in, and under torchrun the other replicas' restart waits for this replica's exit."""
        failure = self._failure()
        if failure is not None:
            for p in self.procs.values():
                p.kill()  # a role ignores SIGTERM (role_process)
            for p in self.procs.values():
                p.join()
            raise failure

    def _failure(self) -> RoleFailure | ReplicaLost | None:
        reports = self._reports(wait_s=0.0)
        # A role that returned once the stop flag was up (raised by a role that failed or lost the
        # replicas, or by this process) ended as asked: it is no cause.
        stopping = bool(self.shared.counters.stop)
        dead = [name for name, p in self.procs.items() if not p.is_alive() and not (p.exitcode == 0 and stopping)]
        unheard = set(dead) - {name for name, _, _ in reports}
        if any((self.procs[name].exitcode or 0) >= 0 for name in unheard):  # a signal's victim says nothing
            reports += self._reports(wait_s=1.0)  # a role that raised exits right after queueing its traceback
        for name, text, lost in reports:
            if not lost:
                return RoleFailure(f"role {name} failed:\n{text.rstrip()}")
        reporters = {name for name, _, _ in reports}
        for name in dead:
            if name not in reporters:  # died without a word: killed, out of memory, or returned unasked
                code = self.procs[name].exitcode
                cause = (
                    f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
                )
                return RoleFailure(f"role {name} died ({cause})")
        if reports:
            name, text, _ = reports[0]
            return ReplicaLost(f"role {name}: {text}")
        return None

    def _reports(self, wait_s: float) -> list[tuple[str, str, bool]]:
        """The (role, traceback or message, lost a replica) the roles queued: those already there,
        and with wait_s > 0 the first to arrive within wait_s, with any queued beside it."""
        reports = []
        try:
            if wait_s > 0:
                reports.append(self.shared.errors.get(timeout=wait_s))
            while True:
                reports.append(self.shared.errors.get_nowait())
        except queue.Empty:
            return reports

    def collect_states(self) -> tuple[dict, dict]:
        """Ask every role for its state and wait (supervising) until all answered (`hand_in`).
        -> ({role: state}, the counters when asked)."""
        counters = self.shared.counters
        counters.checkpoint_request += 1
        counts = counters.as_dict()
        self.shared.wake()
        return self.collect_parts(counters.checkpoint_request), counts

    def collect_parts(self, tag: object) -> dict:
        """Wait (supervising) until every role has handed in its state under `tag` (a request's
        number, or a cut's: roles.CutPart). -> {role: state}."""
        states: dict[str, dict] = {}
        while len(states) < len(self.procs):
            self.check()
            try:
                req, name, blob = self.shared.checkpoint_parts.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if req == tag:
                states[name] = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=False)
        return states

    def stop(self) -> None:
        """Stop every role: ask, then terminate, then kill; never leaves a child behind."""
        self.shared.counters.stop = 1
        self.shared.wake()
        deadline = time.monotonic() + STOP_GRACE_S
        for p in self.procs.values():
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in self.procs.values():
            if p.is_alive():
                p.terminate()
                p.join(timeout=1.0)
            if p.is_alive():
                p.kill()
                p.join()
