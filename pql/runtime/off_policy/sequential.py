"""Sequential mode: the three roles interleaved in one process at the same ratios.
Deterministic for a seed on the CPU (one RNG stream, a fixed order), for tests and debugging."""

from __future__ import annotations

from pql.runtime.control import RatioController
from pql.runtime.device import synchronize

MONITOR_EVERY = 8  # actor steps between monitor ticks


def interleave(actor, learners, monitor, ratios: RatioController) -> None:
    """Step the actor whenever it may, then let each learner run as far as the ratios allow,
    until the actor has finished (its budget spent, or asked to by the monitor); then let the
    learners catch up to the ratios' final counts."""
    steps = 0
    while True:
        # Read here, between two steps: a stop signal is recorded wherever it lands, but taken
        # only at this point, never in the middle of a role's step.
        if code := monitor.stop_code():
            actor.shared.counters.finish = code
        if actor.ready():
            actor.step()
            steps += 1
        elif actor.done():
            break
        for learner in learners:
            learner.ingest()
        _run_learners(learners)
        if _stuck(actor, learners):
            _settle(actor, learners)
            _run_learners(learners)
            if _stuck(actor, learners):
                a, v, p = ratios.progress()
                raise RuntimeError(
                    f"sequential schedule cannot advance (actor steps {a}, critic updates {v}, policy updates {p})"
                )
        if steps % MONITOR_EVERY == 0:
            monitor.tick()
    _run_learners(learners)


def _stuck(actor, learners) -> bool:
    return not actor.ready() and not actor.done() and not any(learner.ready() for learner in learners)


def _settle(actor, learners) -> None:
    """Let every copy in flight land and count it. On a GPU a ring write, and the learners' copy
    of it, land when the stream reaches them, so the ring can be full of them with no role ready.
    Writes must be counted before the learners can queue their copies: two waits."""
    synchronize(actor.device)
    actor.idle()
    for learner in learners:
        learner.ingest()
    synchronize(actor.device)
    for learner in learners:
        learner.ingest()


def _run_learners(learners) -> None:
    """Update each learner as long as the ratios allow any of them to."""
    progressed = True
    while progressed:
        progressed = False
        for learner in learners:
            while learner.ready():
                learner.step()
                progressed = True
