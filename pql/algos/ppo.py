"""PPO's update rules (Schulman et al., 2017) with generalised advantage estimation (Schulman et
al., 2016): the on-policy baseline.

The runner (pql/runtime/on_policy/ppo_runner.py) fills a rollout of T steps from N envs with the Gaussian
policy; `PPO.update` turns it into advantages and runs `epochs` passes of `minibatches` steps of
the clipped objective over it. Observations given here are normalised; actions are the raw
Gaussian samples (the runtime clips what it sends to the envs), so log-probabilities are exact.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from pql.algos.common import Checkpointable, adam
from pql.algos.rules import OnPolicyRules
from pql.nets import GaussianActor, ValueNet


def make_gaussian_policy(cfg, obs_dim: int, act_dim: int) -> GaussianActor:
    """The on-policy policy π (cfg: PPOConfig or ImpalaConfig)."""
    return GaussianActor(obs_dim, act_dim, cfg.net.actor_hidden, cfg.init_log_std, activation=cfg.net.activation)


def log_prob_and_entropy(policy: GaussianActor, obs: torch.Tensor, action: torch.Tensor):
    """log π(a|s) and H(π(·|s)) of a diagonal Gaussian. obs [B, obs_dim], action [B, act_dim] -> ([B], [B])."""
    dist = policy.distribution(obs)
    return dist.log_prob(action).sum(-1), dist.entropy().sum(-1)


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over a rollout; every input is [T, N].

    next_values[t] = V(s_{t+1}) of the episode step t belongs to, i.e. V(info["final_obs"]): where
    the episode was truncated at t it is the bootstrap, where it terminated it is not used.
    -> (advantages Â [T, N], value targets Â + V [T, N]).
    """
    not_terminated = 1.0 - terminated.float()
    not_done = 1.0 - (terminated | truncated).float()
    # TD residual δ_t = r_t + γ(1 − term_t) V(s_{t+1}) − V(s_t)
    deltas = rewards + gamma * not_terminated * next_values - values
    advantages = torch.empty_like(values)
    running = torch.zeros_like(values[0])
    for t in reversed(range(values.shape[0])):
        # Â_t = δ_t + γλ(1 − done_t) Â_{t+1}: the λ-return stops where the episode ended
        running = deltas[t] + gamma * lam * not_done[t] * running
        advantages[t] = running
    return advantages, advantages + values


def clipped_surrogate_loss(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, clip: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """−L^CLIP (Schulman et al., 2017, eq. 7), a loss to minimise. All inputs [B].
    -> (loss, ratio [B] detached)."""
    ratio = (log_prob - old_log_prob).exp()  # r_t(θ) = π_θ(a_t|s_t) / π_θold(a_t|s_t)
    surrogate = torch.min(ratio * advantages, ratio.clamp(1.0 - clip, 1.0 + clip) * advantages)
    return -surrogate.mean(), ratio.detach()


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, value_clip: float
) -> torch.Tensor:
    """PPO's value clipping: mean of max((V − R)², (V_old + clip(V − V_old, −ε_V, ε_V) − R)²). All [B]."""
    clipped = old_values + (values - old_values).clamp(-value_clip, value_clip)
    return torch.max((values - returns).pow(2), (clipped - returns).pow(2)).mean()


class GaussianActorCritic(Checkpointable, OnPolicyRules):
    """A Gaussian policy π, a value function V and one Adam over both: what PPO and IMPALA
    learn (cfg: PPOConfig or ImpalaConfig), each with an `update` of its own (OnPolicyRules).
    average_gradients(params), called between the backward pass and the clipping, averages the
    gradients over data-parallel replicas (by default there is one: nothing to do). V reads
    critic_obs_dim observations (None: the policy's obs_dim)."""

    state_attrs = ("policy", "critic", "optim")

    def __init__(
        self,
        cfg: Any,
        obs_dim: int,
        act_dim: int,
        device: torch.device,
        average_gradients: Callable[[list[torch.Tensor]], None] = lambda params: None,
        critic_obs_dim: int | None = None,
    ):
        self.cfg, self.average_gradients = cfg, average_gradients
        self.policy = make_gaussian_policy(cfg, obs_dim, act_dim).to(device)
        self.critic: nn.Module = ValueNet(
            obs_dim if critic_obs_dim is None else critic_obs_dim,
            cfg.net.critic_hidden,
            cfg.net.critic_layer_norm,
            activation=cfg.net.activation,
        ).to(device)
        self.params: list[torch.Tensor] = [*self.policy.parameters(), *self.critic.parameters()]
        self.optim = adam(self.params, cfg.lr)

    def optimise(self, loss: torch.Tensor) -> None:
        """One step of Adam on `loss`, its gradient clipped to a norm of cfg.max_grad_norm."""
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        self.average_gradients(self.params)
        nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
        self.optim.step()


class PPO(GaussianActorCritic):
    """PPO's update on rollouts (cfg: PPOConfig; the contract: pql.algos.rules.OnPolicyRules)."""

    @torch.no_grad()
    def advantages(self, rollout: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> (advantages [T, N], value targets [T, N], V(s_t) [T, N]) of a rollout (see `update`)."""
        T, N = rollout["reward"].shape
        values = self.critic(rollout["critic_obs"].flatten(0, 1)).view(T, N)
        next_values = self.critic(rollout["final_critic_obs"].flatten(0, 1)).view(T, N)
        advantages, returns = gae(
            rollout["reward"],
            values,
            next_values,
            rollout["terminated"],
            rollout["truncated"],
            self.cfg.gamma,
            self.cfg.gae_lambda,
        )
        return advantages, returns, values

    def update(self, rollout: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One PPO iteration on a rollout (normalised observations): obs [T, N, obs_dim], the
        critic's critic_obs and final_critic_obs [T, N, critic_obs_dim] (of info["final_obs"]),
        action [T, N, act_dim], log_prob [T, N] (behaviour π_θold), reward [T, N],
        terminated [T, N] bool, truncated [T, N] bool.
        -> scalars to log, averaged over the minibatches (0-d tensors: reading one is a host sync)."""
        cfg = self.cfg
        advantages, returns, values = self.advantages(rollout)
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        batch = {
            "obs": rollout["obs"].flatten(0, 1),
            "critic_obs": rollout["critic_obs"].flatten(0, 1),
            "action": rollout["action"].flatten(0, 1),
            "log_prob": rollout["log_prob"].flatten(0, 1),
            "advantage": advantages.flatten(),
            "return": returns.flatten(),
            "value": values.flatten(),
        }
        size = batch["advantage"].shape[0]
        stats = torch.zeros(5, device=advantages.device)
        for _ in range(cfg.epochs):
            for idx in torch.randperm(size, device=advantages.device).tensor_split(cfg.minibatches):
                mb = {k: v[idx] for k, v in batch.items()}
                log_prob, entropy = log_prob_and_entropy(self.policy, mb["obs"], mb["action"])
                policy_loss, ratio = clipped_surrogate_loss(log_prob, mb["log_prob"], mb["advantage"], cfg.clip)
                value_loss = clipped_value_loss(
                    self.critic(mb["critic_obs"]), mb["value"], mb["return"], cfg.value_clip
                )
                loss = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy.mean()
                self.optimise(loss)
                stats += torch.stack(
                    [
                        policy_loss.detach(),
                        value_loss.detach(),
                        entropy.detach().mean(),
                        ((ratio - 1.0) - ratio.log()).mean(),  # Schulman's k3 estimate of KL
                        ((ratio - 1.0).abs() > cfg.clip).float().mean(),
                    ]
                )
        stats /= cfg.epochs * cfg.minibatches
        return {
            "loss/policy": stats[0],
            "loss/value": stats[1],
            "policy/entropy": stats[2],
            "policy/approx_kl": stats[3],
            "policy/clip_fraction": stats[4],
            "policy/std": self.policy.log_std.detach().exp().mean(),
        }
