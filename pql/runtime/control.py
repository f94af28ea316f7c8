"""PQL's update ratios, enforced exactly by counting, not by tuning sleeps.

Let a, v, p be the batched actor steps, critic updates and policy updates made since this
launch (a after the warm-up). With β_a:v = 1:beta_av, β_p:v = 1:beta_pv and a window of
`max_lag` actor steps:

* the actor may step while        a < v / beta_av + max_lag
* the V-learner may update while  v < beta_av · a   and   v < beta_pv · p + beta_av · max_lag
* the P-learner may update while  p < v / beta_pv

so over a run v/a → beta_av and v/p → beta_pv, each off by at most the window. With an early
ratio (algo.early_beta_av), the run's first early_steps actor steps each allow early_beta_av
critic updates instead of beta_av: beta_av · a above becomes the sum over the launch's actor steps
of the ratio at each one's place in the run (so a resumed run does not repeat its start), and
the window's updates are those of the ratio in force. Once the actor
has finished, the learners catch up: the run ends at v = beta_av · a and p = ⌊v / beta_pv⌋ exactly
(`caught_up`), counts every replica of a data-parallel run reaches alike. These are predicates
only: a role that may not run waits (pql/runtime/waiting.py) until one holds.
"""

from __future__ import annotations

from typing import ClassVar

from pql.runtime.shared import RunCounters, RunStats, SharedState


class RatioCounters(RunCounters):
    """The counts the ratios are over (writer in brackets), and where this launch started them:

    actor_steps              batched transitions the actor staged and counted (actor)
    critic_updates           (V-learner)
    policy_updates           (P-learner)
    consumed_v, consumed_p   staged batches the V-/P-learner has copied into its replay (that learner)
    launch_*                 actor_steps, critic_updates, policy_updates when this launch started (main)
    warmup_steps             actor steps of warm-up in this launch, not counted in the ratios (main)
    cuts_asked               cuts asked for: a checkpoint of every replica is due, and the actors
                             are to agree on an actor step to cut every replica's state at (main)
    cuts_made                cuts the actors agreed on, asked for here or by another replica (actor)
    cut_actor_steps          the actor steps staged at the latest cut (actor)
    cuts_seen_v, _p          the latest cut the V-/P-learner has seen: the actor steps on only once
                             both have, so that neither passes its count for the cut (that learner)
    """

    actor_steps: int
    critic_updates: int
    policy_updates: int
    consumed_v: int
    consumed_p: int
    launch_actor_steps: int
    launch_critic_updates: int
    launch_policy_updates: int
    warmup_steps: int
    cuts_asked: int
    cuts_made: int
    cut_actor_steps: int
    cuts_seen_v: int
    cuts_seen_p: int
    persistent = RunCounters.persistent + ("actor_steps", "critic_updates", "policy_updates")
    launch: ClassVar[tuple[str, ...]] = (
        "launch_actor_steps",
        "launch_critic_updates",
        "launch_policy_updates",
        "warmup_steps",
    )
    progress = ("actor_steps", "critic_updates", "policy_updates", "consumed_v", "consumed_p")

    def start_launch(self, warmup_steps: int) -> None:
        """Mark the start of a launch (a fresh run or a resume): the ratios count from here, and
        the staging ring starts empty."""
        self.launch_actor_steps, self.launch_critic_updates = self.actor_steps, self.critic_updates
        self.launch_policy_updates = self.policy_updates
        self.consumed_v = self.consumed_p = self.actor_steps
        self.warmup_steps = warmup_steps

    def continue_launch(self, launch: dict) -> None:
        """Go on with the saved launch (`launch`'s counters): a resume whose learners kept their
        replay continues the ratios' counts, and its warm-up, as if never stopped."""
        self.load(launch)
        self.consumed_v = self.consumed_p = self.actor_steps


class LearnerStats(RunStats):
    """The latest losses the learners report: critic_loss, q_mean (mean Q of the last reported
    batch, in the env's return units), policy_version_lag (versions the V-learner's policy copy is
    behind) and return_scale (what its rewards were divided by; 1 without algo.return_scaling) from
    the V-learner; policy_loss, and SAC's temperature alpha and policy entropy, from the P-learner."""

    critic_loss: float
    policy_loss: float
    alpha: float
    entropy: float
    q_mean: float
    policy_version_lag: float
    return_scale: float


class RatioController:
    """The predicates above over `counters`."""

    def __init__(
        self,
        counters: RatioCounters,
        beta_av: int,
        beta_pv: int,
        max_lag: int,
        early_beta_av: int | None = None,
        early_steps: int = 0,
    ):
        self.counters = counters
        self.beta_av, self.beta_pv, self.max_lag = beta_av, beta_pv, max_lag
        self.early_beta_av = beta_av if early_beta_av is None else early_beta_av
        self.early_steps = early_steps if early_beta_av is not None else 0

    def progress(self) -> tuple[int, int, int]:
        """(a, v, p) since launch, a counted after the warm-up."""
        c = self.counters.as_dict()
        return (
            c["actor_steps"] - c["launch_actor_steps"] - c["warmup_steps"],
            c["critic_updates"] - c["launch_critic_updates"],
            c["policy_updates"] - c["launch_policy_updates"],
        )

    def critic_updates_for(self, a: int) -> int:
        """The critic updates the launch's first a actor steps allow."""
        if not self.early_steps:
            return self.beta_av * a
        start = self.counters.launch_actor_steps  # where this launch's steps lie in the run
        early = max(0, min(start + a, self.early_steps) - min(start, self.early_steps))
        return self.beta_av * a + (self.early_beta_av - self.beta_av) * early

    def window(self, a: int) -> int:
        """max_lag actor steps' worth of critic updates, at the ratio of actor step a."""
        early = bool(self.early_steps) and self.counters.launch_actor_steps + a < self.early_steps
        return self.max_lag * (self.early_beta_av if early else self.beta_av)

    def actor_may_step(self, in_flight: int = 0) -> bool:
        """in_flight: actor steps made but not counted yet (their ring writes have not landed)."""
        a, v, _ = self.progress()
        return self.critic_updates_for(a + in_flight) < v + self.window(a)

    def critic_may_update(self) -> bool:
        a, v, p = self.progress()
        return v < self.critic_updates_for(a) and v < self.beta_pv * p + self.window(a)

    def policy_may_update(self) -> bool:
        _, v, p = self.progress()
        return (p + 1) * self.beta_pv <= v

    def counts_at_cut(self) -> tuple[int, int]:
        """(critic updates, policy updates) a cut at the actor step counters.cut_actor_steps stands
        at: those the ratios allow for it once the actor stops there, the same on every replica.
        Neither learner is past them when it sees the cut (the actor has not stepped on)."""
        c = self.counters
        a = c.cut_actor_steps - c.launch_actor_steps - c.warmup_steps
        v = max(0, self.critic_updates_for(a))
        return c.launch_critic_updates + v, c.launch_policy_updates + v // self.beta_pv

    def caught_up(self) -> bool:
        """Whether neither learner may update any more: with the actor finished, the end of the run."""
        return not (self.critic_may_update() or self.policy_may_update())

    def started(self) -> bool:
        """Whether every role has counted work in this launch."""
        c = self.counters.as_dict()
        return (
            c["actor_steps"] > c["launch_actor_steps"]
            and c["critic_updates"] > c["launch_critic_updates"]
            and c["policy_updates"] > c["launch_policy_updates"]
        )


PQLShared = SharedState[RatioCounters, LearnerStats]  # what PQL's three roles share
