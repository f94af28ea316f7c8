"""The supervisor's verdict when several things went wrong at once: a role of this replica that
died or raised is the cause; a role that lost its collective with the other replicas is its echo.
How roles start: from a forkserver on the CPU, spawned with CUDA, in the environment of their
start, their parent out of reach of the stop signals that a process group receives."""

import contextlib
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch
from conftest import alive

from pql.runtime.distributed import ReplicaLost
from pql.runtime.supervisor import ProcessRuntime, RoleFailure, role, role_context


@contextlib.contextmanager
def _supervised(*reports: tuple[str, str, bool], stop: int = 0) -> Iterator[tuple[ProcessRuntime, dict]]:
    """Two real role processes, actor and p_learner, the reports already queued and the stop flag;
    the processes are killed however the test ends."""
    ctx = mp.get_context("spawn")
    procs = {name: ctx.Process(target=time.sleep, args=(60,), name=name) for name in ("actor", "p_learner")}
    for p in procs.values():
        p.start()
    errors = ctx.Queue()
    for report in reports:
        errors.put(report)
    time.sleep(0.2)  # the queue's feeder thread hands them over
    try:
        yield ProcessRuntime(SimpleNamespace(errors=errors, counters=SimpleNamespace(stop=stop)), procs), procs
    finally:
        _end(procs)


def _returned(procs: dict, name: str) -> None:
    """Role `name` replaced by a process that returned (exit code 0), as a role leaves its loop."""
    procs[name].kill()
    procs[name].join()
    procs[name] = mp.get_context("spawn").Process(target=time.sleep, args=(0,), name=name)
    procs[name].start()
    procs[name].join()


def _end(procs: dict) -> None:
    for p in procs.values():
        p.kill()
        p.join()


@pytest.mark.parametrize("lost_first", [True, False])
def test_a_killed_role_is_the_cause_even_when_another_lost_the_replicas_first(lost_first):
    lost = ("p_learner", "the gradient all-reduce with the other replicas failed (did one stop?)", True)
    with _supervised(*([lost] if lost_first else [])) as (runtime, procs):
        procs["actor"].kill()
        procs["actor"].join()
        if not lost_first:
            runtime.shared.errors.put(lost)  # arrives while the supervisor waits for the dead role's word
        with pytest.raises(RoleFailure, match=r"^role actor died \(killed by SIGKILL\)$"):
            runtime.check()


def test_a_role_that_lost_the_replicas_and_exited_is_reported_as_lost():
    with _supervised(("actor", "the observation-statistics all-reduce failed", True)) as (runtime, procs):
        procs["actor"].kill()  # as the role exits after its report
        procs["actor"].join()
        with pytest.raises(ReplicaLost, match="^role actor: the observation-statistics all-reduce failed$"):
            runtime.check()


def test_a_role_that_returned_once_the_stop_flag_was_up_is_no_cause():
    """The actor lost the replicas and raised the stop flag; the V-learner then left its loop and
    exited cleanly: the replica is lost, not failed by the V-learner (it would otherwise name
    itself the cause, beside the replica whose role was killed)."""
    lost = ("actor", "the observation-statistics all-reduce failed", True)
    with _supervised(lost, stop=1) as (runtime, procs):
        _returned(procs, "p_learner")
        with pytest.raises(ReplicaLost, match="^role actor: the observation-statistics all-reduce failed$"):
            runtime.check()


def test_a_role_that_returned_unasked_is_the_cause():
    with _supervised() as (runtime, procs):
        _returned(procs, "p_learner")
        with pytest.raises(RoleFailure, match=r"^role p_learner died \(exit code 0\)$"):
            runtime.check()


def test_a_role_s_traceback_comes_before_a_lost_replica():
    with _supervised(
        ("p_learner", "lost", True), ("actor", "Traceback (most recent call last):\nValueError: bad\n", False)
    ) as (runtime, procs):
        with pytest.raises(RoleFailure, match=r"^role actor failed:\nTraceback"):
            runtime.check()


def test_a_dead_role_s_exit_code_is_named():
    with _supervised() as (runtime, procs):
        procs["p_learner"].terminate()
        procs["p_learner"].join()
        with pytest.raises(RoleFailure, match=f"role p_learner died \\(killed by {signal.SIGTERM.name}\\)"):
            runtime.check()


def test_a_spawned_role_ignores_the_stop_signals_from_its_start():
    """Before role_process sets its handling up (here never: the target only sleeps), a stop
    signal sent to the whole process group must not kill it."""
    ctx = mp.get_context("spawn")
    runtime = ProcessRuntime(SimpleNamespace(errors=ctx.Queue()), {"actor": ctx.Process(target=time.sleep, args=(60,))})
    runtime.start()
    try:
        procs = runtime.procs
        with open(f"/proc/{procs['actor'].pid}/status") as f:
            ignored = int(next(line for line in f if line.startswith("SigIgn:")).split()[1], 16)
        assert all(ignored >> (s - 1) & 1 for s in (signal.SIGINT, signal.SIGTERM)), hex(ignored)
        procs["actor"].terminate()  # SIGTERM
        procs["actor"].join(1.0)
        assert procs["actor"].is_alive()
    finally:
        _end(runtime.procs)


def test_roles_on_the_cpu_start_from_a_forkserver_and_roles_with_cuda_are_spawned():
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)  # a device object: no CUDA needed
    assert role_context([cpu, cpu, cpu], time.sleep).get_start_method() == "forkserver"
    assert role_context([cpu, cuda, cpu], time.sleep).get_start_method() == "spawn"


def _write_environment(path: str) -> None:
    with open(path, "w") as f:
        f.write(os.environ.get("PQL_TEST_SETTING", "unset"))
    time.sleep(60)


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_a_role_takes_the_environment_of_its_start_and_its_parent_outlives_a_group_sigterm(tmp_path, monkeypatch):
    """Two roles, the environment changed between their starts (after the forkserver started): each
    sees the environment of its own start. SIGTERM to their parent, as `kill -TERM -<group>` or
    SLURM sends it to every process, leaves it and the roles running: the main process stops them."""
    ctx = role_context([torch.device("cpu")], _write_environment)
    runtime = ProcessRuntime(SimpleNamespace(errors=ctx.Queue()), {})
    procs = {}
    try:
        for value in ("first", "second"):
            monkeypatch.setenv("PQL_TEST_SETTING", value)
            runtime.procs = {value: role(ctx, value, _write_environment, (str(tmp_path / value),))}
            runtime.start()
            procs.update(runtime.procs)
        deadline = time.monotonic() + 30
        while not all((tmp_path / value).exists() for value in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert {value: (tmp_path / value).read_text() for value in procs} == {"first": "first", "second": "second"}
        parent = _parent(procs["first"].pid)
        assert parent != os.getpid() and parent == _parent(procs["second"].pid)  # the forkserver
        os.kill(parent, signal.SIGTERM)
        time.sleep(0.5)
        assert alive(parent) and all(p.is_alive() for p in procs.values())
    finally:
        _end(procs)
