"""An env with rsl_rl's VecEnv interface behind pql's batched-env protocol.

rsl_rl's VecEnv (rsl-rl-lib's `rsl_rl.env.VecEnv`, which Isaac Lab's, mjlab's and Genesis'
wrappers implement) has `num_envs`, `num_actions`, `max_episode_length`, `device`,
`get_observations()` and `step(actions) -> (obs, rewards, dones, extras)`; envs reset themselves
inside `step`. What the adapter does with it:

- **Observations.** A TensorDict (or mapping) of groups gives one group to the policy:
  `policy_group` (task.policy_group) where named, else the first the env has of "policy" (Isaac
  Lab's name), "actor" (mjlab's) and "state" (MuJoCo Playground's). A tensor is taken as it is;
  rsl_rl 2's `(obs, extras)` pair gives its first element. Observations are flattened to
  [N, obs_dim] float32.
- **The critic's observations.** Where the groups hold one for the critic, `critic_group`
  (task.critic_group) where named, else the first there of "critic" (Isaac Lab's and mjlab's
  name) and "privileged_state" (Playground's), its columns follow the policy's (`critic_obs_dim`
  of them: tasks/base.py), for a critic that reads privileged observations; a critic group that
  is the policy's adds none.
- **Done flags.** `dones` marks every finished episode, `extras["time_outs"]` those cut by the
  step limit: truncated = dones & time_outs, terminated = dones & ~time_outs. An env without
  "time_outs" has only terminations.
- **The final observation.** rsl_rl's step returns the new episode's first observation for a
  finished env and nothing of the last one. Where the env gives it as `extras["final_obs"]`
  (a tensor, or groups as the observations are: Isaac Lab's compute_final_obs), the adapter
  hands it on. Where it does not, `info["final_obs"]` of a finished env is the observation
  before its last step: a truncated episode then bootstraps from the value of the state one
  step before the cut, as rsl_rl's own PPO does (it adds γ·V(s) of that step's input to the
  reward). `final_obs_given` says which; docs/benchmarks.md measures what the stand-in costs.
- **Actions.** pql maps its [-1, 1] actions onto [action_low, action_high]: the env's
  `action_space` bounds where it has finite ones, else [-1, 1] (the env's own action scale
  applies on top, as with rsl_rl's Gaussian policies, whose actions centre on 0).
- **reset()** calls the env's `reset()` where it has one (Isaac Lab's and mjlab's wrappers do),
  else takes `get_observations()`: an rsl_rl env is ready to step once made, but its episodes
  then go on from where they were: `episode_starts` marks the envs whose next step starts an
  episode (all of them once made, then those that just finished), and an evaluation scores each
  env's first episode that starts after it begins.
- Rewards, flags and observations are copied: such envs rewrite their buffers in place.
- The env cannot be checkpointed (BatchedEnv's default): a resume starts new episodes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from .base import ActionCheck, BatchedEnv, TaskError, resolve_device

VEC_ENV_MEMBERS = ("num_envs", "num_actions", "max_episode_length", "device", "get_observations", "step")
# The groups taken when none is named, in order of preference: Isaac Lab's names, mjlab's, then
# MuJoCo Playground's (whose envs have only "state" and "privileged_state").
POLICY_GROUPS = ("policy", "actor", "state")
CRITIC_GROUPS = ("critic", "privileged_state")


def missing_vec_env_members(env) -> list[str]:
    """The members of rsl_rl's VecEnv interface that `env` lacks."""
    return [name for name in VEC_ENV_MEMBERS if not hasattr(env, name)]


class RslRlEnv(BatchedEnv):
    """The protocol over `vec_env`, an env with rsl_rl's VecEnv interface (module docstring)."""

    deterministic = False  # rsl_rl's interface promises no repeatable trajectory (GPU simulators seldom give one)

    def __init__(self, vec_env, policy_group: str | None = None, critic_group: str | None = None):
        self.vec_env = vec_env
        self.name = type(vec_env).__name__
        self._named_group = policy_group
        self._named_critic_group = critic_group
        self.num_envs = int(vec_env.num_envs)
        self.act_dim = int(vec_env.num_actions)
        self.device = resolve_device(vec_env.device)
        limit = vec_env.max_episode_length
        self.max_episode_steps = int(limit.max().item() if isinstance(limit, torch.Tensor) else limit)
        self.action_low, self.action_high = self._action_bounds()
        self._check_actions = ActionCheck(self.num_envs, self.act_dim, self.device)
        self._obs, self.critic_obs_dim = self._observations(vec_env.get_observations(), "get_observations()")
        self.obs_dim = self._obs.shape[1]
        # Whether the env has given extras["final_obs"] at a step so far: one may give it only at the
        # steps where an env finishes (examples/mjlab_task.py does).
        self.final_obs_given = False
        if not callable(getattr(vec_env, "reset", None)):
            self.episode_starts = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)

    def _action_bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        low = high = None
        space = getattr(self.vec_env, "action_space", None)
        if space is not None and hasattr(space, "low") and hasattr(space, "high"):
            low, high = (
                np.broadcast_to(np.asarray(b, dtype=np.float32), (self.act_dim,)) for b in (space.low, space.high)
            )
            if not (np.isfinite(low).all() and np.isfinite(high).all()):
                low = high = None
        if low is None:
            low, high = -np.ones(self.act_dim, np.float32), np.ones(self.act_dim, np.float32)
        return (torch.as_tensor(np.array(b), device=self.device) for b in (low, high))  # type: ignore[return-value]

    def _observations(self, obs, where: str) -> tuple[torch.Tensor, int]:
        """(obs as [N, obs_dim] float32, the critic's columns at its end): of a TensorDict or
        mapping, the policy's group and after it the critic's; a tensor as it is."""
        if isinstance(obs, tuple):  # rsl_rl 2: (obs, extras)
            obs = obs[0]
        if isinstance(obs, Mapping) or hasattr(obs, "keys"):
            keys = list(obs.keys())
            policy_group = self._policy_group(keys, where)
            critic_group = self._critic_group(keys, where)
            policy = self._flat(obs[policy_group], where)
            if critic_group is None or critic_group == policy_group:
                return policy, 0
            critic = self._flat(obs[critic_group], where)
            return torch.cat([policy, critic], dim=1), critic.shape[1]
        for setting, named in (("policy_group", self._named_group), ("critic_group", self._named_critic_group)):
            if named is not None:
                raise TaskError(
                    f"{self.name}: task.{setting}={named} names an observation group, but {where} "
                    f"returned a {type(obs).__name__}, not groups; leave task.{setting} null"
                )
        return self._flat(obs, where), 0

    def _flat(self, obs, where: str) -> torch.Tensor:
        """One group's (or a tensor's) observations as [N, columns] float32, a copy."""
        if not isinstance(obs, torch.Tensor):
            raise TaskError(f"{self.name}: {where} returned a {type(obs).__name__}, not a tensor or TensorDict")
        if obs.shape[0] != self.num_envs:
            raise TaskError(f"{self.name}: {where} returned {tuple(obs.shape)} observations for {self.num_envs} envs")
        return obs.reshape(self.num_envs, -1).to(self.device, torch.float32, copy=True)

    def _critic_group(self, keys: list, where: str) -> str | None:
        """The group of `keys` the critic sees: the named one, else the first of CRITIC_GROUPS there."""
        if self._named_critic_group is None:
            return next((group for group in CRITIC_GROUPS if group in keys), None)
        if self._named_critic_group not in keys:
            raise TaskError(
                f"{self.name}: {where} returned observation groups {', '.join(map(str, keys))} and no "
                f"{self._named_critic_group!r} group (task.critic_group); name the group the critic sees "
                "with task.critic_group=<group>"
            )
        return self._named_critic_group

    def _policy_group(self, keys: list, where: str) -> str:
        """The group of `keys` the policy sees: the named one, else the first of POLICY_GROUPS there."""
        wanted = [self._named_group] if self._named_group is not None else list(POLICY_GROUPS)
        found = [group for group in wanted if group in keys]
        if not found:
            missing = (
                f"no {self._named_group!r} group (task.policy_group)"
                if self._named_group is not None
                else f"neither {' nor '.join(map(repr, POLICY_GROUPS))}"
            )
            raise TaskError(
                f"{self.name}: {where} returned observation groups {', '.join(map(str, keys))} and {missing}; "
                f"name the group the policy sees with task.policy_group=<group>"
            )
        return found[0]

    def reset(self) -> torch.Tensor:
        reset = getattr(self.vec_env, "reset", None)
        self._obs, _ = self._observations(reset() if callable(reset) else self.vec_env.get_observations(), "reset()")
        return self._obs

    def step(self, actions: torch.Tensor):
        self._check_actions(actions)
        obs, reward, dones, extras = self.vec_env.step(actions)
        obs, _ = self._observations(obs, "step()")
        done = dones.to(self.device).reshape(self.num_envs).bool()
        time_outs = extras.get("time_outs")
        truncated = (
            done & time_outs.to(self.device).reshape(self.num_envs).bool() if time_outs is not None else done & False
        )
        terminated = done & ~truncated
        given = extras.get("final_obs")
        self.final_obs_given |= given is not None
        before = self._observations(given, "step()'s extras['final_obs']")[0] if given is not None else self._obs
        if before.shape != obs.shape:
            raise TaskError(
                f"{self.name}: step()'s extras['final_obs'] gives {before.shape[1]} columns where the observations "
                f"give {obs.shape[1]} (the policy's group and the critic's); give final_obs as the observations are"
            )
        final_obs = torch.where(done[:, None], before, obs)
        self._obs = obs
        if self.episode_starts is not None:
            self.episode_starts = done
        reward = reward.to(self.device, torch.float32, copy=True).reshape(self.num_envs)
        return obs, reward, terminated, truncated, {"final_obs": final_obs}

    def _cannot_checkpoint(self) -> TaskError:
        return TaskError(
            f"{self.name} (an rsl_rl VecEnv) cannot be checkpointed: the interface has no way to save its "
            "simulator's state; a resume starts new episodes"
        )

    def close(self) -> None:
        close = getattr(self.vec_env, "close", None)
        if callable(close):
            close()
