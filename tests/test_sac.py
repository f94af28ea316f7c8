"""SAC: the soft n-step target and the losses against slow references written here from the
definitions, α reaching the V-learner through the policy sync, exploration through every
actor precision, and learning InvertedPendulum on the real runtime."""

import math

import pytest
import torch

from pql.algos.sac import SAC
from pql.config import SACConfig
from pql.envs import ObsLayout
from pql.runtime.off_policy.precision import InferenceCopy
from pql.runtime.weight_sync import SharedWeights, WeightsReader

OBS_DIM, ACT_DIM = 5, 3


def make_rules(**overrides):
    cfg = SACConfig(**overrides)
    cfg.net.actor_hidden = cfg.net.critic_hidden = (16,)
    return SAC(cfg, obs_dim=OBS_DIM, act_dim=ACT_DIM)


def reference_sample(policy, obs, eps):
    """One reparameterised sample and log π(a|s) = Σ_k log N(u_k; μ_k, σ_k) − log(1 − tanh² u_k)."""
    mean, log_std = policy.net(obs.unsqueeze(0))[0].chunk(2)
    std = log_std.clamp(-5.0, 2.0).exp()
    u = mean + std * eps
    a = torch.tanh(u)
    log_prob = sum(
        -0.5 * float((u[k] - mean[k]) / std[k]) ** 2
        - math.log(float(std[k]))
        - 0.5 * math.log(2 * math.pi)
        - math.log(1 - math.tanh(float(u[k])) ** 2)
        for k in range(len(u))
    )
    return a, log_prob


def test_soft_nstep_target_matches_reference():
    torch.manual_seed(0)
    gamma, nstep = 0.9, 3
    rules = make_rules(init_alpha=0.3, gamma=gamma, nstep=nstep)
    policy, critic = rules.make_policy(), rules.make_critic()
    batch = ObsLayout.shared(OBS_DIM).split({"next_obs": torch.randn(24, OBS_DIM), "reward": torch.randn(24)})
    # γ_b = γ^m for a fold of m ≤ n steps (m < n after a truncation), 0 after a termination.
    batch["discount"] = torch.tensor([gamma**nstep, gamma**2, gamma, 0.0] * 6)
    torch.manual_seed(7)
    got = rules.td_target(batch, critic, policy)
    torch.manual_seed(7)
    eps = torch.randn(24, ACT_DIM)
    with torch.no_grad():
        for b in range(24):
            s = batch["next_obs"][b]
            a, log_prob = reference_sample(policy, s, eps[b])
            x = torch.cat([s, a]).unsqueeze(0)
            soft_v = min(float(critic.q1(x)), float(critic.q2(x))) - 0.3 * log_prob
            want = float(batch["reward"][b]) + float(batch["discount"][b]) * soft_v
            assert abs(float(got[b]) - want) < 1e-4, (b, float(got[b]), want)


def test_greedy_soft_target_is_the_larger_of_the_two():
    """algo.greedy_nstep: the larger of the soft n-step and one-step targets, each bootstrap action
    sampled once (the n-step states' noise first, then the one-step states')."""
    torch.manual_seed(1)
    rules = make_rules(init_alpha=0.3)
    policy, critic = rules.make_policy(), rules.make_critic()
    batch = ObsLayout.shared(OBS_DIM).split(
        {
            "next_obs": torch.randn(24, OBS_DIM),
            "reward": torch.randn(24),
            "discount": torch.rand(24),
            "next_obs1": torch.randn(24, OBS_DIM),
            "reward1": torch.randn(24),
            "discount1": torch.rand(24),
        }
    )
    torch.manual_seed(7)
    got = rules.td_target(batch, critic, policy)
    torch.manual_seed(7)
    eps = torch.randn(48, ACT_DIM)
    picked_one_step = 0
    with torch.no_grad():

        def soft_value(s, e):
            a, log_prob = reference_sample(policy, s, e)
            x = torch.cat([s, a]).unsqueeze(0)
            return min(float(critic.q1(x)), float(critic.q2(x))) - 0.3 * log_prob

        for b in range(24):
            n_step = float(batch["reward"][b]) + float(batch["discount"][b]) * soft_value(batch["next_obs"][b], eps[b])
            one_step = float(batch["reward1"][b]) + float(batch["discount1"][b]) * soft_value(
                batch["next_obs1"][b], eps[24 + b]
            )
            assert abs(float(got[b]) - max(n_step, one_step)) < 1e-4, (b, float(got[b]), n_step, one_step)
            picked_one_step += one_step > n_step
    assert 0 < picked_one_step < 24


def test_policy_and_temperature_losses_match_reference():
    torch.manual_seed(1)
    rules = make_rules(init_alpha=0.2)
    policy, critic = rules.make_policy(), rules.make_critic().requires_grad_(False)
    obs = torch.randn(16, OBS_DIM)
    torch.manual_seed(3)
    loss, info = rules.policy_loss(policy, critic, obs, obs)
    torch.manual_seed(3)
    eps = torch.randn(16, ACT_DIM)
    actor_terms, log_probs = [], []
    with torch.no_grad():
        for b in range(16):
            a, log_prob = reference_sample(policy, obs[b], eps[b])
            x = torch.cat([obs[b], a]).unsqueeze(0)
            actor_terms.append(0.2 * log_prob - min(float(critic.q1(x)), float(critic.q2(x))))
            log_probs.append(log_prob)
    assert abs(float(info["policy/loss"]) - sum(actor_terms) / 16) < 1e-4
    assert abs(float(info["policy/entropy"]) + sum(log_probs) / 16) < 1e-4
    loss.backward()
    # ∂J(α)/∂log α = −α · mean(log π + H̄) with H̄ = −act_dim; J_π adds nothing (α held fixed).
    want_alpha_grad = -0.2 * (sum(log_probs) / 16 - ACT_DIM)
    assert abs(float(policy.log_alpha.grad) - want_alpha_grad) < 1e-4
    assert all(p.grad is not None for p in policy.net.parameters())


def test_temperature_moves_toward_target_entropy():
    """A gradient step on J(α) lowers α while the policy's entropy is above H̄ = −act_dim and
    raises it while below (∂J/∂log α = α·(H − H̄))."""
    torch.manual_seed(2)
    rules = make_rules(init_alpha=0.5)
    policy, critic = rules.make_policy(), rules.make_critic().requires_grad_(False)
    obs = torch.randn(64, OBS_DIM)
    for log_std, alpha_falls in ((0.0, True), (-5.0, False)):
        with torch.no_grad():
            policy.net[-1].weight[ACT_DIM:].zero_()
            policy.net[-1].bias[ACT_DIM:].fill_(log_std)
        policy.zero_grad()
        rules.policy_loss(policy, critic, obs, obs)[0].backward()
        assert (float(policy.log_alpha.grad) > 0) == alpha_falls


def test_optimiser_groups_cover_every_parameter_once():
    rules = make_rules(actor_lr=1e-3, alpha_lr=5e-4)
    policy = rules.make_policy()
    groups = rules.policy_optim_params(policy)
    params = [p for g in groups for p in g["params"]]
    assert len(params) == len(list(policy.parameters()))
    assert {id(p) for p in params} == {id(p) for p in policy.parameters()}
    assert [g["lr"] for g in groups] == [1e-3, 5e-4] and groups[1]["params"] == [policy.log_alpha]


def test_v_learner_reads_alpha_from_the_synced_policy():
    rules = make_rules(init_alpha=0.1)
    p_learner_policy, v_learner_policy = rules.make_policy(), rules.make_policy()
    with torch.no_grad():
        p_learner_policy.log_alpha.fill_(math.log(0.37))
    shared = SharedWeights(p_learner_policy, "cpu")
    shared.publish(p_learner_policy)
    WeightsReader(shared, v_learner_policy).pull()
    assert abs(float(v_learner_policy.log_alpha.detach().exp()) - 0.37) < 1e-6


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_explore_samples_the_policy_at_every_actor_precision(precision):
    torch.manual_seed(4)
    rules = make_rules()
    acting = InferenceCopy(rules.make_policy(), precision).module
    obs = torch.randn(32, OBS_DIM)
    noise = rules.exploration_noise(32, torch.device("cpu"))
    assert noise.std is None  # no per-env noise schedule: the policy's own σ
    torch.manual_seed(5)
    a = rules.explore(acting, obs, noise)
    assert a.shape == (32, ACT_DIM) and a.dtype == torch.float32
    assert (a.abs() <= 1).all()
    assert not torch.equal(a, rules.explore(acting, obs, noise))  # it samples


def test_held_noise_samples_the_policy_with_the_held_draw():
    torch.manual_seed(6)
    rules = make_rules(noise_hold=16)
    policy = rules.make_policy()
    noise = rules.exploration_noise(32, torch.device("cpu"))
    obs = torch.randn(32, OBS_DIM)
    action = rules.explore(policy, obs, noise)
    with torch.no_grad():
        mean, log_std = policy.net(obs).chunk(2, dim=-1)
        want = torch.tanh(mean + log_std.clamp(-5.0, 2.0).exp() * noise.held.eps)
    assert torch.allclose(action, want, atol=1e-6)


def test_the_target_entropy_is_minus_act_dim_or_a_fixed_std_gaussian_s():
    assert make_rules().target_entropy == -ACT_DIM
    # FlashSAC's σ = 0.15: act_dim/2 · log(2πe σ²), about -0.478 nats per dimension.
    assert make_rules(target_entropy_std=0.15).target_entropy == pytest.approx(ACT_DIM * -0.4781, abs=1e-3)


def test_a_categorical_soft_target_shifts_every_atom_by_the_entropy_bonus():
    """y = Φ(R + γ_b (Z' − α log π(a'|s'))), against the slow projection of test_pql_d on the
    head with the smaller mean."""
    from test_pql_d import reference_projection

    torch.manual_seed(8)
    rules = make_rules(init_alpha=0.2, value="categorical", num_atoms=11, v_min=-5.0, v_max=5.0)
    policy, critic = rules.make_policy(), rules.make_critic()
    batch = ObsLayout.shared(OBS_DIM).split(
        {"next_obs": torch.randn(16, OBS_DIM), "reward": torch.randn(16), "discount": torch.full((16,), 0.9)}
    )
    batch["discount"][:3] = 0.0
    torch.manual_seed(9)
    got = rules.td_target(batch, critic, policy)
    torch.manual_seed(9)
    with torch.no_grad():
        action, log_prob = policy.sample(batch["next_obs"])
        l1, l2 = critic(batch["next_obs"], action)
    support = torch.linspace(-5.0, 5.0, 11)
    for b in range(16):
        p1, p2 = l1[b].softmax(-1), l2[b].softmax(-1)
        p = p1 if float(p1 @ support) <= float(p2 @ support) else p2
        shifted = batch["reward"][b] - batch["discount"][b] * 0.2 * log_prob[b]
        want = reference_projection(shifted.reshape(1), batch["discount"][b : b + 1], p.unsqueeze(0), -5.0, 5.0)
        assert torch.allclose(got[b].double(), want[0], atol=1e-5), b


# Seed 1 at β_a:v = 1:4: SAC's curve on InvertedPendulum depends on the seed far more than PQL's.
# At the learning tests' 1:8, seed 1 first scored >= 900 at 31k env steps on the 2-core VM (71 s),
# seed 0 at 88k and seed 2 not by 60k; at 1:4, seeds 1 and 0 at 10k (20 s) and 33k (39 s), seed 2
# not by 60k. Seed 0's solve at 1:8 is `python bench/learning.py --tasks sac-pendulum`.
@pytest.mark.slow
def test_sac_solves_inverted_pendulum(make_config):
    from test_learning import solve_pendulum

    solve_pendulum(make_config, ["algo=sac", "runtime.seed=1", "algo.beta_av=4"], max_env_steps=40_000)
