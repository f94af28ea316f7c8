"""The actor role: steps the training envs with its local policy copy, folds n-step
transitions and stages them in the ring for the learners. It keeps the observation statistics
(and with algo.return_scaling the return's) that every role reads. With several replicas it merges
those statistics with theirs at every step and agrees with them on when and why to finish
(pql/runtime/distributed.py)."""

from __future__ import annotations

import torch

from pql.algos.off_policy import OffPolicyAlgorithm
from pql.envs import ObsLayout, build_env, to_env_action
from pql.nets import ObsNormalizer, ReturnScale
from pql.replay.nstep import NStepWindow
from pql.runtime.contracts import CRITIC, NORMALIZER, POLICY, RETURN_SCALE, Role
from pql.runtime.control import PQLShared, RatioController
from pql.runtime.device import InFlight
from pql.runtime.distributed import FINISH_CHECK_EVERY, ReplicaGroup
from pql.runtime.divergence import finite_actions
from pql.runtime.episodes import EpisodeStats
from pql.runtime.off_policy.precision import InferenceCopy
from pql.runtime.settings import ActorSettings
from pql.runtime.weight_sync import WeightsReader
from tasks import TaskError

EPISODE_REPORT_EVERY = 16  # actor steps between reports of the training episodes (a host sync on CUDA)


class Actor(Role):
    name = "actor"

    def __init__(
        self,
        settings: ActorSettings,
        shared: PQLShared,
        algorithm: OffPolicyAlgorithm,
        ratios: RatioController,
        obs: ObsLayout,
        fresh_start: bool,
        group: ReplicaGroup,
    ):
        self.settings, self.shared, self.ratios, self.group = settings, shared, ratios, group
        self.algorithm, self.obs_layout = algorithm, obs
        self.device = device = settings.device
        envs = settings.envs
        self.env = build_env(envs.task, envs.num_envs, device, envs.seed)
        if (layout := ObsLayout.of(self.env, envs.task.privileged_critic)) != obs:
            raise TaskError(
                f"{envs.task.name}: the training envs' observations ({layout}) are not laid out as the evaluation "
                f"envs' ({obs}): a factory must make envs of one layout whatever their number"
            )
        self.policy_reader = WeightsReader(shared.weights[POLICY], algorithm.policy)
        self.acting = InferenceCopy(algorithm.policy, settings.precision)
        self.normalizer = ObsNormalizer(self.env.obs_dim).to(device)
        # algo.return_scaling: the return's statistics, over G_t = r_t + γ G_{t-1} of every env.
        self.return_scale: ReturnScale | None = None
        self.returns: torch.Tensor | None = None
        if settings.return_support is not None:
            self.return_scale = ReturnScale(*settings.return_support).to(device)
            self.returns = torch.zeros(self.env.num_envs, device=device)
        self.noise = algorithm.exploration_noise(self.env.num_envs)
        self.window = NStepWindow(settings.nstep, settings.gamma, settings.priority_eta, settings.keeps_first_step)
        # Ape-X: with replay.actor_priorities the actor keeps a critic copy to prioritise its data.
        prioritises = settings.priority_eta is not None
        self.critic_reader = WeightsReader(shared.weights[CRITIC], algorithm.critic) if prioritises else None
        self.random_warmup = fresh_start  # a resumed run warms its empty replay with its policy
        self.generator = torch.Generator(device=device).manual_seed(settings.envs.seed + 1)
        self.obs = self.env.reset()
        self.episodes = EpisodeStats(self.env.num_envs, device, shared.counters.episodes, self.env.episode_metrics)
        self.local_steps = 0
        self.said_envs_unsaved = False
        self.finished = False  # asked to finish (by any replica's main process), and agreed
        self.ring_writes = InFlight(device, wait=group.ordered)  # staged batches written but not counted yet

    def done(self) -> bool:
        return self.finished or self.group.replicas.budget_spent(
            self.shared.counters.env_steps, self.settings.max_env_steps
        )

    def ready(self) -> bool:
        self._count_landed()
        c = self.shared.counters
        if self.done():
            c.actor_done = 1
            return False
        if min(c.cuts_seen_v, c.cuts_seen_p) < c.cuts_made:  # a cut both learners have not seen yet
            return False
        ring_free = self._staged() - min(c.consumed_v, c.consumed_p) < self.shared.ring_slots
        return ring_free and self.ratios.actor_may_step(in_flight=len(self.ring_writes))

    def idle(self) -> None:
        self._count_landed()

    def _staged(self) -> int:
        """Batches staged in this ring so far: counted ones and those whose write is in flight."""
        return self.shared.counters.actor_steps + len(self.ring_writes)

    def _count_landed(self) -> None:
        """Count the ring writes that have landed: a learner reads a slot only once it is counted."""
        landed = self.ring_writes.landed()
        if landed:
            self.shared.add("actor_steps", landed)

    def _pull_weights(self) -> None:
        if self.policy_reader.pull():
            self.acting.refresh()
        if self.critic_reader is not None:
            self.critic_reader.pull()

    def _td_abs(self, obs, action, reward, terminated, final_obs) -> torch.Tensor:
        """One-step |TD error| [N] of this step under the actor's critic and policy copies."""
        batch = {
            "obs": self.normalizer(obs),
            "action": action,
            "reward": reward if self.return_scale is None else self.return_scale(reward),
            "next_obs": self.normalizer(final_obs),
            "discount": self.settings.gamma * (~terminated).float(),
        }
        return self.algorithm.priority(self.obs_layout.split(batch))

    @torch.no_grad()
    def step(self) -> None:
        c = self.shared.counters
        if self.local_steps % FINISH_CHECK_EVERY == 0:
            agreed, cut = self.group.agree_on(c.finish, c.cuts_asked > c.cuts_made)
            if agreed:
                c.finished_by = agreed
                self.finished = True  # every replica's actor stops at this same step
                c.actor_done = 1
                return
            if cut:  # every replica's state is cut here; its first step() after it agrees again
                c.cut_actor_steps = self._staged()
                c.cuts_made += 1
                self.shared.wake()
                return
        if self.local_steps % self.settings.pull_every == 0:
            self._pull_weights()
        self.group.update_normalizer(self.normalizer, self.obs)
        self.shared.weights[NORMALIZER].publish(self.normalizer)
        staged = self._staged()
        warming = staged - c.launch_actor_steps < c.warmup_steps
        if warming and self.random_warmup:
            action = (
                torch.rand((self.env.num_envs, self.env.act_dim), device=self.device, generator=self.generator) * 2 - 1
            )
        else:
            action = self.algorithm.act(
                self.obs_layout.policy(self.normalizer(self.obs)), self.noise, self.acting.module
            )
        with finite_actions(self.name, f"actor step {c.actor_steps:,}"):
            next_obs, reward, terminated, truncated, info = self.env.step(to_env_action(action, self.env))
        c.env_steps += self.env.num_envs
        self.episodes.track(reward, terminated | truncated, info)
        if self.local_steps % EPISODE_REPORT_EVERY == 0:
            self.episodes.report(self.shared)
        if self.settings.reward_scale != 1.0:
            reward = reward * self.settings.reward_scale  # what the critic learns; the episodes above keep the env's
        if self.returns is not None:
            self._track_returns(reward, terminated | truncated)
        td_abs = (
            None
            if self.critic_reader is None
            else self._td_abs(self.obs, action, reward, terminated, info["final_obs"])
        )
        transition = self.window.push(self.obs, action, reward, terminated, truncated, info["final_obs"], td_abs)
        self.obs = next_obs
        self.local_steps += 1
        if transition is None:
            return
        slot = staged % self.shared.ring_slots
        for k, v in transition.items():
            self.shared.ring[k][slot].copy_(v)
        self.ring_writes.mark()
        self._count_landed()

    def _track_returns(self, reward: torch.Tensor, done: torch.Tensor) -> None:
        """Fold this step's discounted returns into the return's statistics, publish them, and
        start the finished episodes' returns anew."""
        assert self.returns is not None and self.return_scale is not None
        self.returns.mul_(self.settings.gamma).add_(reward)
        self.group.update_return_scale(self.return_scale, self.returns)
        self.shared.weights[RETURN_SCALE].publish(self.return_scale)
        self.returns.masked_fill_(done, 0.0)

    def close(self) -> None:
        """Close the envs: a simulator's threads, Gymnasium's subprocesses. A role process exits
        without the interpreter's teardown (supervisor.exit_without_teardown), which would."""
        self.env.close()

    def state_dict(self) -> dict:
        """The actor's networks and streams, and where its envs stand ("envs": None where the
        envs cannot be saved, as Isaac Gym's: a resume then starts new episodes)."""
        state = {
            "policy": self.policy_reader.state_dict(),
            "critic": None if self.critic_reader is None else self.critic_reader.state_dict(),
            "normalizer": self.normalizer.state_dict(),
            "return_scale": None if self.return_scale is None else self.return_scale.state_dict(),
            "generator": self.generator.get_state(),
            "local_steps": self.local_steps,
            "random_warmup": self.random_warmup,
        }
        try:
            env = self.env.state_dict()
        except TaskError as e:
            if not self.said_envs_unsaved:  # once, at the first checkpoint
                print(f"pql: actor: checkpoints hold no envs: {e}", flush=True)
                self.said_envs_unsaved = True
            return {**state, "envs": None}
        episodes = self.episodes
        return {
            **state,
            "envs": {
                "env": env,
                "obs": self.obs,
                "window": [list(step) for step in self.window.steps],
                **self.noise.state_dict(),
                "returns": self.returns,
                "episodes": {"return": episodes.ep_return, "length": episodes.ep_length, "finished": episodes.finished},
            },
        }

    def load_state_dict(self, state: dict) -> None:
        self.policy_reader.load_state_dict(state["policy"])
        self.acting.refresh()
        if self.critic_reader is not None and state["critic"] is not None:
            self.critic_reader.load_state_dict(state["critic"])
        self.normalizer.load_state_dict(state["normalizer"])
        self.shared.weights[NORMALIZER].publish(self.normalizer, wait=True)  # the learners' statistics too
        if self.return_scale is not None and state.get("return_scale") is not None:
            self.return_scale.load_state_dict(state["return_scale"])
            self.shared.weights[RETURN_SCALE].publish(self.return_scale, wait=True)
        self.generator.set_state(state["generator"])
        self.local_steps, self.random_warmup = state["local_steps"], state["random_warmup"]
        self._load_envs(state["envs"])

    def _load_envs(self, saved: dict | None) -> None:
        """Continue the saved envs' episodes where they stood (else, as for a checkpoint of envs
        that cannot be saved or of another env count, they start new ones)."""
        if saved is None:
            return
        try:
            self.env.load_state_dict(saved["env"])
        except ValueError as e:
            print(f"pql: actor: the checkpoint's envs are not these ({e}): they start new episodes", flush=True)
            return
        self.obs = saved["obs"].to(self.device)
        self.window.steps = [tuple(None if t is None else t.to(self.device) for t in step) for step in saved["window"]]
        self.noise.load_state_dict(saved)
        if self.returns is not None and saved.get("returns") is not None:
            self.returns.copy_(saved["returns"])
        episodes = saved["episodes"]
        self.episodes.ep_return.copy_(episodes["return"])
        self.episodes.ep_length.copy_(episodes["length"])
        self.episodes.finished.copy_(episodes["finished"])
