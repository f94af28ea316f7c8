"""Pieces every off-policy update rule shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

import torch
from torch import nn

from pql.algos.rules import Batch, ParamGroups
from pql.nets import DoubleQ

PolicyT = TypeVar("PolicyT", bound=nn.Module)


class Checkpointable:
    """state_dict/load_state_dict over the attributes named in `state_attrs` (modules and
    optimisers): what a checkpoint keeps of an object that owns several of them."""

    state_attrs: tuple = ()

    def state_dict(self) -> dict:
        return {name: getattr(self, name).state_dict() for name in self.state_attrs}

    def load_state_dict(self, state: dict) -> None:
        for name in self.state_attrs:
            getattr(self, name).load_state_dict(state[name])


def adam(params: Iterable[torch.Tensor] | ParamGroups, lr: float = 1e-3) -> torch.optim.Adam:
    """Adam over `params` (tensors or param groups; `lr` for the groups that set none, torch's
    default unless given), fused into one kernel per step: the default launches several per
    parameter tensor on CUDA, and on a CPU the fused step took a critic update from 5.8 to 5.2 ms
    (docs/tuning.md)."""
    return torch.optim.Adam(params, lr=lr, fused=True)


class SoftUpdate:
    """Polyak averaging θ' ← τθ + (1 − τ)θ' of `target` toward `source` (buffers are copied). The
    tensors are listed once: walking both modules on every call took 0.2 ms of a 4.3-ms critic
    update on a CPU (docs/tuning.md). Loading a state dict copies in place, so the lists stay valid."""

    def __init__(self, target: nn.Module, source: nn.Module):
        self.target: list[torch.Tensor] = list(target.parameters())
        self.source: list[torch.Tensor] = list(source.parameters())
        self.buffers = list(zip(target.buffers(), source.buffers()))

    @torch.no_grad()
    def __call__(self, tau: float) -> None:
        torch._foreach_lerp_(self.target, self.source, tau)
        for t, s in self.buffers:
            t.copy_(s)


def smoothed_target_action(policy: nn.Module, next_obs: torch.Tensor, noise: float, noise_clip: float) -> torch.Tensor:
    """TD3 target-policy smoothing: clip(π(s') + clip(ε, −c, c), −1, 1), ε ~ N(0, noise²)."""
    action = policy(next_obs)
    eps = (torch.randn_like(action) * noise).clamp(-noise_clip, noise_clip)
    return (action + eps).clamp(-1.0, 1.0)


def greedy_target(batch: Batch, bootstrap: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """The n-step target R⁽ⁿ⁾ + γ_b·V'(s'); where the batch carries its first steps (algo.greedy_nstep),
    the larger of it and the one-step target r_0 + γ_1·V'(s_1) (Wang et al., 2021, "Greedy
    Multi-step Off-Policy RL"). With the optimal value at their ends both are lower bounds of Q*
    under any behaviour, so the larger is the tighter: the n-step return is kept where the
    behaviour did better than the critic expects, and dropped where the noise of the behaviour's
    later actions cost more. bootstrap: states [M, obs_dim] -> V'(s) [M], called once on both sets.
    -> [B]."""
    if "next_obs1" not in batch:
        return batch["reward"] + batch["discount"] * bootstrap(batch["next_obs"])
    value_n, value_1 = bootstrap(torch.cat([batch["next_obs"], batch["next_obs1"]])).chunk(2)
    return torch.maximum(batch["reward"] + batch["discount"] * value_n, batch["reward1"] + batch["discount1"] * value_1)


class ClippedDoubleQ(ABC, Generic[PolicyT]):
    """The critic side of PQL and SAC (PQL-D replaces its loss): a double critic trained toward
    the algorithm's n-step target `td_target`, whose policy is of class PolicyT. Observations
    given to these methods are normalised."""

    def __init__(self, cfg: Any, obs_dim: int, act_dim: int):
        self.cfg, self.obs_dim, self.act_dim = cfg, obs_dim, act_dim

    def make_critic(self) -> nn.Module:
        return DoubleQ(
            self.obs_dim,
            self.act_dim,
            self.cfg.net.critic_hidden,
            layer_norm=self.cfg.net.critic_layer_norm,
            activation=self.cfg.net.activation,
        )

    @abstractmethod
    def td_target(self, batch: Batch, target_critic: nn.Module, policy: PolicyT) -> torch.Tensor:
        """The critic's target y, without gradients. -> [B]."""

    def critic_loss(
        self, critic: nn.Module, target_critic: nn.Module, policy: PolicyT, batch: Batch, weights: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Σ_j (Q_j(s, a) − y)², importance-weighted. -> (loss, |δ| [B] for priorities, scalars to
        log). weights: importance weights [B]."""
        target = self.td_target(batch, target_critic, policy)
        q1, q2 = critic(batch["obs"], batch["action"])
        q1, q2 = q1.squeeze(-1), q2.squeeze(-1)
        loss = (weights * ((q1 - target).pow(2) + (q2 - target).pow(2))).mean()
        td_abs = (torch.min(q1, q2) - target).detach().abs()
        return loss, td_abs, {"critic/loss": loss.detach(), "critic/q": q1.detach().mean()}

    @torch.no_grad()
    def td_error(self, critic: nn.Module, target_critic: nn.Module, policy: PolicyT, batch: Batch) -> torch.Tensor:
        """|min_j Q_j(s, a) − y| [B], the TD error critic_loss reports, without a loss."""
        q1, q2 = critic(batch["obs"], batch["action"])
        return (torch.min(q1, q2).squeeze(-1) - self.td_target(batch, target_critic, policy)).abs()

    def critic_optim_params(self, critic: nn.Module) -> ParamGroups:
        return [{"params": critic.parameters(), "lr": self.cfg.critic_lr}]
