"""Pieces every off-policy update rule shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

import torch
from torch import nn

from pql.algos.rules import Batch, ParamGroups
from pql.algos.values import Value, make_value
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


class ClippedDoubleQ(ABC, Generic[PolicyT]):
    """The critic side of PQL, PQL-D and SAC: a double critic of heads `value` (algo.value:
    pql/algos/values.py) trained toward the n-step target R + γ_b (Q'(s', a') + b) of the head
    with the smaller value, a' and the bonus b from the algorithm's `next_action`; the policy is of
    class PolicyT. Observations given to these methods are normalised; the critic reads the
    critic's (critic_obs_dim of them), the policy the policy's (obs_dim)."""

    def __init__(self, cfg: Any, obs_dim: int, act_dim: int, critic_obs_dim: int | None = None):
        self.cfg, self.obs_dim, self.act_dim = cfg, obs_dim, act_dim
        self.critic_obs_dim = obs_dim if critic_obs_dim is None else critic_obs_dim
        self.value: Value = make_value(cfg)

    def make_critic(self) -> nn.Module:
        net = self.cfg.net
        return DoubleQ(
            self.critic_obs_dim,
            self.act_dim,
            net.critic_hidden,
            out_dim=self.value.out_dim,
            layer_norm=net.critic_layer_norm,
            activation=net.activation,
            kind=net.kind,
            expansion=net.expansion,
        )

    @abstractmethod
    def next_action(self, policy: PolicyT, next_obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The action a' the target takes at next_obs [M, obs_dim], and the bonus b [M] added to
        the next state's value (None: no bonus). -> (a' [M, act_dim], b)."""

    def q(self, out: torch.Tensor) -> torch.Tensor:
        """A head's value E[Q] from its output. -> [B]."""
        return self.value.mean(out)

    @torch.no_grad()
    def td_target(self, batch: Batch, target_critic: nn.Module, policy: PolicyT) -> torch.Tensor:
        """The critic's target y (a distribution for a categorical critic), from the target head
        with the smaller value at the next states. Where the batch carries its first steps
        (algo.greedy_nstep), per sample the larger of the n-step and the one-step target
        r_0 + γ_1 (Q'(s_1, a_1') + b) (Wang et al., 2021, "Greedy Multi-step Off-Policy RL"): with
        the optimal value at their ends both are lower bounds of Q* under any behaviour, so the
        larger is the tighter; the n-step return is kept where the behaviour did better than the
        critic expects, and dropped where the noise of the behaviour's later actions cost more."""
        next_critic_obs, next_action, bonus = self._next(batch, policy)
        next1, next2 = target_critic(next_critic_obs, next_action)
        return self._target(batch, next1, next2, bonus)

    @torch.no_grad()
    def _next(self, batch: Batch, policy: PolicyT) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The critic's observations of the next states the target bootstraps from (with
        greedy_nstep the n-step ones, then the one-step ones), the actions a' the policy takes
        there and the bonus b."""
        if "next_obs1" in batch:
            next_obs = torch.cat([batch["next_obs"], batch["next_obs1"]])
            next_critic_obs = torch.cat([batch["next_critic_obs"], batch["next_critic_obs1"]])
        else:
            next_obs, next_critic_obs = batch["next_obs"], batch["next_critic_obs"]
        return next_critic_obs, *self.next_action(policy, next_obs)

    @torch.no_grad()
    def _target(
        self, batch: Batch, next1: torch.Tensor, next2: torch.Tensor, bonus: torch.Tensor | None
    ) -> torch.Tensor:
        """td_target from the target heads' outputs at _next's states."""
        next_out = self.value.smaller(next1, next2)
        if "next_obs1" not in batch:
            return self.value.target(batch["reward"], batch["discount"], next_out, bonus)
        reward = torch.cat([batch["reward"], batch["reward1"]])
        discount = torch.cat([batch["discount"], batch["discount1"]])
        n_step, one_step = self.value.target(reward, discount, next_out, bonus).chunk(2)
        return self.value.larger(n_step, one_step)

    def critic_loss(
        self, critic: nn.Module, target_critic: nn.Module, policy: PolicyT, batch: Batch, weights: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """The heads' loss to td_target (value.loss), importance-weighted. A critic that couples its
        batch (batch normalization in training mode) and its target see the state-actions and the
        next ones in one batch, as their statistics must be one batch's (CrossQ, FlashSAC). ->
        (loss, |δ| [B] = |min_j E[Q_j] − E[y]| for priorities, scalars to log). weights: [B]."""
        critic_obs, action = batch["critic_obs"], batch["action"]
        if getattr(critic, "couples_batch", False) and critic.training:
            next_critic_obs, next_action, bonus = self._next(batch, policy)
            both_obs, b = torch.cat([critic_obs, next_critic_obs]), critic_obs.shape[0]
            both_action = torch.cat([action, next_action])
            with torch.no_grad():
                next1, next2 = target_critic(both_obs, both_action)
                target = self._target(batch, next1[b:], next2[b:], bonus)
            both1, both2 = critic(both_obs, both_action)
            out1, out2 = both1[:b], both2[:b]
        else:
            target = self.td_target(batch, target_critic, policy)
            out1, out2 = critic(critic_obs, action)
        loss = (weights * self.value.loss(out1, out2, target)).mean()
        with torch.no_grad():
            q1 = self.q(out1)
            td_abs = (torch.min(q1, self.q(out2)) - self.value.target_mean(target)).abs()
        return loss, td_abs, {"critic/loss": loss.detach(), "critic/q": q1.mean()}

    @torch.no_grad()
    def td_error(self, critic: nn.Module, target_critic: nn.Module, policy: PolicyT, batch: Batch) -> torch.Tensor:
        """|min_j E[Q_j(s, a)] − E[y]| [B], the TD error critic_loss reports, without a loss."""
        out1, out2 = critic(batch["critic_obs"], batch["action"])
        target = self.td_target(batch, target_critic, policy)
        return (torch.min(self.q(out1), self.q(out2)) - self.value.target_mean(target)).abs()

    def min_q(self, critic: nn.Module, critic_obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """min(E[Q_1], E[Q_2])(s, a), the value a policy maximises. -> [B]."""
        out1, out2 = critic(critic_obs, action)
        return torch.min(self.q(out1), self.q(out2))

    def critic_optim_params(self, critic: nn.Module) -> ParamGroups:
        return [{"params": critic.parameters(), "lr": self.cfg.critic_lr}]
