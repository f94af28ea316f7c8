"""Sequential mode: the same three roles interleaved in one process at the same ratios.
Deterministic for a seed (one RNG stream, a fixed order), for tests and debugging."""
from __future__ import annotations

import torch

from pql.runtime.control import C
from pql.runtime.roles import ROLE_NAMES, build_role, make_controller

TICK_EVERY = 8  # actor steps between monitor ticks


def run_sequential(cfg, shared, monitor, algo, obs_dim: int, act_dim: int, resume: dict | None, save) -> None:
    device = torch.device(cfg.runtime.device)
    ctrl = make_controller(cfg, shared)
    roles = {name: build_role(name, cfg, shared, algo, device, ctrl, obs_dim, act_dim, fresh_start=resume is None)
             for name in ROLE_NAMES}
    if resume is not None:
        for name, role in roles.items():
            role.load_state_dict(resume[name])
    actor, learners = roles["actor"], (roles["v_learner"], roles["p_learner"])

    def write(path: str) -> None:
        save(path, {name: role.state_dict() for name, role in roles.items()}, shared.counters.clone())

    monitor.save_checkpoint = write
    try:
        _interleave(actor, learners, monitor, ctrl, shared)
    except KeyboardInterrupt:
        monitor.save_interrupted()
        raise
    shared.counters[C.ACTOR_DONE] = 1
    monitor.tick(final=True)


def _interleave(actor, learners, monitor, ctrl, shared) -> None:
    """Step the actor whenever it may, then let each learner run as far as the ratios allow."""
    steps = 0
    while not monitor.should_stop():
        if actor.ready():
            actor.step()
            steps += 1
        elif actor.done():
            break
        for learner in learners:
            learner.ingest()
        progressed = True
        while progressed:
            progressed = False
            for learner in learners:
                while learner.ready():
                    learner.step()
                    progressed = True
        if not actor.ready() and not actor.done() and not any(learner.ready() for learner in learners):
            a, v, p = ctrl.progress()
            raise RuntimeError(f"sequential schedule cannot advance (actor steps {a}, critic updates {v}, "
                               f"policy updates {p}, staged {int(shared.counters[C.ACTOR_STEPS])})")
        if steps % TICK_EVERY == 0:
            monitor.tick()
