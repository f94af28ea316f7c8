"""Building PQL's three roles, and the loop each one runs in its own process.

A role has `ready()`, `step()`, `idle()`, `state_dict()` and `load_state_dict()`; the ratio
controller decides when `ready()` is true.
"""

from __future__ import annotations

import torch

from pql.config import ALGORITHMS, ROLE_NAMES
from pql.nets import ObsNormalizer
from pql.replay.nstep import keeps_first_step, staging_spec
from pql.runtime.control import LearnerStats, RatioController, RatioCounters
from pql.runtime.device import use_device
from pql.runtime.distributed import Replicas, role_group
from pql.runtime.off_policy.actor import Actor
from pql.runtime.off_policy.learners import DELIVERED, PLearner, VLearner
from pql.runtime.shared import SharedState, make_shared_state
from pql.runtime.supervisor import hand_in, role_log_path, role_process
from pql.runtime.waiting import Waiter
from pql.runtime.weight_sync import SharedWeights

STAGING_SLOTS_EXTRA = 2  # ring slots beyond max_lag, so a learner copying a slot never blocks the actor


def make_rules(cfg, obs_dim: int, act_dim: int):
    """The update rules of cfg.algo (pql, pql_d or sac)."""
    return ALGORITHMS[cfg.algo.name].load_rules()(cfg.algo, obs_dim, act_dim)


def role_device(cfg, name: str) -> torch.device:
    """Where role `name` runs (runtime.<name>_device, resolved at start)."""
    return torch.device(getattr(cfg.runtime, f"{name}_device"))


def make_shared(cfg, algo, obs_dim: int, act_dim: int, ctx=None) -> SharedState:
    """What the three roles share, each part on its writer's device: the ring and the observation
    statistics on the actor's, the critic on the V-learner's, the policy on the P-learner's
    (ctx: a multiprocessing context, None for one process)."""
    actor, p_learner = role_device(cfg, "actor"), role_device(cfg, "p_learner")
    weights = {
        "normalizer": SharedWeights(ObsNormalizer(obs_dim), actor),
        "critic": SharedWeights(algo.make_critic(), role_device(cfg, "v_learner")),
        "policy": SharedWeights(algo.make_policy(), p_learner),
    }
    if delivered_policy(cfg) == DELIVERED:
        weights[DELIVERED] = SharedWeights(algo.make_policy(), p_learner)
    staging = staging_spec(obs_dim, act_dim, keeps_first_step(cfg.algo))
    return make_shared_state(
        RatioCounters(),
        LearnerStats(),
        staging,
        (cfg.runtime.max_lag + STAGING_SLOTS_EXTRA, cfg.task.num_envs),
        actor,
        weights,
        ROLE_NAMES,
        ctx,
    )


def delivered_policy(cfg) -> str:
    """Which of the P-learner's policies the run evaluates and checkpoints (algo.policy_average)."""
    return DELIVERED if cfg.algo.policy_average else "policy"


def make_ratios(cfg, shared: SharedState) -> RatioController:
    return RatioController(
        shared.counters,
        cfg.algo.beta_av,
        cfg.algo.beta_pv,
        cfg.runtime.max_lag,
        cfg.algo.early_beta_av,
        cfg.algo.early_steps,
    )


def build_role(
    name: str,
    cfg,
    shared: SharedState,
    algo,
    device,
    ratios: RatioController,
    obs_dim: int,
    act_dim: int,
    fresh_start: bool,
):
    """Role `name`, in the process it runs in; with several replicas it joins the group of the
    same role of every replica first."""
    group = role_group(Replicas.from_env(), name, device, cfg.runtime.stall_timeout_s)
    if name == "actor":
        return Actor(cfg, shared, algo, device, ratios, fresh_start, group)
    cls = {"v_learner": VLearner, "p_learner": PLearner}[name]
    return cls(cfg, shared, algo, device, ratios, obs_dim, act_dim, group)


def role_main(
    name: str, cfg, shared: SharedState, obs_dim: int, act_dim: int, resume: dict | None, threads: int
) -> None:
    """Entry point of a role process. The role lives in serve(), whose frame ends, and with it the
    role's hold on the shared tensors, before role_process releases them."""
    with role_process(name, shared, threads, role_log_path(cfg)):
        serve(name, cfg, shared, obs_dim, act_dim, resume)


def serve(name: str, cfg, shared: SharedState, obs_dim: int, act_dim: int, resume: dict | None) -> None:
    """Build role `name` and run it until the run stops, answering checkpoint requests."""
    device = use_device(role_device(cfg, name))
    # Each replica explores with noise of its own (networks start from rank 0's: learners.py).
    torch.manual_seed(Replicas.from_env().seed(cfg.runtime.seed) + 17 * (ROLE_NAMES.index(name) + 1))
    ratios = make_ratios(cfg, shared)
    role = build_role(
        name,
        cfg,
        shared,
        make_rules(cfg, obs_dim, act_dim),
        device,
        ratios,
        obs_dim,
        act_dim,
        fresh_start=resume is None,
    )
    if resume is not None:
        role.load_state_dict(resume["roles"][name])
    waiter = Waiter(
        shared.counters, shared.wakeup, name, cfg.runtime.stall_timeout_s, cfg.runtime.startup_timeout_s, ratios.started
    )
    # Requests are numbered from 1 in each launch; one made while this role was starting is
    # still answered (reading the counter here instead would skip it, and the main process
    # would wait for this role's state for ever).
    served = 0

    def checkpoint_due() -> bool:
        return shared.counters.checkpoint_request > served

    while waiter.wait(lambda: checkpoint_due() or role.ready(), role.idle, f"{name} to be allowed to run"):
        if checkpoint_due():
            served = shared.counters.checkpoint_request
            hand_in(shared, served, name, role.state_dict())
            continue
        role.step()
