"""Building the three roles, and the loop each one runs in its own process.

A role has `ready()`, `step()`, `idle()`, `state_dict()` and `load_state_dict()`; the ratio
controller decides when `ready()` is true.
"""
from __future__ import annotations

import contextlib
import ctypes
import io
import os
import signal
import traceback

import torch

from pql.runtime.actor import Actor
from pql.runtime.control import C, RatioController, notify_all
from pql.runtime.device import use_device
from pql.runtime.learners import PLearner, VLearner

ROLE_NAMES = ("actor", "v_learner", "p_learner")


def make_controller(cfg, shared) -> RatioController:
    return RatioController(shared.counters, shared.condition, cfg.algo.beta_av, cfg.algo.beta_pv,
                           cfg.runtime.max_lag, cfg.runtime.stall_timeout_s, cfg.runtime.startup_timeout_s)


def build_role(name: str, cfg, shared, algo, device, ctrl, obs_dim: int, act_dim: int, fresh_start: bool):
    if name == "actor":
        return Actor(cfg, shared, algo, device, ctrl, fresh_start)
    cls = {"v_learner": VLearner, "p_learner": PLearner}[name]
    return cls(cfg, shared, algo, device, ctrl, obs_dim, act_dim)


def serialize(state: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so no role outlives the run."""
    # Not Linux (no libc.so.6): the stall check's parent test still ends the role.
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def role_process(name: str, shared, threads: int):
    """The frame of every role process (PQL's three, IMPALA's actor): it dies with its parent,
    leaves Ctrl-C to the main process, and on any exception hands its traceback to the main
    process through shared.errors, stops the run and exits."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    torch.set_num_threads(threads)
    try:
        yield
    except BaseException:
        shared.errors.put((name, traceback.format_exc()))
        shared.errors.close()
        shared.errors.join_thread()  # the traceback must leave before the process does
        shared.counters[C.STOP] = 1
        notify_all(shared.condition)
        os._exit(1)


def role_main(name: str, cfg, shared, obs_dim: int, act_dim: int, resume: dict | None, threads: int) -> None:
    """Entry point of a role process."""
    with role_process(name, shared, threads):
        from pql.algos import make_off_policy

        device = use_device(cfg.runtime.device)
        torch.manual_seed(cfg.runtime.seed + 17 * (ROLE_NAMES.index(name) + 1))
        algo = make_off_policy(cfg.algo, obs_dim, act_dim)
        ctrl = make_controller(cfg, shared)
        role = build_role(name, cfg, shared, algo, device, ctrl, obs_dim, act_dim, fresh_start=resume is None)
        if resume is not None:
            role.load_state_dict(resume[name])
        # Requests are numbered from 1 in each launch; one made while this role was starting is
        # still answered (reading the counter here instead would skip it, and the main process
        # would wait for this role's part for ever).
        served = 0

        def checkpoint_due() -> bool:
            return int(shared.counters[C.CKPT_REQUEST]) > served

        while ctrl.wait(lambda: checkpoint_due() or role.ready(), role.idle, f"{name} to be allowed to run"):
            if checkpoint_due():
                served = int(shared.counters[C.CKPT_REQUEST])
                shared.checkpoint_parts.put((served, name, serialize(role.state_dict())))
                continue
            role.step()
