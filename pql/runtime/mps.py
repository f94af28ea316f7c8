"""The roles side by side on one GPU: a private MPS control daemon for the run's processes.

A GPU runs one CUDA context at a time and time-slices between contexts, so the role processes of
`runtime.mode=process`, each with a context of its own, take turns on the chip. NVIDIA's
Multi-Process Service puts them behind one MPS server, and their kernels run at the same time
(docs/gpu.md#mps-one-gpu-context-for-the-three-roles). A process becomes a client when CUDA is
first initialised in it while a control daemon is reachable through CUDA_MPS_PIPE_DIRECTORY, so
the daemon must run before the main process touches CUDA: train.py starts it right after its
configuration checks (which read the GPUs through NVML and do not initialise CUDA) and before
Hydra runs the job, and every process of the run inherits the pipe directory.

`sharing_gpu` is that lifetime: a daemon on pipe and log directories of its own, so it never
meets a daemon it did not start (one already reachable is used as it is and left alone); stopped
when the command ends, also after an exception, Ctrl-C, SIGTERM or SIGHUP. A SIGKILL of the main
process cannot be handled: the daemon then outlives it (docs/gpu.md says how to stop it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator

from pql.config import MPS_MODES

CONTROL = "nvidia-cuda-mps-control"
PIPE_ENV, LOG_ENV = "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"  # where CUDA looks without CUDA_MPS_PIPE_DIRECTORY
CONTROL_TIMEOUT_S = 30.0


class MpsError(Exception):
    """runtime.mps=on, and no MPS daemon could serve the run."""


class MpsDaemon:
    """An MPS control daemon on pipe and log directories of its own: only processes that inherit
    `env` become its clients."""

    def __init__(self):
        # Short and under /tmp: the pipe directory holds UNIX sockets, whose paths are limited to
        # 108 bytes.
        self.directory = tempfile.mkdtemp(prefix="pql-mps-", dir="/tmp")
        self.env = {PIPE_ENV: os.path.join(self.directory, "pipe"), LOG_ENV: os.path.join(self.directory, "log")}
        for path in self.env.values():
            os.makedirs(path)
        self.started = False

    def control(self, *args: str, command: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [CONTROL, *args],
            input=command,
            capture_output=True,
            text=True,
            timeout=CONTROL_TIMEOUT_S,
            env={**os.environ, **self.env},
        )

    def start(self) -> str | None:
        """Start the daemon. -> None, or why it could not start."""
        if shutil.which(CONTROL) is None:
            return f"{CONTROL} is not on PATH (it comes with the NVIDIA driver's utilities)"
        try:
            done = self.control("-d")
        except subprocess.TimeoutExpired:
            return f"{CONTROL} -d did not return within {CONTROL_TIMEOUT_S:.0f} s"
        if done.returncode != 0:
            return f"{CONTROL} -d failed (exit {done.returncode}): {(done.stdout + done.stderr).strip()[:200]}"
        self.started = True
        return None

    def servers(self) -> str:
        """The MPS servers' PIDs, space-separated: a server exists once a client has connected."""
        try:
            return self.control(command="get_server_list\n").stdout.strip()
        except subprocess.TimeoutExpired:
            return ""

    def stop(self) -> str:
        """Stop the daemon (and its server) if it started, and remove its directories. -> its logs."""
        if self.started:
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                self.control(command="quit\n")
            self.started = False
        logs = []
        for name in ("control.log", "server.log"):
            path = os.path.join(self.env[LOG_ENV], name)
            if os.path.isfile(path):
                with open(path, errors="replace") as f:
                    logs.append(f"--- MPS {name}\n{f.read()}")
        shutil.rmtree(self.directory, ignore_errors=True)
        return "\n".join(logs)


def pipe_directory() -> str:
    """Where this process's CUDA looks for an MPS control daemon."""
    return os.environ.get(PIPE_ENV, DEFAULT_PIPE_DIRECTORY)


def reachable_daemon() -> str | None:
    """The pipe directory of a running MPS daemon that this process's CUDA would connect to, or None."""
    pipe = pipe_directory()
    return pipe if os.path.exists(os.path.join(pipe, "control")) else None


@contextlib.contextmanager
def _signals_exit() -> Iterator[None]:
    """SIGTERM and SIGHUP end the process as an exception would (exit 128 + the signal), so the
    daemon is stopped on the way out; the run installs handlers of its own inside."""

    def leave(signum, frame):
        raise SystemExit(128 + signum)

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    for s in saved:
        signal.signal(s, leave)
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def sharing_gpu(mode: str, why_not: str | None = None) -> Iterator[MpsDaemon | None]:
    """Run the block with the command's CUDA processes behind one MPS server.

    mode: runtime.mps. why_not: why MPS would not help this command (no GPU, one process), or
    None. "off", or a reason with "auto": nothing happens. A daemon already reachable is used and
    left alone. Otherwise a private daemon is started and its directories exported to this process
    (and so to every process it starts) for the block; if it cannot start, "auto" says why in one
    line and runs without it, "on" raises MpsError. -> the daemon started, or None."""
    if mode not in MPS_MODES:
        raise ValueError(f"runtime.mps={mode!r}: one of {', '.join(MPS_MODES)}")
    if mode == "off" or (mode == "auto" and why_not is not None):
        yield None
        return
    existing = reachable_daemon()
    if existing is not None:
        print(
            f"pql: MPS: the roles are clients of the daemon already running at {existing} (pql starts none, "
            "and leaves it running)",
            flush=True,
        )
        yield None
        return
    daemon = MpsDaemon()
    problem = daemon.start()
    if problem is not None:
        daemon.stop()
        if mode == "on":
            raise MpsError(f"runtime.mps=on, but no MPS daemon could start: {problem}")
        print(
            f"pql: MPS not used: {problem}; the role processes take turns on the GPU "
            "(runtime.mps=off silences this line; docs/gpu.md)",
            flush=True,
        )
        yield None
        return
    saved = {key: os.environ.get(key) for key in daemon.env}
    os.environ.update(daemon.env)
    print(
        f"pql: MPS: a daemon of this run's own ({daemon.env[PIPE_ENV]}) lets the roles share the GPU; "
        "it stops with the run",
        flush=True,
    )
    failed = False
    try:
        with _signals_exit():
            yield daemon
    except Exception:
        failed = True
        raise
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        logs = daemon.stop()
        if failed and logs:
            print(logs, file=sys.stderr, flush=True)  # what the MPS server saw, for a run that failed
