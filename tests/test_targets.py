"""n-step folding, clipped double-Q targets with smoothing, the greedy n-step target and the soft
update, each against a slow reference written here from the definitions."""

import copy

import pytest
import torch

from pql.algos.common import SoftUpdate
from pql.algos.pql import PQL
from pql.config import PQLConfig
from pql.envs import ObsLayout
from pql.nets import DeterministicActor, DoubleQ
from pql.replay.nstep import NStepWindow


def reference_fold(rewards, terms, truncs, boots, t, i, n, gamma):
    """Transition starting at step t of env i: fold rewards up to n steps or the episode end."""
    ret, k = 0.0, 0
    while True:
        ret += gamma**k * float(rewards[t + k, i])
        k += 1
        if terms[t + k - 1, i]:
            return ret, 0.0, boots[t + k - 1, i]
        if truncs[t + k - 1, i] or k == n:
            return ret, gamma**k, boots[t + k - 1, i]


def test_nstep_window_matches_reference():
    torch.manual_seed(0)
    steps, envs, n, gamma = 40, 6, 3, 0.9
    obs = torch.randn(steps, envs, 4)
    actions = torch.randn(steps, envs, 2)
    rewards = torch.randn(steps, envs)
    terms = torch.rand(steps, envs) < 0.1
    truncs = (torch.rand(steps, envs) < 0.1) & ~terms
    terms[5, :] = True  # episode ends on every env at once, and at every step of env 0 below
    terms[10:14, 0] = True
    boots = torch.randn(steps, envs, 4)
    window = NStepWindow(n, gamma)
    for t in range(steps):
        out = window.push(obs[t], actions[t], rewards[t], terms[t], truncs[t], boots[t])
        if t < n - 1:
            assert out is None
            continue
        start = t - n + 1
        for i in range(envs):
            ret, disc, boot = reference_fold(rewards, terms, truncs, boots, start, i, n, gamma)
            assert torch.allclose(out["reward"][i], torch.tensor(ret), atol=1e-5)
            assert torch.allclose(out["discount"][i], torch.tensor(disc), atol=1e-6)
            assert torch.equal(out["next_obs"][i], boot)
            assert torch.equal(out["obs"][i], obs[start, i]) and torch.equal(out["action"][i], actions[start, i])


def test_nstep_window_carries_the_first_step_of_each_fold():
    """With first_step, a fold also carries r_0, s_1 (final_obs where the episode ended there) and
    γ, or 0 after a termination at its first step, next to the n-step fields."""
    torch.manual_seed(4)
    steps, envs, n, gamma = 30, 5, 3, 0.9
    rewards = torch.randn(steps, envs)
    terms = torch.rand(steps, envs) < 0.2
    truncs = (torch.rand(steps, envs) < 0.2) & ~terms
    boots = torch.randn(steps, envs, 4)
    window = NStepWindow(n, gamma, first_step=True)
    ended_first = 0
    for t in range(steps):
        out = window.push(torch.zeros(envs, 4), torch.zeros(envs, 2), rewards[t], terms[t], truncs[t], boots[t])
        if out is None:
            continue
        start = t - n + 1
        for i in range(envs):
            ret, disc, boot = reference_fold(rewards, terms, truncs, boots, start, i, n, gamma)
            assert out["reward"][i].item() == pytest.approx(ret, abs=1e-5) and torch.equal(out["next_obs"][i], boot)
            assert out["reward1"][i].item() == rewards[start, i].item()
            assert torch.equal(out["next_obs1"][i], boots[start, i])
            assert out["discount1"][i].item() == pytest.approx(0.0 if terms[start, i] else gamma)
            ended_first += bool(terms[start, i] or truncs[start, i])
    assert ended_first > 0  # folds of one step, where both targets are the same, are covered


def test_nstep_window_sequence_priority_covers_the_folded_steps():
    """With priority_eta, a folded transition's priority is eta·max + (1−eta)·mean of the one-step
    |TD errors| of exactly the steps it folds (fewer than n where its episode ended)."""
    torch.manual_seed(3)
    steps, envs, n, eta = 20, 5, 3, 0.9
    terms = torch.rand(steps, envs) < 0.2
    truncs = (torch.rand(steps, envs) < 0.1) & ~terms
    td = torch.rand(steps, envs)
    window = NStepWindow(n, 0.99, priority_eta=eta)
    for t in range(steps):
        out = window.push(
            torch.zeros(envs, 2),
            torch.zeros(envs, 1),
            torch.zeros(envs),
            terms[t],
            truncs[t],
            torch.zeros(envs, 2),
            td[t],
        )
        if out is None:
            continue
        start = t - n + 1
        for i in range(envs):
            k = 1
            while k < n and not (terms[start + k - 1, i] or truncs[start + k - 1, i]):
                k += 1
            folded = td[start : start + k, i].tolist()
            assert out["priority"][i].item() == pytest.approx(eta * max(folded) + (1 - eta) * sum(folded) / k, rel=1e-6)


def test_double_q_target_with_smoothing_matches_reference():
    torch.manual_seed(1)
    cfg = PQLConfig(target_noise=0.3, target_noise_clip=0.4)
    algo = PQL(cfg, obs_dim=5, act_dim=3)
    policy, critic = DeterministicActor(5, 3, (16,), activation="relu"), DoubleQ(5, 3, (16,), activation="relu")
    batch = ObsLayout.shared(5).split(
        {"next_obs": torch.randn(32, 5), "reward": torch.randn(32), "discount": torch.rand(32)}
    )
    batch["discount"][:4] = 0.0
    torch.manual_seed(7)
    got = algo.td_target(batch, critic, policy)
    torch.manual_seed(7)
    eps = torch.randn(32, 3)
    with torch.no_grad():
        for b in range(32):
            a = policy(batch["next_obs"][b : b + 1])[0]
            a = torch.clamp(a + torch.clamp(eps[b] * 0.3, -0.4, 0.4), -1.0, 1.0)
            x = torch.cat([batch["next_obs"][b], a]).unsqueeze(0)
            q = min(float(critic.q1(x)), float(critic.q2(x)))
            want = float(batch["reward"][b]) + float(batch["discount"][b]) * q
            assert abs(float(got[b]) - want) < 1e-5


def test_greedy_target_is_the_larger_of_the_n_step_and_one_step_targets():
    """algo.greedy_nstep: y = max(R⁽ⁿ⁾ + γ_b·V'(s'), r_0 + γ_1·V'(s_1)), V'(s) = min_j Q'_j(s, π(s))
    (no smoothing noise here, so the reference is exact)."""
    torch.manual_seed(5)
    algo = PQL(PQLConfig(target_noise=0.0), obs_dim=5, act_dim=3)
    policy, critic = DeterministicActor(5, 3, (16,), activation="relu"), DoubleQ(5, 3, (16,), activation="relu")
    batch = ObsLayout.shared(5).split(
        {
            "next_obs": torch.randn(64, 5),
            "reward": torch.randn(64),
            "discount": torch.rand(64),
            "next_obs1": torch.randn(64, 5),
            "reward1": torch.randn(64),
            "discount1": torch.rand(64),
        }
    )
    batch["discount"][:4] = 0.0
    got = algo.td_target(batch, critic, policy)

    def value(s):
        x = torch.cat([s, policy(s.unsqueeze(0))[0]]).unsqueeze(0)
        return min(float(critic.q1(x)), float(critic.q2(x)))

    picked_one_step = 0
    with torch.no_grad():
        for b in range(64):
            n_step = float(batch["reward"][b]) + float(batch["discount"][b]) * value(batch["next_obs"][b])
            one_step = float(batch["reward1"][b]) + float(batch["discount1"][b]) * value(batch["next_obs1"][b])
            assert float(got[b]) == pytest.approx(max(n_step, one_step), abs=1e-5)
            picked_one_step += one_step > n_step
    assert 0 < picked_one_step < 64  # both branches are exercised
    plain = ObsLayout.shared(5).split({k: batch[k] for k in ("next_obs", "reward", "discount")})
    assert torch.all(got >= algo.td_target(plain, critic, policy) - 1e-6)


def test_soft_update_matches_polyak_formula():
    torch.manual_seed(2)
    source, target = DoubleQ(4, 2, (8,), activation="relu"), DoubleQ(4, 2, (8,), activation="relu")
    soft_update = SoftUpdate(target, source)
    before = copy.deepcopy(target)
    soft_update(0.05)
    for t, s, b in zip(target.parameters(), source.parameters(), before.parameters()):
        assert torch.allclose(t, 0.05 * s + 0.95 * b, atol=1e-7)
    # A resumed learner loads its target in place: the same update keeps acting on it.
    target.load_state_dict(before.state_dict())
    soft_update(0.5)
    for t, s, b in zip(target.parameters(), source.parameters(), before.parameters()):
        assert torch.allclose(t, 0.5 * s + 0.5 * b, atol=1e-7)
