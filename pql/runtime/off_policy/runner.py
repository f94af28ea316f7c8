"""PQL, PQL-D and SAC: an actor, a V-learner and a P-learner at the ratios of control.py, in
three processes (runtime.mode=process: the main process evaluates, logs and checkpoints while it
supervises them) or interleaved in the main process (runtime.mode=sequential)."""

from __future__ import annotations

import time

from torch import nn

from pql.checkpoint import CheckpointError
from pql.config import ROLE_NAMES, ConfigError, SACConfig
from pql.envs import ObsLayout
from pql.nets import ObsNormalizer
from pql.runtime.contracts import NORMALIZER, Role, Runner
from pql.runtime.control import RatioCounters
from pql.runtime.divergence import Diverged, check_state
from pql.runtime.episodes import latest_episode_scalars
from pql.runtime.off_policy.actor import Actor
from pql.runtime.off_policy.learners import replay_layouts
from pql.runtime.off_policy.roles import build_role, make_ratios, make_rules, make_shared, role_main
from pql.runtime.off_policy.sequential import interleave
from pql.runtime.settings import OffPolicySettings
from pql.runtime.supervisor import POLL_S, ProcessRuntime, role, role_context
from pql.runtime.weight_sync import WeightsReader

LEARNERS = ("v_learner", "p_learner")
DIVERGED_REPORT_S = 5.0  # a diverged role's next update takes milliseconds, a few seconds on a loaded CPU


def kept_replay(resume: dict, expected: dict[str, dict]) -> bool:
    """Whether a checkpoint holds both learners' replays: a resume from it continues the launch.
    Raises CheckpointError if one holds another layout than `expected` ({learner: layout})."""
    saved = {name: resume["roles"][name].get("replay") for name in LEARNERS}
    for name, replay in saved.items():
        if replay is None or replay["layout"] == expected[name]:
            continue
        differ = [k for k in expected[name] if replay["layout"][k] != expected[name][k]]
        raise CheckpointError(
            f"the checkpoint's {name} replay is not this run's: its "
            + ", ".join(f"{k} {replay['layout'][k]} where this run has {expected[name][k]}" for k in differ)
            + " (replay.capacity, replay.kind and priority_mode, algo.nstep and greedy_nstep, the task); resume with "
            "the settings that wrote it"
        )
    return all(replay is not None for replay in saved.values())


def check_network_sizes(resume: dict, weights: dict) -> None:
    """Raises CheckpointError if a network of the checkpoint has another number of weights than
    this run builds: it was written with other network sizes, and nothing of it can be loaded."""
    for name, snapshot in resume["weights"].items():
        saved, built = snapshot["weights"].numel(), weights[name].flat.shape[1]
        if saved != built:
            raise CheckpointError(
                f"the checkpoint's {name} has {saved:,} weights where this run's has {built:,} (algo.net.*, the "
                "task's observation and action sizes); resume with the settings that wrote it"
            )


class OffPolicyRunner(Runner):
    keeps_replica_state = True  # each replica's replay, envs and n-step window

    @staticmethod
    def make_policy(algo, obs_dim: int, act_dim: int) -> nn.Module:
        return make_rules(algo, ObsLayout.shared(obs_dim), act_dim).make_policy()

    def __init__(self, settings: OffPolicySettings, device, obs: ObsLayout, act_dim: int, resume: dict | None):
        if settings.algo.mirror and obs.mirror is None:
            task = settings.actor.envs.task.name
            raise ConfigError("algo.mirror", True, f"false: task {task} has no mirror symmetry to augment with")
        self.settings, self.device, self.obs, self.act_dim, self.resume = settings, device, obs, act_dim, resume
        self.world = settings.process.replicas.world  # env_steps counts every replica's
        self.scales_returns = settings.v_learner.return_support is not None
        self.samples_policy = isinstance(settings.algo, SACConfig)  # SAC: its temperature and entropy are logged
        rules = make_rules(settings.algo, obs, act_dim)
        devices = [settings.role(name).device for name in ROLE_NAMES]
        self.ctx = role_context(devices, role_main) if settings.process_mode else None
        self.shared = make_shared(settings, rules, obs.width, act_dim, self.ctx)
        self.counters = self.shared.counters
        if resume is not None:
            check_network_sizes(resume, self.shared.weights)
            self.counters.load(resume["counters"])
        if resume is not None and kept_replay(resume, replay_layouts(settings, obs.width, act_dim)):
            self.counters.continue_launch(resume["launch"])
        else:
            self.counters.start_launch(settings.warmup_steps)
        self.ratios = make_ratios(settings.ratios, self.shared)
        self.cuts_taken = 0  # the latest cut whose parts this replica has taken
        self.roles: dict[str, Role] = {}
        self.processes: ProcessRuntime | None = None
        if self.ctx is None:
            self.roles = {
                name: build_role(
                    name, settings, self.shared, rules, self.ratios, obs, act_dim, fresh_start=resume is None
                )
                for name in ROLE_NAMES
            }
            for name, role in self.roles.items():
                if resume is not None:
                    role.load_state_dict(resume["roles"][name])
        if resume is not None:
            # After the roles above published what they loaded: in one process the readers then
            # see the very versions they saw when the checkpoint was taken. Role processes
            # publish theirs once started, newer versions that every reader takes.
            for name, snapshot in resume["weights"].items():
                self.shared.weights[name].restore(snapshot)
        # The main process's copies of the newest delivered policy and statistics (of all the
        # observations, the critic's too), for evaluation.
        self.delivered = settings.delivered
        self.policy = rules.make_policy().to(device).requires_grad_(False).eval()
        self.normalizer = ObsNormalizer(obs.width).to(device)
        self.policy_reader = WeightsReader(self.shared.weights[self.delivered], self.policy)
        self.normalizer_reader = WeightsReader(self.shared.weights[NORMALIZER], self.normalizer)

    @property
    def trains_elsewhere(self) -> bool:
        return self.ctx is not None  # process mode: the roles train in processes of their own

    def run(self, monitor) -> None:
        if self.ctx is None:
            interleave(self.roles["actor"], (self.roles["v_learner"], self.roles["p_learner"]), monitor, self.ratios)
            self.counters.actor_done = 1
            monitor.tick(final=True)
            return
        self.processes = ProcessRuntime(
            self.shared,
            {
                name: role(
                    self.ctx,
                    name,
                    role_main,
                    (name, self.settings, self.shared, self.obs, self.act_dim, self.resume),
                )
                for name in ROLE_NAMES
            },
        )
        self.processes.start()
        while not self.counters.actor_done:
            if code := monitor.stop_code():
                self.counters.finish = code  # the actor finishes at its next agreement (distributed.py)
            self._supervise(self.processes, monitor)
        while not self.ratios.caught_up():  # the learners' last updates
            self._supervise(self.processes, monitor)
        self.processes.check()
        monitor.tick(final=True)

    def _supervise(self, processes: ProcessRuntime, monitor) -> None:
        processes.check()
        monitor.tick()
        time.sleep(POLL_S)

    def counts(self) -> dict:
        c = self.counters.as_dict()
        return {
            "env_steps": c["env_steps"] * self.world,
            "actor": c["actor_steps"],
            "v_learner": c["critic_updates"],
            "p_learner": c["policy_updates"],
        }

    def scalars(self) -> dict:
        a, v, p = self.ratios.progress()
        stats = self.shared.stats.as_dict()
        return {
            "ratio/beta_av": v / a if a > 0 else 0.0,
            "ratio/beta_pv": v / p if p > 0 else 0.0,
            "loss/critic": stats["critic_loss"],
            "loss/policy": stats["policy_loss"],
            **({"policy/alpha": stats["alpha"], "policy/entropy": stats["entropy"]} if self.samples_policy else {}),
            "critic/q": stats["q_mean"],
            **({"critic/return_scale": stats["return_scale"]} if self.scales_returns else {}),
            "policy/version_lag": stats["policy_version_lag"],
            **latest_episode_scalars(self.shared.stats),
            "train/episodes": self.counters.episodes,
        }

    def finished_by(self) -> int:
        return self.counters.finished_by

    def policy_version(self) -> int:
        return self.shared.weights[self.delivered].current_version()  # 0 until the P-learner has published once

    def latest_policy(self) -> tuple:
        """Waits for a whole copy of the newest published policy, never an older one."""
        version = self.policy_reader.pull_latest()
        self.normalizer_reader.pull_latest()
        return self.policy, self.normalizer.head(self.obs.policy_dim), version

    def checkpoint_ready(self, wanted: bool) -> bool:
        """In process mode with several replicas each replica's roles run on their own clocks, so
        a checkpoint is a cut the actors agree on: every replica's state at one actor step and the
        learners' counts for it (roles.CutPart), the same on every replica, as a resume needs
        (their collectives pair the k-th calls); at the end, where they finished. Sequential
        replicas tick at the same counts anyway; one replica has no one to agree with."""
        if self.processes is None or self.world == 1:
            return wanted
        c = self.counters
        if c.actor_done:
            return self.ratios.caught_up()
        if wanted and c.cuts_asked <= c.cuts_made == self.cuts_taken:
            c.cuts_asked = c.cuts_made + 1  # the actor asks at its next agreement
        return self._agreed_cut() is not None

    def _agreed_cut(self) -> int | None:
        """The number of the cut the actors agreed on and this replica has not taken yet."""
        c = self.counters
        cut = c.cuts_made
        return cut if self.processes is not None and not c.actor_done and cut > self.cuts_taken else None

    def checkpoint(self) -> dict:
        if (cut := self._agreed_cut()) is not None:
            assert self.processes is not None
            roles = self.processes.collect_parts(f"cut {cut}")
            self.cuts_taken = cut
            counts = self._counts_at_cut(roles)
        elif self.processes is not None:
            roles, counts = self.processes.collect_states()
        else:
            roles, counts = {name: role.state_dict() for name, role in self.roles.items()}, self.counters.as_dict()
        state = {
            "counters": {k: counts[k] for k in RatioCounters.persistent},
            "launch": {k: counts[k] for k in RatioCounters.launch},
            "weights": {name: weights.snapshot() for name, weights in self.shared.weights.items()},
            "policy": roles["p_learner"][self.delivered],
            "normalizer": self._policy_normalizer(roles["actor"]["normalizer"]),
            "roles": roles,
        }
        if self.processes is not None:
            self._let_a_diverged_role_say_so(state, self.processes)
        return state

    def _policy_normalizer(self, actor_normalizer: dict) -> dict:
        """The statistics of the policy's observations, of the actor's normaliser's state."""
        normalizer = ObsNormalizer(self.obs.width)
        normalizer.load_state_dict(actor_normalizer)
        return normalizer.head(self.obs.policy_dim).state_dict()

    def _counts_at_cut(self, roles: dict) -> dict:
        """The counters of a cut, from the parts (each role's counts as it handed in)."""
        actor, v, p = (roles[name].pop("counts") for name in ROLE_NAMES)
        return {
            **self.counters.as_dict(RatioCounters.launch),  # the launch's, which no role changes
            "env_steps": actor["env_steps"],
            "episodes": actor["episodes"],
            "actor_steps": self.counters.cut_actor_steps,
            "critic_updates": v["critic_updates"],
            "policy_updates": p["policy_updates"],
        }

    @staticmethod
    def _let_a_diverged_role_say_so(state: dict, processes: ProcessRuntime) -> None:
        """A state holding nan or inf, taken from roles that go on: the role that diverged finds
        it at its next update and says which quantity at which update. It gets DIVERGED_REPORT_S
        to do so (processes.check raises its report) before the checkpoint's vaguer refusal."""
        try:
            check_state(state)
        except Diverged:
            deadline = time.monotonic() + DIVERGED_REPORT_S
            while time.monotonic() < deadline:
                processes.check()
                time.sleep(POLL_S)
            raise

    def close(self) -> None:
        if self.processes is not None:
            self.processes.stop()
        if isinstance(actor := self.roles.get("actor"), Actor):  # sequential: its envs are this process's
            actor.close()
