"""What the replay of the off-policy learners holds, and the n-step window that makes it: each
env's last n steps folded into one transition (obs, action, n-step return, bootstrap obs, γ^m)."""

from __future__ import annotations

import torch

from pql.kernels.nstep import nstep_returns
from pql.replay.prioritized import sequence_priority


def keeps_first_step(algo_cfg) -> bool:
    """Whether transitions also carry their first step (algo.greedy_nstep with n > 1)."""
    return algo_cfg.greedy_nstep and algo_cfg.nstep > 1


def transition_spec(obs_dim: int, act_dim: int, first_step: bool = False) -> dict:
    """The n-step folded transition the actor makes and the V-learner stores; with first_step
    also the one-step transition it starts with (reward1 = r_0, next_obs1 = s_1, discount1 = γ, 0
    after a termination), for the greedy target."""
    spec = {
        "obs": ((obs_dim,), torch.float32),
        "action": ((act_dim,), torch.float32),
        "reward": ((), torch.float32),
        "next_obs": ((obs_dim,), torch.float32),
        "discount": ((), torch.float32),
    }
    if first_step:
        spec.update(
            {"reward1": ((), torch.float32), "next_obs1": ((obs_dim,), torch.float32), "discount1": ((), torch.float32)}
        )
    return spec


def staging_spec(obs_dim: int, act_dim: int, first_step: bool = False) -> dict:
    """A transition and the priority the actor gives it (read only with replay.actor_priorities)."""
    return {**transition_spec(obs_dim, act_dim, first_step), "priority": ((), torch.float32)}


class NStepWindow:
    """The last n steps of every env; folds the oldest into one transition once n are in.

    With priority_eta set, each step also carries its one-step |TD error| [N] and the folded
    transition its sequence priority over the steps it folds (Agent57's eta·max + (1−eta)·mean).
    With first_step, each transition also carries its first step (transition_spec).
    """

    def __init__(self, nstep: int, gamma: float, priority_eta: float | None = None, first_step: bool = False):
        self.nstep, self.gamma, self.priority_eta, self.first_step = nstep, gamma, priority_eta, first_step
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
        transition = {
            "obs": obs0,
            "action": action0,
            "reward": returns[0],
            "next_obs": next_obs,
            "discount": discount[0],
        }
        if self.first_step:
            transition.update(
                {"reward1": rewards[0], "next_obs1": boots[0], "discount1": self.gamma * (~terms[0]).to(rewards.dtype)}
            )
        if self.priority_eta is not None:
            td_abs = torch.stack([s[6] for s in self.steps], dim=1)  # [N, n]
            transition["priority"] = sequence_priority(td_abs, self.priority_eta, lengths=steps[0])
        self.steps.pop(0)
        return transition
