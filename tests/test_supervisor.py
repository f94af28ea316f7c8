"""The supervisor's verdict when several things went wrong at once: a role of this replica that
died or raised is the cause; a role that lost its collective with the other replicas is its echo."""

import multiprocessing as mp
import signal
import time
from types import SimpleNamespace

import pytest

from pql.runtime.distributed import ReplicaLost
from pql.runtime.supervisor import ProcessRuntime, RoleFailure


def _supervised(*reports: tuple[str, str, bool]) -> tuple[ProcessRuntime, dict]:
    """Two real role processes, actor and p_learner, and the reports already queued."""
    ctx = mp.get_context("spawn")
    procs = {name: ctx.Process(target=time.sleep, args=(60,), name=name) for name in ("actor", "p_learner")}
    for p in procs.values():
        p.start()
    errors = ctx.Queue()
    for report in reports:
        errors.put(report)
    time.sleep(0.2)  # the queue's feeder thread hands them over
    return ProcessRuntime(SimpleNamespace(errors=errors), procs), procs


def _end(procs: dict) -> None:
    for p in procs.values():
        p.kill()
        p.join()


@pytest.mark.parametrize("lost_first", [True, False])
def test_a_killed_role_is_the_cause_even_when_another_lost_the_replicas_first(lost_first):
    lost = ("p_learner", "the gradient all-reduce with the other replicas failed (did one stop?)", True)
    runtime, procs = _supervised(*([lost] if lost_first else []))
    try:
        procs["actor"].kill()
        procs["actor"].join()
        if not lost_first:
            runtime.shared.errors.put(lost)  # arrives while the supervisor waits for the dead role's word
        with pytest.raises(RoleFailure, match=r"^role actor died \(killed by SIGKILL\)$"):
            runtime.check()
    finally:
        _end(procs)


def test_a_role_that_lost_the_replicas_and_exited_is_reported_as_lost():
    runtime, procs = _supervised(("actor", "the observation-statistics all-reduce failed", True))
    try:
        procs["actor"].kill()  # as the role exits after its report
        procs["actor"].join()
        with pytest.raises(ReplicaLost, match="^role actor: the observation-statistics all-reduce failed$"):
            runtime.check()
    finally:
        _end(procs)


def test_a_role_s_traceback_comes_before_a_lost_replica():
    runtime, procs = _supervised(
        ("p_learner", "lost", True), ("actor", "Traceback (most recent call last):\nValueError: bad\n", False)
    )
    try:
        with pytest.raises(RoleFailure, match=r"^role actor failed:\nTraceback"):
            runtime.check()
    finally:
        _end(procs)


def test_a_dead_role_s_exit_code_is_named():
    runtime, procs = _supervised()
    try:
        procs["p_learner"].terminate()
        procs["p_learner"].join()
        with pytest.raises(RoleFailure, match=f"role p_learner died \\(killed by {signal.SIGTERM.name}\\)"):
            runtime.check()
    finally:
        _end(procs)
