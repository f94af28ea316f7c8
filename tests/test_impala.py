"""IMPALA: with zero policy lag the learner's V-trace targets are the n-step Bellman targets
(written here from the definition, truncations bootstrapping from final_obs; the value reading
observations of its own), lag is measured, and the actor-learner agent learns InvertedPendulum in
both runtime modes."""

import pytest
import torch

from bench.learning import IMPALA
from pql.algos.impala import Impala
from pql.config import ImpalaConfig
from pql.envs import ObsLayout

OBS_DIM, ACT_DIM, T, N = 4, 2, 9, 6
LAYOUT = ObsLayout(OBS_DIM + 3, OBS_DIM, (OBS_DIM, OBS_DIM + 3))  # the value's 3 columns after the policy's


def make_impala(**overrides) -> Impala:
    cfg = ImpalaConfig(**overrides)
    cfg.net.actor_hidden = cfg.net.critic_hidden = (16,)
    return Impala(cfg, OBS_DIM, ACT_DIM, torch.device("cpu"), critic_obs_dim=LAYOUT.critic_dim)


def trajectory(impala: Impala, seed: int) -> dict:
    """A T-step trajectory whose behaviour log-probs are the learner's own (zero lag), split as the
    runner splits it."""
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, N, LAYOUT.width, generator=gen)
    terminated = torch.rand(T, N, generator=gen) < 0.15
    truncated = (torch.rand(T, N, generator=gen) < 0.15) & ~terminated
    terminated[:, 0] = False  # env 0 runs through the whole window: the bootstrap at T counts
    truncated[:, 0] = False
    truncated[T - 1, 1], terminated[T - 1, 1] = True, False  # a truncation on the last step
    traj = {
        "obs": obs,
        "final_obs": torch.randn(T, N, LAYOUT.width, generator=gen),
        "action": torch.randn(T, N, ACT_DIM, generator=gen),
        "reward": torch.randn(T, N, generator=gen),
        "terminated": terminated,
        "truncated": truncated,
    }
    # Where an env did not finish, final_obs is the next observation of the same episode.
    traj["final_obs"][:-1] = torch.where((terminated | truncated)[:-1, :, None], traj["final_obs"][:-1], obs[1:])
    traj = LAYOUT.split_rollout(traj)
    with torch.no_grad():
        log_prob, _, _, _ = impala.forward(traj)
    traj["log_prob"] = log_prob
    return traj


def bellman_targets(traj: dict, value, gamma: float) -> torch.Tensor:
    """v_s = Σ_{t=s}^{e} γ^{t−s} r_t + γ^{e+1−s} V(final_critic_obs_e), where e is the step the episode
    of s ends (or T−1) and the bootstrap is dropped when it terminated. In float64, per (s, env)."""
    rewards, term, trunc = traj["reward"].double(), traj["terminated"], traj["truncated"]
    out = torch.empty(T, N, dtype=torch.float64)
    for s in range(T):
        for i in range(N):
            total, scale = 0.0, 1.0
            for t in range(s, T):
                total += scale * float(rewards[t, i])
                scale *= gamma
                if term[t, i]:
                    break
                if trunc[t, i] or t == T - 1:
                    total += scale * float(value(traj["final_critic_obs"][t, i]))
                    break
            out[s, i] = total
    return out


@pytest.mark.parametrize("rho_bar,c_bar", [(1.0, 1.0), (2.0, 1.5)])
def test_zero_lag_targets_are_n_step_bellman_targets(rho_bar, c_bar):
    torch.manual_seed(0)
    impala = make_impala(rho_bar=rho_bar, c_bar=c_bar, lam=1.0, gamma=0.97)
    traj = trajectory(impala, seed=3)
    log_prob, _, values, final_values = impala.forward(traj)
    vs, pg_advantages = impala.targets(traj, log_prob.detach(), values.detach(), final_values)
    with torch.no_grad():
        want = bellman_targets(traj, lambda o: impala.critic(o[None])[0], 0.97)
    torch.testing.assert_close(vs.double(), want, rtol=1e-5, atol=1e-5)
    # With ratios of one, the advantage is r_s + γ_s v_{s+1} − V(x_s), the one-step TD error on v.
    assert pg_advantages.shape == (T, N) and torch.isfinite(pg_advantages).all()


def test_lagging_behaviour_changes_the_targets():
    """A behaviour policy other than π (log-ratios ≠ 0) must move v_s away from the on-policy target."""
    torch.manual_seed(0)
    impala = make_impala(rho_bar=1.0, c_bar=1.0)
    traj = trajectory(impala, seed=4)
    log_prob, _, values, final_values = impala.forward(traj)
    on_policy, _ = impala.targets(traj, log_prob.detach(), values.detach(), final_values)
    traj["log_prob"] = traj["log_prob"] + 0.5  # μ more likely than π: every ratio e^−0.5 < 1
    off_policy, _ = impala.targets(traj, log_prob.detach(), values.detach(), final_values)
    assert not torch.allclose(on_policy, off_policy)


def test_update_moves_both_networks_and_reports_scalars():
    torch.manual_seed(0)
    impala = make_impala()
    traj = trajectory(impala, seed=5)
    before = [p.clone() for p in [*impala.policy.parameters(), *impala.critic.parameters()]]
    info = impala.update(traj)
    after = [*impala.policy.parameters(), *impala.critic.parameters()]
    assert all(not torch.equal(b, a) for b, a in zip(before, after))
    assert set(info) >= {"loss/policy", "loss/baseline", "policy/entropy", "policy/rho"}
    assert float(info["policy/rho"]) == pytest.approx(1.0, abs=1e-5)  # zero lag: π/μ = 1


@pytest.mark.slow
def test_impala_solves_inverted_pendulum(make_config):
    """Sequential: the learner learns from each trajectory right after it is made. IMPALA's actor
    process is trained through in tests/test_runtime.py (resume) and tests/test_distributed.py."""
    from test_learning import solve_pendulum

    final = solve_pendulum(make_config, [*IMPALA, "runtime.mode=sequential"])
    assert final["policy/version_lag"] == 0
