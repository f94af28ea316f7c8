"""V-trace: kernel and reference recursion against the paper's O(T^2) definition."""

import math

import pytest
import torch
from impl_cases import CASES

from pql.kernels import vtrace


def paper_vtrace(log_rhos, discounts, rewards, values, bootstrap_value, rho_bar, c_bar, lam, pg_rho_bar):
    """Espeholt et al. (2018), eq. (1), in float64, per step s:
    v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t)),
    with rho_t = min(rho_bar, ratio_t), c_i = lam * min(c_bar, ratio_i), V(x_T) = bootstrap_value;
    pg_advantage_s = min(pg_rho_bar, ratio_s) (r_s + gamma_s v_{s+1} - V(x_s)), v_T = V(x_T)."""
    log_rhos, discounts, rewards, values, bootstrap_value = (
        x.double() for x in (log_rhos, discounts, rewards, values, bootstrap_value)
    )
    T = values.shape[0]
    ratios = log_rhos.exp()
    v_ext = torch.cat([values, bootstrap_value[None]])
    vs = torch.empty_like(values)
    for s in range(T):
        total = values[s].clone()
        trace = torch.ones_like(values[s])
        for t in range(s, T):
            rho = ratios[t].clamp(max=rho_bar)
            total += trace * rho * (rewards[t] + discounts[t] * v_ext[t + 1] - values[t])
            trace = trace * discounts[t] * lam * ratios[t].clamp(max=c_bar)
        vs[s] = total
    vs_ext = torch.cat([vs, bootstrap_value[None]])
    adv = ratios.clamp(max=pg_rho_bar) * (rewards + discounts * vs_ext[1:] - values)
    return vs, adv


def random_batch(T, B, seed, lo=0.2, hi=3.0):
    gen = torch.Generator().manual_seed(seed)
    log_rhos = math.log(lo) + (math.log(hi) - math.log(lo)) * torch.rand(T, B, generator=gen)
    # Mostly 0.99, and a few episode ends (discount 0).
    discounts = 0.99 * (torch.rand(T, B, generator=gen) > 0.1).float()
    return (
        log_rhos,
        discounts,
        torch.randn(T, B, generator=gen),
        torch.randn(T, B, generator=gen),
        torch.randn(B, generator=gen),
    )


def run(case, args, **clips):
    impl, device = case
    return [x.cpu() for x in vtrace(*(a.to(device) for a in args), impl=impl, **clips)]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("T,B", [(1, 5), (7, 33), (20, 200)])
@pytest.mark.parametrize(
    "clips",
    [
        dict(rho_bar=1.0, c_bar=1.0, lam=1.0, pg_rho_bar=None),
        dict(rho_bar=1.5, c_bar=0.7, lam=1.0, pg_rho_bar=None),
        dict(rho_bar=2.0, c_bar=0.5, lam=0.9, pg_rho_bar=1.2),
        dict(rho_bar=math.inf, c_bar=math.inf, lam=0.95, pg_rho_bar=None),
    ],
    ids=["default", "rho1.5-c0.7", "lam0.9-pg1.2", "unclipped"],
)
def test_matches_the_paper_definition(case, T, B, clips):
    args = random_batch(T, B, seed=T * B)
    ratios = args[0].exp()
    # Ratios on both sides of every finite clip level, so that an off-by-one in which ratio a
    # clip applies to cannot hide behind ratios that are all clipped (or all not).
    for level in (clips["rho_bar"], clips["c_bar"], clips["pg_rho_bar"]):
        if level is not None and math.isfinite(level) and T * B > 100:
            assert (ratios < level).any() and (ratios > level).any()
    vs, adv = run(case, args, **clips)
    pg = clips["pg_rho_bar"] if clips["pg_rho_bar"] is not None else clips["rho_bar"]
    want_vs, want_adv = paper_vtrace(*args, clips["rho_bar"], clips["c_bar"], clips["lam"], pg)
    assert vs.dtype == adv.dtype == torch.float32 and vs.shape == adv.shape == (T, B)
    torch.testing.assert_close(vs.double(), want_vs, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(adv.double(), want_adv, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("rho_bar,c_bar", [(1.0, 1.0), (2.0, 1.5)])
def test_on_policy_reduces_to_the_n_step_bellman_target(case, rho_bar, c_bar):
    T, B = 9, 17
    _, discounts, rewards, values, bootstrap = random_batch(T, B, seed=7)
    vs, _ = run(case, (torch.zeros(T, B), discounts, rewards, values, bootstrap), rho_bar=rho_bar, c_bar=c_bar)
    # v_s = sum_{t>=s} (prod_{i=s}^{t-1} gamma_i) r_t + (prod_{i=s}^{T-1} gamma_i) V(x_T): no V(x_s).
    target = bootstrap.double()
    want = torch.empty(T, B, dtype=torch.float64)
    for s in reversed(range(T)):
        target = rewards[s].double() + discounts[s].double() * target
        want[s] = target
    torch.testing.assert_close(vs.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES)
def test_matches_the_reference_recursion(case):
    if case[0] == "torch":
        pytest.skip("the reference against itself")
    args = random_batch(32, 500, seed=11)
    got = run(case, args, rho_bar=1.5, c_bar=0.9, lam=0.97)
    want = vtrace(*args, rho_bar=1.5, c_bar=0.9, lam=0.97, impl="torch")
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("T,B", [(0, 4), (4, 0)])
def test_empty(case, T, B):
    vs, adv = run(case, (torch.zeros(T, B),) * 4 + (torch.zeros(B),))
    assert vs.shape == adv.shape == (T, B)


def test_bad_input_is_rejected():
    args = random_batch(3, 4, seed=0)
    with pytest.raises(ValueError, match=r"rho_bar=0.5 < c_bar=1.0 is not allowed"):
        vtrace(*args, rho_bar=0.5, c_bar=1.0)
    with pytest.raises(ValueError, match="c_bar=0.0 is not allowed"):
        vtrace(*args, c_bar=0.0)
    with pytest.raises(ValueError, match="pg_rho_bar=-1.0 is not allowed"):
        vtrace(*args, pg_rho_bar=-1.0)
    with pytest.raises(ValueError, match="lam=1.5 is not allowed"):
        vtrace(*args, lam=1.5)
    with pytest.raises(ValueError, match=r"rewards must be a float32 tensor of shape \(3, 4\)"):
        vtrace(args[0], args[1], args[2][:2], args[3], args[4])
    with pytest.raises(ValueError, match=r"bootstrap_value must be a float32 tensor of shape \(4,\)"):
        vtrace(*args[:4], args[4][:3])
    with pytest.raises(ValueError, match=r"values must be a \[T, B\] float32"):
        vtrace(*args[:3], args[3].double(), args[4])
