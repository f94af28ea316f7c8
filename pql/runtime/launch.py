"""Process mode: one process per role (spawn), supervised by the main process.

The main process evaluates, logs and writes checkpoints while it watches the roles. If a role
raises or dies, every role is stopped, the cause is reported and the run exits non-zero within
seconds; children also die with the main process (PR_SET_PDEATHSIG), so none is orphaned.
"""
from __future__ import annotations

import io
import os
import queue
import signal
import time

import torch
import torch.multiprocessing as mp

from pql.runtime.control import C, notify_all
from pql.runtime.roles import ROLE_NAMES, role_main

POLL_S = 0.1
STOP_GRACE_S = 3.0


class RoleFailure(RuntimeError):
    """A role raised or died; str() names the role and the cause."""


def threads_per_process(cfg, processes: int) -> int:
    """Torch threads for each of `processes` busy processes: runtime.torch_threads, or on a CPU
    the cores shared out among them (on a GPU the work is the device's; one thread)."""
    if cfg.runtime.torch_threads:
        return cfg.runtime.torch_threads
    return max(1, (os.cpu_count() or 1) // processes) if cfg.runtime.device == "cpu" else 1


def role_processes(cfg, shared, obs_dim: int, act_dim: int, resume: dict | None, ctx) -> dict:
    """The three PQL roles, not yet started: {name: Process}."""
    threads = threads_per_process(cfg, len(ROLE_NAMES))
    return {name: ctx.Process(target=role_main, name=f"pql-{name}", daemon=True,
                              args=(name, cfg, shared, obs_dim, act_dim, resume, threads))
            for name in ROLE_NAMES}


class ProcessRuntime:
    """Starts, supervises (`check`) and stops the role processes `procs` ({name: Process}) that
    share `shared` (its errors queue, counters and condition)."""

    def __init__(self, shared, procs: dict):
        self.shared, self.procs = shared, procs

    def start(self) -> None:
        for p in self.procs.values():
            p.start()
        print("pql: roles started: " + " ".join(f"{n}={p.pid}" for n, p in self.procs.items()), flush=True)

    def check(self) -> None:
        """Raise RoleFailure if any role reported an error or is no longer alive."""
        self._raise_reported(timeout=None)
        for name, p in self.procs.items():
            if not p.is_alive():
                self._raise_reported(timeout=1.0)  # a role that raised exits right after queueing its traceback
                code = p.exitcode
                cause = f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
                raise RoleFailure(f"role {name} died ({cause})")

    def _raise_reported(self, timeout: float | None) -> None:
        """Raise RoleFailure with the traceback a role queued, if one arrives within `timeout`
        (None: only one already there)."""
        try:
            name, tb = self.shared.errors.get(timeout=timeout) if timeout else self.shared.errors.get_nowait()
        except queue.Empty:
            return
        raise RoleFailure(f"role {name} failed:\n{tb.rstrip()}")

    def checkpoint(self, path: str, save) -> None:
        """Ask every role for its state, wait (supervising) until all three answered, save."""
        c = self.shared.counters
        c[C.CKPT_REQUEST] += 1
        request = int(c[C.CKPT_REQUEST])
        counters = c.clone()
        notify_all(self.shared.condition)
        parts = {}
        while len(parts) < len(ROLE_NAMES):
            self.check()
            try:
                req, name, blob = self.shared.checkpoint_parts.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if req == request:
                parts[name] = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=False)
        save(path, parts, counters)

    def stop(self) -> None:
        """Stop every role: ask, then terminate, then kill; never leaves a child behind."""
        self.shared.counters[C.STOP] = 1
        notify_all(self.shared.condition)
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


def run_processes(cfg, shared, monitor, obs_dim: int, act_dim: int, resume: dict | None, save) -> None:
    """Run until the actor reaches the step budget (or time runs out), then write the final
    checkpoint and stop. Raises RoleFailure if a role fails."""
    ctx = mp.get_context("spawn")
    runtime = ProcessRuntime(shared, role_processes(cfg, shared, obs_dim, act_dim, resume, ctx))
    monitor.save_checkpoint = lambda path: runtime.checkpoint(path, save)
    runtime.start()
    try:
        while not int(shared.counters[C.ACTOR_DONE]):
            runtime.check()
            if monitor.should_stop():
                shared.counters[C.ACTOR_DONE] = 1
                break
            monitor.tick()
            time.sleep(POLL_S)
        runtime.check()
        monitor.tick(final=True)
    except KeyboardInterrupt:
        monitor.save_interrupted()  # the roles ignore SIGINT, so they can still hand in their parts
        raise
    finally:
        runtime.stop()
