"""IMPALA's learner update (Espeholt et al., 2018): V-trace-corrected actor-critic with a
Gaussian policy for continuous actions.

The actor rolls out T-step trajectories with a lagging copy μ of the policy π and stores log μ(a|x);
the learner corrects for the lag with V-trace (pql/kernels/vtrace.py). Observations given here
are normalised as the actor saw them, so π and μ are compared on the same inputs.
"""

from __future__ import annotations

import torch

from pql.algos.ppo import GaussianActorCritic, log_prob_and_entropy
from pql.kernels.vtrace import vtrace


class Impala(GaussianActorCritic):
    """The learner update; V (`critic`) is IMPALA's baseline (cfg: ImpalaConfig; the contract:
    pql.algos.rules.OnPolicyRules)."""

    def forward(self, traj: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """π and V on a trajectory (see `update`). -> (log π(a_s|x_s), H(π(·|x_s)), V(x_s), each [T, N]
        with gradients, and V(final_critic_obs_s) [T, N] without)."""
        T, N = traj["reward"].shape
        log_prob, entropy = log_prob_and_entropy(self.policy, traj["obs"].flatten(0, 1), traj["action"].flatten(0, 1))
        values = self.critic(traj["critic_obs"].flatten(0, 1))
        with torch.no_grad():
            final_values = self.critic(traj["final_critic_obs"].flatten(0, 1))
        return log_prob.view(T, N), entropy.view(T, N), values.view(T, N), final_values.view(T, N)

    @torch.no_grad()
    def targets(
        self, traj: dict[str, torch.Tensor], log_prob: torch.Tensor, values: torch.Tensor, final_values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """V-trace targets v_s and policy-gradient advantages ρ_s(r_s + γ v_{s+1} − V(x_s)), each [T, N].
        log_prob: log π(a_s|x_s), values: V(x_s), final_values: V(final_obs_s); all [T, N]."""
        cfg = self.cfg
        terminated, truncated = traj["terminated"].float(), traj["truncated"].float()
        # A truncated step is no end of the MDP: its reward carries γ·V(final_obs), the value of the
        # state it was cut at, and the trace stops there as at a termination (whose value is 0).
        rewards = traj["reward"] + cfg.gamma * truncated * final_values
        discounts = cfg.gamma * (1.0 - terminated - truncated)
        log_rhos = log_prob - traj["log_prob"]  # log π(a|x) − log μ(a|x)
        return vtrace(
            log_rhos, discounts, rewards, values, final_values[-1], rho_bar=cfg.rho_bar, c_bar=cfg.c_bar, lam=cfg.lam
        )

    def update(self, traj: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One learner step on a batch of trajectories (normalised observations): obs [T, N, obs_dim],
        the critic's critic_obs and final_critic_obs [T, N, critic_obs_dim] (of info["final_obs"]),
        action [T, N, act_dim], log_prob [T, N] (behaviour μ), reward [T, N],
        terminated [T, N] bool, truncated [T, N] bool.
        -> scalars to log (0-d tensors: reading one is a host sync)."""
        cfg = self.cfg
        log_prob, entropy, values, final_values = self.forward(traj)
        vs, pg_advantages = self.targets(traj, log_prob.detach(), values.detach(), final_values)
        # Espeholt et al. (2018) §4.2: policy gradient ρ_s ∇log π(a_s|x_s)(r_s + γ v_{s+1} − V(x_s)),
        # baseline loss ½(v_s − V(x_s))², and an entropy bonus.
        policy_loss = -(pg_advantages * log_prob).mean()
        baseline_loss = 0.5 * (vs - values).pow(2).mean()
        loss = policy_loss + cfg.baseline_coef * baseline_loss - cfg.entropy_coef * entropy.mean()
        self.optimise(loss)
        return {
            "loss/policy": policy_loss.detach(),
            "loss/baseline": baseline_loss.detach(),
            "policy/entropy": entropy.detach().mean(),
            "policy/std": self.policy.log_std.detach().exp().mean(),
            "policy/rho": (log_prob.detach() - traj["log_prob"]).exp().mean(),
        }
