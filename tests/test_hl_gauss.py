"""The HL-Gauss critic (algo.value=hl_gauss): its histogram against a slow per-sample, per-atom
reference, targets on an atom, between atoms and outside the support; the target of the head with
the smaller value; and learning InvertedPendulum on the real runtime (its support with return
scaling is tests/test_config.py's, beside the categorical critic's)."""

import math

import pytest
import torch

from pql.algos.pql import PQL
from pql.algos.values import HL_GAUSS_SIGMA_BINS, HLGaussValue, hl_gauss_histogram
from pql.config import PQLConfig
from pql.envs import ObsLayout


def reference_histogram(target, v_min, v_max, n):
    """The mass of N(clip(y), σ²) in each atom's bin, renormalised over the bins, in float64."""
    dz = (v_max - v_min) / (n - 1)
    sigma = HL_GAUSS_SIGMA_BINS * dz
    out = torch.zeros(len(target), n, dtype=torch.float64)
    for i, y in enumerate(target.tolist()):
        y = min(max(y, v_min), v_max)

        def cdf(x, y=y):
            return 0.5 * (1 + math.erf((x - y) / (sigma * math.sqrt(2))))

        total = cdf(v_max + dz / 2) - cdf(v_min - dz / 2)
        for j in range(n):
            z = v_min + j * dz
            out[i, j] = (cdf(z + dz / 2) - cdf(z - dz / 2)) / total
    return out


@pytest.mark.parametrize("v_min, v_max, n", [(-5.0, 5.0, 101), (-2.0, 2.0, 9), (0.0, 100.0, 11)])
def test_histogram_matches_reference(v_min, v_max, n):
    g = torch.Generator().manual_seed(n)
    dz = (v_max - v_min) / (n - 1)
    target = v_min + torch.rand(40, generator=g) * (v_max - v_min)
    target[:4] = torch.tensor([v_min - 3 * dz, v_max + 50.0, v_min, v_max])  # outside, and on the edges
    target[4:8] = v_min + dz * torch.tensor([1.0, 2.0, float(n // 2), float(n - 2)])  # on atoms
    target[8:12] = v_min + dz * torch.tensor([0.5, 1.5, n / 2 - 0.5, n - 1.5])  # midway between two
    got = hl_gauss_histogram(target, v_min, v_max, n)
    assert got.shape == (40, n)
    assert torch.allclose(got.double(), reference_histogram(target, v_min, v_max, n), atol=2e-6)
    assert torch.allclose(got.sum(-1), torch.ones(40), atol=1e-5)


def test_a_target_outside_the_support_is_the_edge_s_histogram():
    got = hl_gauss_histogram(torch.tensor([-9.0, -5.0, 5.0, 7.5]), -5.0, 5.0, 101)
    assert torch.equal(got[0], got[1]) and torch.equal(got[2], got[3])
    assert got[1, 0] > 0.4 and got[1, 0] == got[1].max()  # the mass of the edge's bin, a half-normal beside


def test_a_target_inside_the_support_keeps_its_value_between_atoms():
    """What C51's projection loses inside one bin, the histogram keeps: its mean is y itself."""
    target = torch.linspace(-4.5, 4.5, 37) + 0.0137
    got = hl_gauss_histogram(target, -5.0, 5.0, 101)
    assert torch.allclose(got @ torch.linspace(-5.0, 5.0, 101), target, atol=1e-4)
    # And a change of a tenth of a bin moves the histogram on several atoms, not on two.
    moved = (hl_gauss_histogram(target + 0.01, -5.0, 5.0, 101) - got).abs() > 1e-4
    assert (moved.sum(-1) >= 4).all()


def make_rules(**overrides):
    cfg = PQLConfig(value="hl_gauss", num_atoms=21, v_min=-5.0, v_max=5.0, target_noise=0.0, **overrides)
    cfg.net.actor_hidden = cfg.net.critic_hidden = (16,)
    return PQL(cfg, obs_dim=4, act_dim=2)


def test_target_is_the_histogram_of_the_smaller_head_s_scalar_target():
    torch.manual_seed(0)
    rules = make_rules()
    assert isinstance(rules.value, HLGaussValue)
    policy, critic = rules.make_policy(), rules.make_critic()
    g = torch.Generator().manual_seed(1)
    batch = ObsLayout.shared(4).split(
        {
            "obs": torch.randn(48, 4, generator=g),
            "action": torch.rand(48, 2, generator=g) * 2 - 1,
            "reward": torch.randn(48, generator=g) * 3,
            "next_obs": torch.randn(48, 4, generator=g),
            "discount": torch.rand(48, generator=g),
        }
    )
    batch["discount"][:4] = 0.0
    got = rules.td_target(batch, critic, policy)
    support = torch.linspace(-5.0, 5.0, 21)
    with torch.no_grad():
        logits1, logits2 = critic(batch["next_obs"], policy(batch["next_obs"]))
    q_next = torch.min(logits1.softmax(-1) @ support, logits2.softmax(-1) @ support)
    y = batch["reward"] + batch["discount"] * q_next
    assert torch.allclose(got.double(), reference_histogram(y, -5.0, 5.0, 21), atol=2e-6)
    assert (y.abs() > 5).any()  # targets beyond the support are exercised


@pytest.mark.slow
def test_hl_gauss_solves_inverted_pendulum(make_config):
    from test_learning import solve_pendulum

    # The task's value range, [-10, 110], as PQL-D's test: Q ∈ [0, 100] at γ = 0.99.
    solve_pendulum(make_config, ["algo=pql", "algo.value=hl_gauss"], max_env_steps=40_000)
