"""Running one step of the check: a subprocess in a session of its own, its output appended to the
log, stopped with every process it started at its time limit."""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import subprocess
import sys
import time

from bench.gpu import ROOT

OK, FAILED, TIMED_OUT, SKIPPED = "ok", "failed", "timed out", "skipped"
TAIL_LINES = 25


@dataclasses.dataclass
class Step:
    name: str
    title: str
    argv: list[str]
    timeout_s: float


@dataclasses.dataclass
class StepResult:
    name: str
    title: str
    command: str
    status: str
    seconds: float = 0.0
    detail: str = ""  # the exit code, the time limit, or why it did not run
    output: str = ""  # the step's whole output (stdout and stderr)

    def tail(self, lines: int = TAIL_LINES) -> list[str]:
        return self.output.rstrip().splitlines()[-lines:]


def command_line(argv: list[str]) -> str:
    """argv as one would type it: the interpreter as `python`, paths inside the repo relative."""

    def word(i: int, arg: str) -> str:
        if i == 0 and arg == sys.executable:
            return "python"
        return os.path.relpath(arg, ROOT) if arg.startswith(ROOT + os.sep) else arg

    return shlex.join(word(i, a) for i, a in enumerate(argv))


def exited(proc: subprocess.Popen) -> bool:
    """Whether the step's process has exited, leaving it unreaped: until it is reaped its PID,
    which is also its process group's ID, cannot be reused, so the group can still be signalled
    safely."""
    return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def wait_for_exit(proc: subprocess.Popen, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not exited(proc):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def end_group(proc: subprocess.Popen, stop: bool) -> int:
    """End the step's process group: with stop, SIGTERM first and 10 s to exit; then SIGKILL to
    whatever of the group is left (a role process that outlived train.py would hold the GPU
    through the next step). -> the step's exit code."""
    if stop:
        os.killpg(proc.pid, signal.SIGTERM)
        wait_for_exit(proc, 10.0)
    os.killpg(proc.pid, signal.SIGKILL)  # the unreaped leader keeps the group's ID valid
    return proc.wait()


def run_step(step: Step, log_path: str, time_left_s: float) -> StepResult:
    """Run one step with its output appended to log_path; stop it (and its children) at
    min(step.timeout_s, time_left_s)."""
    limit = min(step.timeout_s, time_left_s)
    command = command_line(step.argv)
    with open(log_path, "ab") as log:
        log.write(f"\n===== {step.title}: {command}  (time limit {limit:.0f} s)\n".encode())
        log.flush()
        offset = log.tell()
        start = time.monotonic()
        # A session of its own: the whole group can be ended, and a Ctrl-C in the terminal
        # reaches only the check, which then ends the step.
        proc = subprocess.Popen(
            step.argv,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
        try:
            timed_out = not wait_for_exit(proc, limit)
        except BaseException:  # Ctrl-C: leave nothing running on the GPU
            end_group(proc, stop=True)
            raise
        returncode = end_group(proc, stop=timed_out)
        seconds = time.monotonic() - start
    with open(log_path, "rb") as log:
        log.seek(offset)
        output = log.read().decode(errors="replace")
    if timed_out:
        return StepResult(
            step.name, step.title, command, TIMED_OUT, seconds, f"stopped at its {limit:.0f} s limit", output
        )
    status = OK if returncode == 0 else FAILED
    return StepResult(
        step.name, step.title, command, status, seconds, "" if status == OK else f"exit {returncode}", output
    )


def skipped(step: Step, reason: str) -> StepResult:
    return StepResult(step.name, step.title, command_line(step.argv), SKIPPED, detail=reason)
