"""Building PQL's three roles (each a `contracts.Role`), and the loop each one runs in its own
process. The ratio controller decides when a role's `ready()` is true."""

from __future__ import annotations

from collections.abc import Callable

import torch

from pql.algos.off_policy import OffPolicyAlgorithm
from pql.algos.rules import OffPolicyRules
from pql.checkpoint import rng_state, set_rng_state
from pql.config import ALGORITHMS, ROLE_NAMES, OffPolicyConfig
from pql.envs import ObsLayout
from pql.nets import ObsNormalizer, ReturnScale
from pql.replay.nstep import staging_spec
from pql.runtime.contracts import CRITIC, DELIVERED, NORMALIZER, POLICY, RETURN_SCALE, Role
from pql.runtime.control import LearnerStats, PQLShared, RatioController, RatioCounters
from pql.runtime.device import use_device
from pql.runtime.distributed import role_group
from pql.runtime.off_policy.actor import Actor
from pql.runtime.off_policy.learners import PLearner, VLearner
from pql.runtime.settings import OffPolicySettings, RatioSettings
from pql.runtime.shared import make_shared_state
from pql.runtime.supervisor import exit_without_teardown, hand_in, role_process
from pql.runtime.waiting import Waiter
from pql.runtime.weight_sync import SharedWeights


def make_rules(algo: OffPolicyConfig, obs: ObsLayout, act_dim: int) -> OffPolicyRules:
    """The update rules of `algo` (pql, pql_d or sac), from its own section of the config, for a
    policy and a critic reading `obs`'s columns."""
    return ALGORITHMS[algo.name].load_rules()(algo, obs.policy_dim, act_dim, obs.critic_dim)


def make_shared(settings: OffPolicySettings, rules: OffPolicyRules, obs_dim: int, act_dim: int, ctx=None) -> PQLShared:
    """What the three roles share, each part on its writer's device: the ring and the observation
    (and return) statistics on the actor's, the critic on the V-learner's, the policy on the P-learner's
    (ctx: a multiprocessing context, None for one process)."""
    actor, p_learner = settings.actor.device, settings.p_learner.device
    weights = {
        NORMALIZER: SharedWeights(ObsNormalizer(obs_dim), actor),
        CRITIC: SharedWeights(rules.make_critic(), settings.v_learner.device),
        POLICY: SharedWeights(rules.make_policy(), p_learner),
    }
    if settings.delivered == DELIVERED:
        weights[DELIVERED] = SharedWeights(rules.make_policy(), p_learner)
    if settings.actor.return_support is not None:
        weights[RETURN_SCALE] = SharedWeights(ReturnScale(*settings.actor.return_support), actor)
    staging = staging_spec(obs_dim, act_dim, settings.actor.keeps_first_step)
    return make_shared_state(
        RatioCounters(),
        LearnerStats(),
        staging,
        (settings.ring_slots, settings.actor.envs.num_envs),
        actor,
        weights,
        ROLE_NAMES,
        ctx,
    )


def make_ratios(settings: RatioSettings, shared: PQLShared) -> RatioController:
    return RatioController(
        shared.counters,
        settings.beta_av,
        settings.beta_pv,
        settings.max_lag,
        settings.early_beta_av,
        settings.early_steps,
    )


def build_role(
    name: str,
    settings: OffPolicySettings,
    shared: PQLShared,
    rules: OffPolicyRules,
    ratios: RatioController,
    obs: ObsLayout,
    act_dim: int,
    fresh_start: bool,
) -> Role:
    """Role `name`, in the process it runs in, with an algorithm of its own (`rules` over its own
    networks); with several replicas it joins the group of the same role of every replica first."""
    process = settings.process
    device = settings.role(name).device
    group = role_group(process.replicas, name, device, process.waits.stall_s)
    algorithm = OffPolicyAlgorithm(rules, device, settings.updates, group.gradient_mean())
    if name == "actor":
        return Actor(settings.actor, shared, algorithm, ratios, obs, fresh_start, group)
    if name == "v_learner":
        return VLearner(settings.v_learner, shared, algorithm, ratios, obs, act_dim, group)
    return PLearner(settings.p_learner, shared, algorithm, ratios, obs, group)


def role_main(
    name: str, settings: OffPolicySettings, shared: PQLShared, obs: ObsLayout, act_dim: int, resume: dict | None
) -> None:
    """Entry point of a role process. The role lives in serve(), whose frame ends, and with it the
    role's hold on the shared tensors, before role_process releases them."""
    process = settings.process
    with role_process(name, shared, process.threads.per_process(len(ROLE_NAMES)), process.log_path):
        serve(name, settings, shared, obs, act_dim, resume)
    exit_without_teardown()


class CutPart:
    """Role `name`'s part in a cut of every replica's state for a checkpoint (process mode with
    several replicas: OffPolicyRunner.checkpoint_ready). The actors agree on an actor step; there
    each actor hands in its state, and each learner hands in its own when its count reaches the
    cut's (RatioController.counts_at_cut), while the actor steps on. A learner marks the cut seen
    at once, and the actor steps on only once both have, so that neither passes its count unseen."""

    def __init__(self, name: str, counters: RatioCounters, ratios: RatioController, wake: Callable[[], None]):
        self.name, self.counters, self.ratios, self.wake = name, counters, ratios, wake
        self.served = 0  # the latest cut this role has handed in its part of

    def due(self) -> bool:
        """Whether this role is to hand in its part of a cut now (before its next step)."""
        c = self.counters
        cut = c.cuts_made
        if cut <= self.served:
            return False
        if self.name == "actor":
            return True  # it stopped at the agreed step, and steps on only after handing in
        seen = "cuts_seen_v" if self.name == "v_learner" else "cuts_seen_p"
        if getattr(c, seen) < cut:
            setattr(c, seen, cut)
            self.wake()
        critic, policy = self.ratios.counts_at_cut()
        return c.critic_updates == critic if self.name == "v_learner" else c.policy_updates == policy

    def tag(self) -> str:
        return f"cut {self.counters.cuts_made}"


def serve(
    name: str, settings: OffPolicySettings, shared: PQLShared, obs: ObsLayout, act_dim: int, resume: dict | None
) -> None:
    """Build role `name` and run it until the run stops, answering checkpoint requests."""
    use_device(settings.role(name).device)
    # Each replica explores with noise of its own (networks start from rank 0's: learners.py).
    torch.manual_seed(settings.process.seed + 17 * (ROLE_NAMES.index(name) + 1))
    ratios = make_ratios(settings.ratios, shared)
    rules = make_rules(settings.algo, obs, act_dim)
    role = build_role(name, settings, shared, rules, ratios, obs, act_dim, fresh_start=resume is None)
    if resume is not None:
        role.load_state_dict(resume["roles"][name])
        if "rng" in resume["roles"][name]:  # this process's own streams (exploration, target noise)
            set_rng_state(resume["roles"][name]["rng"])
    waits = settings.process.waits
    assert shared.wakeup is not None, "a role process waits on the wakeup its runner made for it"
    waiter = Waiter(shared.counters, shared.wakeup, name, waits.stall_s, waits.startup_s, ratios.started)
    # Requests are numbered from 1 in each launch; one made while this role was starting is
    # still answered (reading the counter here instead would skip it, and the main process
    # would wait for this role's state for ever).
    served = 0

    def checkpoint_due() -> bool:
        return shared.counters.checkpoint_request > served

    cut = CutPart(name, shared.counters, ratios, shared.wake)
    while waiter.wait(lambda: checkpoint_due() or cut.due() or role.ready(), role.idle, f"{name} to be allowed to run"):
        if checkpoint_due():
            served = shared.counters.checkpoint_request
            role.idle()  # a learner takes in what is staged, so the replay it hands in misses none of it
            hand_in(shared, served, name, {**role.state_dict(), "rng": rng_state()})
            continue
        if cut.due():
            role.idle()
            state = {**role.state_dict(), "rng": rng_state(), "counts": shared.counters.as_dict()}
            hand_in(shared, cut.tag(), name, state)
            cut.served = shared.counters.cuts_made
            continue
        role.step()
    if isinstance(role, Actor):
        role.close()
