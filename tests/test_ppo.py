"""PPO: GAE, the clipped surrogate and the clipped value loss against slow references written
here from the definitions, and learning InvertedPendulum."""

import pytest
import torch

from pql.algos.ppo import PPO, clipped_surrogate_loss, clipped_value_loss, gae
from pql.config import PPOConfig
from pql.envs import ObsLayout


def reference_gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """Â_t = Σ_{k≥0} (γλ)^k δ_{t+k} within the episode of t (Schulman et al. 2016, eq. 16), with
    δ_t = r_t + γ V(s_{t+1}) − V(s_t), V(s_{t+1}) = 0 after a termination. Per env, in float64."""
    T, N = rewards.shape
    adv = torch.zeros(T, N, dtype=torch.float64)
    for i in range(N):
        for t in range(T):
            total, scale = 0.0, 1.0
            for k in range(t, T):
                bootstrap = 0.0 if terminated[k, i] else float(next_values[k, i])
                total += scale * (float(rewards[k, i]) + gamma * bootstrap - float(values[k, i]))
                if terminated[k, i] or truncated[k, i]:
                    break
                scale *= gamma * lam
            adv[t, i] = total
    return adv


def test_gae_matches_reference():
    gen = torch.Generator().manual_seed(0)
    T, N = 12, 5
    rewards, values, next_values = (torch.randn(T, N, generator=gen) for _ in range(3))
    terminated = torch.rand(T, N, generator=gen) < 0.15
    truncated = (torch.rand(T, N, generator=gen) < 0.15) & ~terminated
    advantages, returns = gae(rewards, values, next_values, terminated, truncated, 0.97, 0.9)
    want = reference_gae(rewards, values, next_values, terminated, truncated, 0.97, 0.9)
    torch.testing.assert_close(advantages.double(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(returns, advantages + values)


def test_clipped_surrogate_matches_reference():
    gen = torch.Generator().manual_seed(1)
    old = torch.randn(64, generator=gen)
    new = old + 0.5 * torch.randn(64, generator=gen)
    advantages = torch.randn(64, generator=gen)
    loss, ratio = clipped_surrogate_loss(new, old, advantages, clip=0.2)
    want = 0.0
    for n, o, a in zip(new.tolist(), old.tolist(), advantages.tolist()):
        r = torch.tensor(n - o).exp().item()
        want += min(r * a, min(max(r, 0.8), 1.2) * a)  # L^CLIP, eq. 7
    assert loss.item() == pytest.approx(-want / 64, rel=1e-5)
    assert torch.allclose(ratio, (new - old).exp())


def test_clipped_value_loss_matches_reference():
    gen = torch.Generator().manual_seed(2)
    values, old_values, returns = (torch.randn(64, generator=gen) for _ in range(3))
    loss = clipped_value_loss(values, old_values, returns, value_clip=0.2)
    want = (
        sum(
            max((v - r) ** 2, (o + min(max(v - o, -0.2), 0.2) - r) ** 2)
            for v, o, r in zip(values.tolist(), old_values.tolist(), returns.tolist())
        )
        / 64
    )
    assert loss.item() == pytest.approx(want, rel=1e-5)


def test_update_improves_the_surrogate_on_its_rollout():
    """An update on a rollout with one clearly better action raises that action's probability."""
    torch.manual_seed(0)
    cfg = PPOConfig(epochs=4, minibatches=2, lr=1e-2)
    cfg.net.actor_hidden = cfg.net.critic_hidden = (16,)
    ppo = PPO(cfg, obs_dim=3, act_dim=1, device=torch.device("cpu"))
    T, N = 8, 16
    obs = torch.randn(T, N, 3)
    with torch.no_grad():
        dist = ppo.policy.distribution(obs.flatten(0, 1))
        action = dist.sample()
        log_prob = dist.log_prob(action).sum(-1)
    reward = action.squeeze(-1).view(T, N)  # larger actions are better
    rollout = ObsLayout.shared(3).split_rollout(
        {
            "obs": obs,
            "final_obs": torch.randn(T, N, 3),
            "action": action.view(T, N, 1),
            "log_prob": log_prob.view(T, N),
            "reward": reward,
            "terminated": torch.zeros(T, N, dtype=torch.bool),
            "truncated": torch.zeros(T, N, dtype=torch.bool),
        }
    )
    mean_before = ppo.policy(obs.flatten(0, 1)).mean()
    info = ppo.update(rollout)
    assert ppo.policy(obs.flatten(0, 1)).mean() > mean_before
    assert set(info) >= {"loss/policy", "loss/value", "policy/approx_kl", "policy/clip_fraction"}


@pytest.mark.slow
def test_ppo_solves_inverted_pendulum(make_config):
    from test_learning import solve_pendulum

    solve_pendulum(make_config, ["algo=ppo"])
