"""PQL-D (PQL with algo.value=categorical): the C51 projection against a slow per-sample, per-atom
reference, the choice of the target head, the losses, and learning InvertedPendulum on the real
runtime."""

import math

import pytest
import torch

from pql.algos.pql import PQL
from pql.algos.values import categorical_projection
from pql.config import PQLDConfig
from pql.envs import ObsLayout
from pql.nets import DeterministicActor


def reference_projection(reward, discount, probs, v_min, v_max):
    """C51's projection (Bellemare et al. 2017, Algorithm 1), one sample and one atom at a time."""
    batch, n = probs.shape
    dz = (v_max - v_min) / (n - 1)
    out = torch.zeros(batch, n, dtype=torch.float64)
    for i in range(batch):
        for j in range(n):
            z = v_min + j * dz
            tz = min(max(float(reward[i]) + float(discount[i]) * z, v_min), v_max)
            b = (tz - v_min) / dz
            lo, hi = math.floor(b), math.ceil(b)
            p = float(probs[i, j])
            if lo == hi:
                out[i, lo] += p
            else:
                out[i, lo] += p * (hi - b)
                out[i, hi] += p * (b - lo)
    return out


def random_probs(batch, n, generator):
    return torch.randn(batch, n, generator=generator).mul(2).softmax(-1)


@pytest.mark.parametrize("v_min, v_max, n", [(-10.0, 10.0, 51), (-2.0, 2.0, 9), (0.0, 100.0, 11)])
def test_projection_matches_reference(v_min, v_max, n):
    g = torch.Generator().manual_seed(n)
    batch = 64
    reward = torch.randn(batch, generator=g) * (v_max - v_min) / 3
    discount = torch.rand(batch, generator=g)
    reward[:8] *= 10.0  # every target atom beyond v_max or below v_min
    discount[8:16] = 0.0  # termination: all mass on the projection of R
    discount[16:24] = 1.0
    # Atoms exactly on support points: R a multiple of Δz (exact in binary for the last two grids)
    # and γ_b ∈ {0, 1}; with γ_b = 1/2 every other atom lands on a support point.
    dz = (v_max - v_min) / (n - 1)
    reward[24:40] = dz * torch.randint(-(n // 2), n // 2 + 1, (16,), generator=g).float()
    discount[24:32] = 1.0
    discount[32:36] = 0.0
    discount[36:40] = 0.5
    reward[40] = v_max  # the last support point itself
    discount[40] = 0.0
    reward[41] = v_min
    discount[41] = 0.0
    probs = random_probs(batch, n, g)
    got = categorical_projection(reward, discount, probs, v_min, v_max)
    want = reference_projection(reward, discount, probs, v_min, v_max)
    assert got.shape == (batch, n)
    assert torch.allclose(got.double(), want, atol=1e-5)
    assert torch.allclose(got.sum(-1), torch.ones(batch), atol=1e-5)
    assert (got >= 0).all()


def test_projection_keeps_the_mean_inside_the_support():
    """Linear interpolation onto the two neighbours preserves E[R + γ_b Z] when nothing is clipped."""
    g = torch.Generator().manual_seed(3)
    n, v_min, v_max = 51, -10.0, 10.0
    support = torch.linspace(v_min, v_max, n)
    probs = torch.zeros(32, n)
    probs[:, 15:36] = torch.rand(32, 21, generator=g)  # mass on [-4, 4] only
    probs /= probs.sum(-1, keepdim=True)
    reward, discount = torch.rand(32, generator=g) * 4 - 2, torch.rand(32, generator=g)
    got = categorical_projection(reward, discount, probs, v_min, v_max)
    assert torch.allclose(got @ support, reward + discount * (probs @ support), atol=1e-4)


def make_rules(**overrides):
    cfg = PQLDConfig(num_atoms=21, v_min=-5.0, v_max=5.0, **overrides)
    cfg.net.actor_hidden = cfg.net.critic_hidden = (16,)
    return PQL(cfg, obs_dim=4, act_dim=2)


def random_batch(batch, g):
    batch_ = ObsLayout.shared(4).split(
        {
            "obs": torch.randn(batch, 4, generator=g),
            "action": torch.rand(batch, 2, generator=g) * 2 - 1,
            "reward": torch.randn(batch, generator=g),
            "next_obs": torch.randn(batch, 4, generator=g),
            "discount": torch.rand(batch, generator=g),
        }
    )
    batch_["discount"][:4] = 0.0
    return batch_


def test_target_is_projected_distribution_of_head_with_smaller_mean():
    torch.manual_seed(0)
    rules = make_rules(target_noise=0.0)
    policy, critic = rules.make_policy(), rules.make_critic()
    batch = random_batch(48, torch.Generator().manual_seed(1))
    got = rules.td_target(batch, critic, policy)
    assert got.shape == (48, 21)
    assert torch.allclose(got.sum(-1), torch.ones(48), atol=1e-5)
    support = torch.linspace(-5.0, 5.0, 21)
    with torch.no_grad():
        logits1, logits2 = critic(batch["next_obs"], policy(batch["next_obs"]))
    picked_head = {1: 0, 2: 0}
    for b in range(48):
        p1, p2 = logits1[b].softmax(-1), logits2[b].softmax(-1)
        head, p = (1, p1) if float(p1 @ support) <= float(p2 @ support) else (2, p2)
        picked_head[head] += 1
        want = reference_projection(batch["reward"][b : b + 1], batch["discount"][b : b + 1], p.unsqueeze(0), -5.0, 5.0)
        assert torch.allclose(got[b].double(), want[0], atol=1e-5)
    assert picked_head[1] > 0 and picked_head[2] > 0  # the test exercises both branches


def test_greedy_target_picks_the_distribution_with_the_larger_mean():
    """algo.greedy_nstep: per sample, the n-step or the one-step target distribution, whichever
    has the larger mean."""
    torch.manual_seed(3)
    rules = make_rules(target_noise=0.0)
    policy, critic = rules.make_policy(), rules.make_critic()
    g = torch.Generator().manual_seed(4)
    n_step, one_step = random_batch(48, g), random_batch(48, g)
    batch = ObsLayout.shared(4).split(
        {
            **n_step,
            "reward1": one_step["reward"],
            "next_obs1": one_step["next_obs"],
            "discount1": one_step["discount"],
        }
    )
    got = rules.td_target(batch, critic, policy)
    want_n, want_1 = rules.td_target(n_step, critic, policy), rules.td_target(one_step, critic, policy)
    support = torch.linspace(-5.0, 5.0, 21)
    larger_n = (want_n @ support >= want_1 @ support).unsqueeze(-1)
    assert torch.allclose(got, torch.where(larger_n, want_n, want_1), atol=1e-6)
    assert 0 < int(larger_n.sum()) < 48  # both branches are exercised


def test_critic_loss_is_weighted_cross_entropy_of_both_heads():
    torch.manual_seed(2)
    rules = make_rules()
    policy, critic, target_critic = rules.make_policy(), rules.make_critic(), rules.make_critic()
    batch = random_batch(32, torch.Generator().manual_seed(3))
    weights = torch.rand(32)
    torch.manual_seed(4)
    loss, td_abs, info = rules.critic_loss(critic, target_critic, policy, batch, weights)
    torch.manual_seed(4)
    target = rules.td_target(batch, target_critic, policy)
    logits1, logits2 = critic(batch["obs"], batch["action"])
    support = torch.linspace(-5.0, 5.0, 21)
    ce = [-(target * logits.log_softmax(-1)).sum(-1) for logits in (logits1, logits2)]
    assert torch.allclose(loss, (weights * (ce[0] + ce[1])).mean(), atol=1e-6)
    q = torch.min(logits1.softmax(-1) @ support, logits2.softmax(-1) @ support)
    assert td_abs.shape == (32,) and not td_abs.requires_grad
    assert torch.allclose(td_abs, (q - target @ support).abs().detach(), atol=1e-5)
    loss.backward()
    assert all(p.grad is not None for p in critic.parameters())


def test_policy_maximises_smaller_expected_q():
    torch.manual_seed(5)
    rules = make_rules()
    policy, critic = rules.make_policy(), rules.make_critic().requires_grad_(False)
    obs = torch.randn(16, 4)
    loss, _ = rules.policy_loss(policy, critic, obs, obs)
    support = torch.linspace(-5.0, 5.0, 21)
    logits1, logits2 = critic(obs, policy(obs))
    assert torch.allclose(loss, -torch.min(logits1.softmax(-1) @ support, logits2.softmax(-1) @ support).mean())
    loss.backward()
    assert all(p.grad is not None for p in policy.parameters())
    assert isinstance(policy, DeterministicActor)


@pytest.mark.slow
def test_pql_d_solves_inverted_pendulum(make_config):
    from test_learning import solve_pendulum

    # Returns per step are 1, so Q ∈ [0, 100] at γ = 0.99; the support is the task's value range,
    # [-10, 110] (cfg/task/InvertedPendulum.yaml), which covers it with room.
    solve_pendulum(make_config, ["algo=pql_d"], max_env_steps=40_000)
