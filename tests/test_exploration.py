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
