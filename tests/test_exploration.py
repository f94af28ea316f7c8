"""Per-env exploration noise: the Ape-X/Agent57 schedule and PQL's mixed noise."""

import pytest
import torch

from pql.algos.exploration import ape_x_noise_stds, mixed_noise_stds, noise_stds
from pql.config import PQLConfig


@pytest.mark.parametrize("num_envs", [2, 7, 4096])
@pytest.mark.parametrize("epsilon, alpha", [(0.4, 8.0), (0.1, 3.0), (0.4, 0.0)])
def test_ape_x_matches_formula(num_envs, epsilon, alpha):
    stds = ape_x_noise_stds(num_envs, epsilon, alpha, "cpu")
    assert stds.shape == (num_envs, 1) and stds.dtype == torch.float32
    last = num_envs - 1
    for env in (0, last // 2, last):
        want = epsilon ** (1 + alpha * env / last)  # ε_l = ε^(1 + α·l/(L−1))
        assert stds[env, 0].item() == pytest.approx(want, rel=1e-6)
    assert stds[0, 0].item() == pytest.approx(epsilon) and stds[-1, 0].item() == pytest.approx(epsilon ** (1 + alpha))
    if alpha > 0:
        assert (stds[1:] < stds[:-1]).all()  # each env explores less than the one before


def test_ape_x_defaults_span_the_agent57_range():
    cfg = PQLConfig(exploration="ape_x")
    stds = noise_stds(cfg, 256, "cpu")
    assert stds[0, 0].item() == pytest.approx(0.4)
    assert stds[-1, 0].item() == pytest.approx(0.4**9, rel=1e-5)
    assert torch.allclose(stds, ape_x_noise_stds(256, 0.4, 8.0, "cpu"))


@pytest.mark.parametrize("num_envs", [2, 5, 64])
def test_mixed_spreads_evenly(num_envs):
    stds = mixed_noise_stds(num_envs, 0.05, 0.8, "cpu")
    assert stds.shape == (num_envs, 1)
    assert stds[0, 0].item() == pytest.approx(0.05) and stds[-1, 0].item() == pytest.approx(0.8)
    gaps = stds[1:] - stds[:-1]
    assert torch.allclose(gaps, torch.full_like(gaps, 0.75 / (num_envs - 1)), atol=1e-6)


def test_config_picks_the_schedule():
    cfg = PQLConfig(noise_std_min=0.1, noise_std_max=0.3)
    assert torch.allclose(noise_stds(cfg, 9, "cpu"), mixed_noise_stds(9, 0.1, 0.3, "cpu"))


def test_single_env_gets_the_widest_noise():
    assert mixed_noise_stds(1, 0.05, 0.8, "cpu").item() == pytest.approx(0.8)
    assert ape_x_noise_stds(1, 0.4, 8.0, "cpu").item() == pytest.approx(0.4)


def test_held_draws_last_zeta_distributed_spans_per_env():
    """Each env keeps its draw for k steps, k ~ Zeta(μ) on 1..max, renewed per env: the spans a
    long run shows match P(k) ∝ k^−μ (chi-square), every span is one constant draw, and the envs'
    renewals are their own."""
    from scipy import stats

    from pql.algos.exploration import HeldNoise, zeta_cdf

    torch.manual_seed(0)
    num_envs, max_steps, mu = 64, 8, 2.0
    held = HeldNoise(num_envs, 2, mu, max_steps, "cpu")
    draws = torch.stack([held.draw().clone() for _ in range(400)])  # [T, N, 2]
    changed = (draws[1:] != draws[:-1]).any(-1)  # [T-1, N]: a renewal before step t+1
    assert changed.float().mean(1).std() > 0, "the envs renew at different steps"
    spans = []
    for env in range(num_envs):
        starts = [0, *(torch.nonzero(changed[:, env]).flatten() + 1).tolist()]
        spans += [b - a for a, b in zip(starts, starts[1:])]  # whole spans only (the last is cut)
    counts = torch.bincount(torch.tensor(spans), minlength=max_steps + 1)[1:]
    assert len(counts) == max_steps, "no span is longer than the maximum"
    cdf = zeta_cdf(mu, max_steps, "cpu").double()
    expected = torch.diff(cdf, prepend=torch.zeros(1, dtype=torch.float64)) * len(spans)
    assert stats.chisquare(counts.double().numpy(), expected.numpy()).pvalue > 1e-3


def test_held_noise_resumes_where_it_stood():
    from pql.algos.exploration import HeldNoise

    torch.manual_seed(1)
    a = HeldNoise(16, 3, 2.0, 16, "cpu")
    for _ in range(7):
        a.draw()
    b = HeldNoise(16, 3, 2.0, 16, "cpu")
    b.load_state_dict({k: v.clone() for k, v in a.state_dict().items()})
    state = torch.random.get_rng_state()
    want = [a.draw().clone() for _ in range(5)]
    torch.random.set_rng_state(state)
    assert all(torch.equal(w, b.draw()) for w in want)


def test_pql_explores_with_its_held_draws_scaled_by_each_env_s_std():
    from pql.algos.pql import PQL

    cfg = PQLConfig(noise_hold=16)
    cfg.net.actor_hidden = (8,)
    rules = PQL(cfg, obs_dim=4, act_dim=2)
    policy, noise = rules.make_policy(), rules.exploration_noise(6, "cpu")
    obs = torch.randn(6, 4)
    torch.manual_seed(2)
    action = rules.explore(policy, obs, noise)
    with torch.no_grad():
        want = (policy(obs) + noise.std * noise.held.eps).clamp(-1, 1)
    assert torch.equal(action, want)
