"""The actor role: steps the training envs with its local policy copy, folds n-step
transitions and publishes them into the staging ring."""
from __future__ import annotations

import torch

from pql.algos.exploration import noise_stds
from pql.envs import make_env, to_env_action
from pql.kernels.nstep import nstep_returns
from pql.nets import ObsNormalizer
from pql.replay.prioritized import sequence_priority
from pql.runtime.control import C, RatioController, S
from pql.runtime.device import InFlight
from pql.runtime.episodes import EpisodeStats
from pql.runtime.precision import InferenceCopy
from pql.runtime.weight_sync import WeightsReader

STATS_EVERY = 16  # actor steps between stats reports (each report is a host sync on CUDA)


class NStepWindow:
    """The last n steps of every env; folds the oldest into one transition once n are in.

    With priority_eta set, each step also carries its one-step |TD error| [N] and the folded
    transition its sequence priority over the steps it folds (Agent57's eta·max + (1−eta)·mean).
    """

    def __init__(self, nstep: int, gamma: float, priority_eta: float | None = None):
        self.nstep, self.gamma, self.priority_eta = nstep, gamma, priority_eta
        self.steps: list[tuple] = []

    def push(self, obs, action, reward, terminated, truncated, boot_obs, td_abs=None) -> dict | None:
        """boot_obs: info["final_obs"] — s_{t+1} of this episode even where the env was reset;
        td_abs: [N] one-step |TD error| of this step (with priority_eta).
        -> the folded transition for the oldest step, or None while the window fills."""
        self.steps.append((obs, action, reward, terminated, truncated, boot_obs, td_abs))
        if len(self.steps) < self.nstep:
            return None
        obs0, action0 = self.steps[0][0], self.steps[0][1]
        rewards, terms, truncs, boots = (torch.stack(x) for x in list(zip(*self.steps))[2:6])
        returns, discount, steps = nstep_returns(rewards, terms, truncs, self.gamma, self.nstep)
        # The fold of step 0 ended m steps later (at an episode end or after n steps): bootstrap
        # from the observation that followed its last folded step, final_obs if the episode ended.
        last = steps[0] - 1
        next_obs = boots[last, torch.arange(obs0.shape[0], device=obs0.device)]
        transition = {"obs": obs0, "action": action0, "reward": returns[0], "next_obs": next_obs, "discount": discount[0]}
        if self.priority_eta is not None:
            td_abs = torch.stack([s[6] for s in self.steps], dim=1)  # [N, n]
            transition["priority"] = sequence_priority(td_abs, self.priority_eta, lengths=steps[0])
        self.steps.pop(0)
        return transition


class Actor:
    name = "actor"

    def __init__(self, cfg, shared, algo, device, ctrl: RatioController, fresh_start: bool):
        self.cfg, self.shared, self.algo, self.device, self.ctrl = cfg, shared, algo, device, ctrl
        self.env = make_env(cfg.task, cfg.task.num_envs, device, cfg.runtime.seed)
        self.policy = algo.make_policy().to(device)
        self.policy_reader = WeightsReader(shared.policy, self.policy)
        self.acting = InferenceCopy(self.policy, cfg.actor.precision)
        self.normalizer = ObsNormalizer(self.env.obs_dim).to(device)
        self.noise_std = noise_stds(cfg.algo, self.env.num_envs, device)
        self.window = NStepWindow(cfg.algo.nstep, cfg.algo.gamma,
                                  cfg.replay.priority_eta if cfg.replay.actor_priorities else None)
        # Ape-X: with replay.actor_priorities the actor keeps a critic copy to prioritise its data.
        self.critic = algo.make_critic().to(device).requires_grad_(False) if cfg.replay.actor_priorities else None
        self.critic_reader = None if self.critic is None else WeightsReader(shared.critic, self.critic)
        self.random_warmup = fresh_start  # a resumed run warms its empty replay with its policy
        self.generator = torch.Generator(device=device).manual_seed(cfg.runtime.seed + 1)
        self.obs = self.env.reset()
        self.episodes = EpisodeStats(self.env.num_envs, device, int(shared.counters[C.EPISODES]))
        self.local_steps = 0
        self.ring_writes = InFlight(device)  # staged batches written but not counted yet

    def done(self) -> bool:
        return int(self.shared.counters[C.ENV_STEPS]) >= self.cfg.runtime.max_env_steps

    def ready(self) -> bool:
        self._publish_landed()
        c = self.shared.counters
        if self.done():
            c[C.ACTOR_DONE] = 1
            return False
        ring_free = self._staged() - min(int(c[C.CONSUMED_V]), int(c[C.CONSUMED_P])) < self.shared.ring_slots
        return ring_free and self.ctrl.actor_may_step(in_flight=len(self.ring_writes))

    def idle(self) -> None:
        self._publish_landed()

    def _staged(self) -> int:
        """Batches staged in this ring so far: counted ones and those whose write is in flight."""
        return int(self.shared.counters[C.ACTOR_STEPS]) + len(self.ring_writes)

    def _publish_landed(self) -> None:
        """Count the ring writes that have landed: a learner reads a slot only once it is counted."""
        landed = self.ring_writes.landed()
        if landed:
            self.ctrl.advance(C.ACTOR_STEPS, landed)

    def _sync_weights(self) -> None:
        if self.policy_reader.pull():
            self.acting.refresh()
        if self.critic_reader is not None:
            self.critic_reader.pull()

    def _td_abs(self, obs, action, reward, terminated, final_obs) -> torch.Tensor:
        """One-step |TD error| [N] of this step under the actor's critic and policy copies, with
        the learner's own target rule (algo.critic_loss)."""
        batch = {"obs": self.normalizer(obs), "action": action, "reward": reward,
                 "next_obs": self.normalizer(final_obs), "discount": self.cfg.algo.gamma * (~terminated).float()}
        _, td_abs, _ = self.algo.critic_loss(self.critic, self.critic, self.policy, batch, torch.ones_like(reward))
        return td_abs

    @torch.no_grad()
    def step(self) -> None:
        c = self.shared.counters
        if self.local_steps % self.cfg.runtime.policy_sync_every == 0:
            self._sync_weights()
        self.normalizer.update(self.obs)
        self.shared.normalizer.publish(self.normalizer)
        staged = self._staged()
        warming = staged - int(c[C.A0]) < int(c[C.WARMUP])
        if warming and self.random_warmup:
            action = torch.rand((self.env.num_envs, self.env.act_dim), device=self.device, generator=self.generator) * 2 - 1
        else:
            action = self.algo.explore(self.acting.module, self.normalizer(self.obs), self.noise_std)
        next_obs, reward, terminated, truncated, info = self.env.step(to_env_action(action, self.env))
        c[C.ENV_STEPS] += self.env.num_envs
        self._track_episodes(reward, terminated | truncated)
        td_abs = None if self.critic is None else self._td_abs(self.obs, action, reward, terminated, info["final_obs"])
        transition = self.window.push(self.obs, action, reward, terminated, truncated, info["final_obs"], td_abs)
        self.obs = next_obs
        self.local_steps += 1
        if transition is None:
            return
        slot = staged % self.shared.ring_slots
        for k, v in transition.items():
            self.shared.ring[k][slot].copy_(v)
        self.ring_writes.mark()
        self._publish_landed()

    def _track_episodes(self, reward, done) -> None:
        self.episodes.track(reward, done)
        if self.local_steps % STATS_EVERY == 0:
            stats = self.episodes.pop()
            if "train/return" in stats:
                self.shared.stats[S.TRAIN_RETURN] = stats["train/return"]
                self.shared.stats[S.TRAIN_LENGTH] = stats["train/length"]
            self.shared.counters[C.EPISODES] = stats["train/episodes"]

    def state_dict(self) -> dict:
        # No window or observations: a resumed run restarts its envs' episodes.
        return {"policy": self.policy.state_dict(), "normalizer": self.normalizer.state_dict(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.acting.refresh()
        self.normalizer.load_state_dict(state["normalizer"])
        self.generator.set_state(state["generator"])
