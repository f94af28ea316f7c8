"""Policies. Every policy acts in the normalised action box [-1, 1]^act_dim; the runtime maps
that box onto the task's bounds, so replay, targets and losses never see task units."""

from __future__ import annotations

import math

import torch
from torch import nn

from pql.nets.kinds import policy_net
from pql.nets.mlp import mlp


class DeterministicActor(nn.Module):
    """PQL/TD3 policy a = tanh(f(s)), f a network of `kind` (pql.nets.kinds). obs: [B, obs_dim] ->
    action: [B, act_dim] in [-1, 1]."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: tuple[int, ...],
        *,
        activation: str,
        kind: str = "mlp",
        expansion: int = 4,
    ):
        super().__init__()
        self.net = policy_net(kind, obs_dim, hidden, act_dim, activation=activation, expansion=expansion)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs))


class SquashedGaussianActor(nn.Module):
    """SAC policy: u ~ N(μ(s), σ(s)), a = tanh(u), (μ, log σ) from a network of `kind`
    (pql.nets.kinds). Holds SAC's temperature as a parameter so the weight sync that carries the
    policy also carries α to the V-learner."""

    LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: tuple[int, ...],
        init_alpha: float = 0.1,
        *,
        activation: str,
        kind: str = "mlp",
        expansion: int = 4,
    ):
        super().__init__()
        self.net = policy_net(kind, obs_dim, hidden, 2 * act_dim, activation=activation, expansion=expansion)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_alpha)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic (mean) action, used for evaluation."""
        mean, _ = self.net(obs).chunk(2, dim=-1)
        return torch.tanh(mean)

    def sample(self, obs: torch.Tensor, eps: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised sample u = μ + σ·ε and its log-probability, ε ~ N(0, I) unless given (an
        actor's held noise). -> action [B, act_dim], log_prob [B]."""
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        log_std = log_std.clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)
        u = mean + log_std.exp() * (torch.randn_like(mean) if eps is None else eps)
        action = torch.tanh(u)
        # log π(a|s) = log N(u; μ, σ) − Σ log(1 − tanh²u), the tanh change of variables written
        # in its numerically stable form 2(log 2 − u − softplus(−2u)).
        log_prob = (-0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob = log_prob - (2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        return action, log_prob


class GaussianActor(nn.Module):
    """On-policy Gaussian policy (PPO, IMPALA) with a state-independent log std. Actions are
    sampled unsquashed and clipped to [-1, 1] by the runtime; log-probs are of the raw sample."""

    def __init__(
        self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], init_log_std: float = -0.5, *, activation: str
    ):
        super().__init__()
        self.net = mlp(obs_dim, hidden, act_dim, activation=activation)
        self.log_std = nn.Parameter(torch.full((act_dim,), float(init_log_std)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)

    def distribution(self, obs: torch.Tensor) -> torch.distributions.Normal:
        return torch.distributions.Normal(self.net(obs), self.log_std.exp().expand(obs.shape[0], -1))
