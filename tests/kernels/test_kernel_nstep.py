"""n-step returns: kernel and reference against a slow per-(t, env) loop written from the definition."""

import pytest
import torch
from impl_cases import CASES

from pql.kernels import nstep_returns


def slow_nstep(rewards, terminated, truncated, gamma, n):
    """For each (t, env): fold rewards until n of them, an episode end, or the window's end."""
    T, N = rewards.shape
    returns, discount = torch.zeros(T, N, dtype=torch.float64), torch.zeros(T, N, dtype=torch.float64)
    steps = torch.zeros(T, N, dtype=torch.int64)
    for env in range(N):
        for t in range(T):
            ret, m, terminal = 0.0, 0, False
            for k in range(n):
                if t + k >= T:
                    break
                ret += gamma**k * float(rewards[t + k, env])
                m += 1
                if terminated[t + k, env] or truncated[t + k, env]:
                    terminal = bool(terminated[t + k, env])
                    break
            returns[t, env], steps[t, env] = ret, m
            discount[t, env] = 0.0 if terminal else gamma**m
    return returns, discount, steps


def check(case, rewards, terminated, truncated, gamma, n):
    impl, device = case
    out = nstep_returns(rewards.to(device), terminated.to(device), truncated.to(device), gamma, n, impl=impl)
    ret, disc, steps = (x.cpu() for x in out)
    want_ret, want_disc, want_steps = slow_nstep(rewards, terminated, truncated, gamma, n)
    assert ret.dtype == torch.float32 and disc.dtype == torch.float32 and steps.dtype == torch.int64
    assert torch.equal(steps, want_steps)
    torch.testing.assert_close(ret.double(), want_ret, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(disc.double(), want_disc, rtol=1e-6, atol=1e-7)
    return ret, disc, steps


def random_window(T, N, p_term, p_trunc, seed):
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(T, N, generator=gen),
        torch.rand(T, N, generator=gen) < p_term,
        torch.rand(T, N, generator=gen) < p_trunc,
    )


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(
    "T,N,n,gamma",
    [(16, 37, 3, 0.99), (9, 300, 5, 0.9), (4, 5, 1, 0.5), (5, 3, 8, 0.97), (1, 7, 3, 0.99), (12, 4, 3, 1.0)],
)
def test_random_windows(case, T, N, n, gamma):
    check(case, *random_window(T, N, 0.15, 0.1, seed=T * N), gamma, n)


@pytest.mark.parametrize("case", CASES)
def test_an_end_at_every_step(case):
    rewards = torch.randn(6, 4)
    ones, zeros = torch.ones(6, 4, dtype=torch.bool), torch.zeros(6, 4, dtype=torch.bool)
    ret, disc, steps = check(case, rewards, ones, zeros, 0.9, 3)
    assert torch.equal(ret, rewards) and (disc == 0).all() and (steps == 1).all()
    ret, disc, steps = check(case, rewards, zeros, ones, 0.9, 3)  # truncation bootstraps
    assert torch.equal(ret, rewards) and (disc == torch.tensor(0.9)).all() and (steps == 1).all()
    check(case, rewards, ones, ones, 0.9, 3)  # terminated wins over truncated


@pytest.mark.parametrize("case", CASES)
def test_no_ends_and_window_edge(case):
    rewards = torch.ones(5, 2)
    zeros = torch.zeros(5, 2, dtype=torch.bool)
    ret, disc, steps = check(case, rewards, zeros, zeros, 0.5, 3)
    # Full folds, then folds cut by the window's end: they still bootstrap, from the obs at T.
    assert steps[:, 0].tolist() == [3, 3, 3, 2, 1]
    assert ret[:, 0].tolist() == [1.75, 1.75, 1.75, 1.5, 1.0]
    assert disc[:, 0].tolist() == [0.125, 0.125, 0.125, 0.25, 0.5]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("T,N", [(0, 4), (4, 0)])
def test_empty(case, T, N):
    impl, device = case
    flags = torch.zeros(T, N, dtype=torch.bool, device=device)
    out = nstep_returns(torch.zeros(T, N, device=device), flags, flags, 0.99, 3, impl=impl)
    assert [x.shape for x in out] == [(T, N)] * 3


def test_bad_input_is_rejected():
    r, flags = torch.zeros(4, 3), torch.zeros(4, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"rewards must be a \[T, N\] float32"):
        nstep_returns(r.double(), flags, flags, 0.99, 3)
    with pytest.raises(ValueError, match="terminated must be a bool tensor of shape"):
        nstep_returns(r, flags.float(), flags, 0.99, 3)
    with pytest.raises(ValueError, match="truncated must be a bool tensor of shape"):
        nstep_returns(r, flags, flags[:2], 0.99, 3)
    with pytest.raises(ValueError, match="gamma=1.5 is not allowed"):
        nstep_returns(r, flags, flags, 1.5, 3)
    with pytest.raises(ValueError, match="n=0 is not allowed"):
        nstep_returns(r, flags, flags, 0.99, 0)
    with pytest.raises(ValueError, match="impl='gpu'"):
        nstep_returns(r, flags, flags, 0.99, 3, impl="gpu")
