"""n-step returns over a [T, N] window of transitions (N envs, T steps), batched.

For each start t the fold takes m = min(n, steps to the first episode end at or after t
(inclusive), T - t) rewards:

    R_t = sum_{k<m} gamma^k r_{t+k}
    bootstrap_discount_t = 0 if the fold ended on a terminated step, else gamma^m

A truncated end still bootstraps (gamma^m): the actor then bootstraps from the observation that
ended the episode (info["final_obs"]), not the reset one. A step both terminated and truncated
counts as terminated. A fold cut short by the window's end (t + m = T, no episode end) also
bootstraps with gamma^m, from the observation at T. The target is R_t + bootstrap_discount_t *
Q(s_{t+m}, .).

Triton kernel + launcher + PyTorch reference (also the CPU path); dispatch: _dispatch.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pql.kernels._dispatch import LAUNCH_OPTIONS, check_same_device, select_impl

# Envs per program. Every (start, env block) pair is its own program, so the grid is already
# T * N / BLOCK wide; 256 columns = 2 float32 per thread at 4 warps, coalesced along N.
BLOCK_N = 256


@triton.jit
def _nstep_kernel(rew_ptr, term_ptr, trunc_ptr, ret_ptr, disc_ptr, steps_ptr, T, N, gamma, n_fold, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    t = tl.program_id(1)
    mask = cols < N
    ret = tl.zeros([BLOCK], tl.float32)
    disc = tl.full([BLOCK], 1.0, tl.float32)
    steps = tl.zeros([BLOCK], tl.int32)
    ended_terminal = tl.zeros([BLOCK], tl.int1)
    alive = mask  # still inside the episode that started at t
    # n is small (1-10): each start folds its own rewards; the starts run in parallel, so no
    # sliding-window sum whose subtractions would lose precision. The loop stops at the window.
    for k in range(tl.minimum(n_fold, T - t)):
        off = (t + k) * N + cols
        r = tl.load(rew_ptr + off, mask=alive, other=0.0)
        term = tl.load(term_ptr + off, mask=alive, other=0) != 0
        trunc = tl.load(trunc_ptr + off, mask=alive, other=0) != 0
        ret = ret + tl.where(alive, disc * r, 0.0)
        disc = tl.where(alive, disc * gamma, disc)
        steps = steps + alive.to(tl.int32)
        ended_terminal = ended_terminal | (alive & term)
        alive = alive & ~(term | trunc)
    out = t * N + cols
    tl.store(ret_ptr + out, ret, mask=mask)
    tl.store(disc_ptr + out, tl.where(ended_terminal, 0.0, disc), mask=mask)
    tl.store(steps_ptr + out, steps.to(tl.int64), mask=mask)


def _nstep_triton(rewards, terminated, truncated, gamma, n):
    T, N = rewards.shape
    returns = torch.empty_like(rewards)
    discount = torch.empty_like(rewards)
    steps = torch.empty(T, N, dtype=torch.int64, device=rewards.device)
    grid = (triton.cdiv(N, BLOCK_N), T)
    # bool tensors travel as uint8 views (no copy): one byte per flag, loaded as integers.
    _nstep_kernel[grid](
        rewards,
        terminated.view(torch.uint8),
        truncated.view(torch.uint8),
        returns,
        discount,
        steps,
        T,
        N,
        gamma,
        n,
        BLOCK=BLOCK_N,
        num_warps=4,
        **LAUNCH_OPTIONS,
    )
    return returns, discount, steps


def _nstep_torch(rewards, terminated, truncated, gamma, n):
    """Reference of _nstep_kernel: the same fold, vectorised over (t, env), looping over k."""
    T, N = rewards.shape
    t = torch.arange(T, device=rewards.device).unsqueeze(1)
    returns = torch.zeros_like(rewards)
    disc = torch.ones_like(rewards)
    steps = torch.zeros(T, N, dtype=torch.int64, device=rewards.device)
    ended_terminal = torch.zeros(T, N, dtype=torch.bool, device=rewards.device)
    alive = torch.ones(T, N, dtype=torch.bool, device=rewards.device)

    def ahead(x, k):
        """x[t + k] at row t; rows past the window are padding, masked out by `alive`."""
        return torch.cat([x[k:], torch.zeros_like(x[:k])])

    for k in range(min(n, T)):
        alive &= t + k < T
        r, term, trunc = ahead(rewards, k), ahead(terminated, k), ahead(truncated, k)
        returns = returns + torch.where(alive, disc * r, 0.0)
        disc = torch.where(alive, disc * gamma, disc)
        steps += alive
        ended_terminal |= alive & term
        alive &= ~(term | trunc)
    return returns, torch.where(ended_terminal, 0.0, disc), steps


@torch.no_grad()
def nstep_returns(
    rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor, gamma: float, n: int, impl: str = "auto"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """n-step discounted returns for every start of a window (see the module docstring).

    rewards: [T, N] float32; terminated, truncated: [T, N] bool; all on one device.
    gamma in [0, 1]; n >= 1. impl: "auto", "triton" or "torch".
    Returns (returns [T, N] float32, bootstrap_discount [T, N] float32, steps [T, N] int64),
    steps = m, the number of rewards folded (>= 1).
    """
    if rewards.dim() != 2 or rewards.dtype != torch.float32:
        raise ValueError(
            f"rewards must be a [T, N] float32 tensor, got shape {tuple(rewards.shape)} dtype {rewards.dtype}"
        )
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if flag.shape != rewards.shape or flag.dtype != torch.bool:
            raise ValueError(
                f"{name} must be a bool tensor of shape {tuple(rewards.shape)}, got shape "
                f"{tuple(flag.shape)} dtype {flag.dtype}"
            )
    check_same_device(rewards.device, terminated=terminated, truncated=truncated)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma={gamma!r} is not allowed; expected a number in [0, 1]")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} is not allowed; expected an integer >= 1")
    rewards, terminated, truncated = (x.contiguous() for x in (rewards, terminated, truncated))
    if select_impl(impl, rewards.device) == "triton" and rewards.numel():
        return _nstep_triton(rewards, terminated, truncated, float(gamma), n)
    return _nstep_torch(rewards, terminated, truncated, float(gamma), n)
