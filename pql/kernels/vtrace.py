"""V-trace targets (Espeholt et al. 2018, IMPALA, Remark 1) over [T, B] trajectories.

With rho_t = min(rho_bar, pi/mu), c_t = lam * min(c_bar, pi/mu) and
delta_t = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t)), the targets satisfy the reverse recursion

    v_s - V(x_s) = delta_s + gamma_s c_s (v_{s+1} - V(x_{s+1})),    v_T = V(x_T) = bootstrap_value,

and the policy-gradient advantage is min(pg_rho_bar, pi/mu) (r_s + gamma_s v_{s+1} - V(x_s)).
gamma_t = discounts[t] (0 where the episode ended at t). Targets carry no gradient.

Triton kernel + launcher + PyTorch reference (also the CPU path); dispatch: _dispatch.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pql.kernels._dispatch import LAUNCH_OPTIONS, check_same_device, select_impl

# Columns per program. The recursion is sequential in t, so the parallelism is B / BLOCK
# programs each walking T steps; a small block keeps more programs (and their loads) in flight
# on a GPU. Row-major [T, B] makes each step's loads coalesced along B.
BLOCK_B = 128


@triton.jit
def _vtrace_kernel(
    log_rho_ptr,
    disc_ptr,
    rew_ptr,
    val_ptr,
    boot_ptr,
    vs_ptr,
    adv_ptr,
    T,
    B,
    rho_bar,
    c_bar,
    lam,
    pg_rho_bar,
    BLOCK: tl.constexpr,
):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < B
    value_next = tl.load(boot_ptr + cols, mask=mask, other=0.0)  # V(x_{s+1})
    vs_next = value_next  # v_{s+1}
    acc = tl.zeros([BLOCK], tl.float32)  # v_{s+1} - V(x_{s+1})
    for i in range(T):
        s = T - 1 - i
        off = s * B + cols
        rho = tl.exp(tl.load(log_rho_ptr + off, mask=mask, other=0.0))
        disc = tl.load(disc_ptr + off, mask=mask, other=0.0)
        reward = tl.load(rew_ptr + off, mask=mask, other=0.0)
        value = tl.load(val_ptr + off, mask=mask, other=0.0)
        delta = tl.minimum(rho, rho_bar) * (reward + disc * value_next - value)
        acc = delta + disc * (lam * tl.minimum(rho, c_bar)) * acc
        vs = value + acc
        adv = tl.minimum(rho, pg_rho_bar) * (reward + disc * vs_next - value)
        tl.store(vs_ptr + off, vs, mask=mask)
        tl.store(adv_ptr + off, adv, mask=mask)
        value_next = value
        vs_next = vs


def _vtrace_triton(log_rhos, discounts, rewards, values, bootstrap_value, rho_bar, c_bar, lam, pg_rho_bar):
    T, B = values.shape
    vs = torch.empty_like(values)
    adv = torch.empty_like(values)
    _vtrace_kernel[(triton.cdiv(B, BLOCK_B),)](
        log_rhos,
        discounts,
        rewards,
        values,
        bootstrap_value,
        vs,
        adv,
        T,
        B,
        rho_bar,
        c_bar,
        lam,
        pg_rho_bar,
        BLOCK=BLOCK_B,
        num_warps=4,
        **LAUNCH_OPTIONS,
    )
    return vs, adv


def _vtrace_torch(log_rhos, discounts, rewards, values, bootstrap_value, rho_bar, c_bar, lam, pg_rho_bar):
    """Reference of _vtrace_kernel: the same recursion, one time step per iteration."""
    rhos = torch.exp(log_rhos)
    values_next = torch.cat([values[1:], bootstrap_value.unsqueeze(0)])
    deltas = torch.clamp(rhos, max=rho_bar) * (rewards + discounts * values_next - values)
    cs = lam * torch.clamp(rhos, max=c_bar)
    acc = torch.zeros_like(bootstrap_value)
    vs_minus_v = []
    for s in reversed(range(values.shape[0])):
        acc = deltas[s] + discounts[s] * cs[s] * acc
        vs_minus_v.append(acc)
    vs = values + torch.stack(vs_minus_v[::-1])
    vs_next = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)])
    adv = torch.clamp(rhos, max=pg_rho_bar) * (rewards + discounts * vs_next - values)
    return vs, adv


@torch.no_grad()
def vtrace(
    log_rhos: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    lam: float = 1.0,
    pg_rho_bar: float | None = None,
    impl: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace value targets and policy-gradient advantages (see the module docstring).

    log_rhos = log pi(a|x) - log mu(a|x), discounts, rewards, values: [T, B] float32;
    bootstrap_value: [B] float32 (V(x_T)); all on one device.
    rho_bar >= c_bar > 0 (math.inf: no clipping); lam in [0, 1]; pg_rho_bar > 0, None: rho_bar.
    impl: "auto", "triton" or "torch".
    Returns (vs [T, B] float32, pg_advantages [T, B] float32).
    """
    if values.dim() != 2 or values.dtype != torch.float32:
        raise ValueError(
            f"values must be a [T, B] float32 tensor, got shape {tuple(values.shape)} dtype {values.dtype}"
        )
    for name, x in (("log_rhos", log_rhos), ("discounts", discounts), ("rewards", rewards)):
        if x.shape != values.shape or x.dtype != torch.float32:
            raise ValueError(
                f"{name} must be a float32 tensor of shape {tuple(values.shape)} (as "
                f"values), got shape {tuple(x.shape)} dtype {x.dtype}"
            )
    if bootstrap_value.shape != values.shape[1:] or bootstrap_value.dtype != torch.float32:
        raise ValueError(
            f"bootstrap_value must be a float32 tensor of shape ({values.shape[1]},), "
            f"got shape {tuple(bootstrap_value.shape)} dtype {bootstrap_value.dtype}"
        )
    check_same_device(
        values.device, log_rhos=log_rhos, discounts=discounts, rewards=rewards, bootstrap_value=bootstrap_value
    )
    pg_rho_bar = rho_bar if pg_rho_bar is None else pg_rho_bar
    for name, clip in (("rho_bar", rho_bar), ("c_bar", c_bar), ("pg_rho_bar", pg_rho_bar)):
        if not clip > 0:
            raise ValueError(f"{name}={clip!r} is not allowed; expected a number > 0 (math.inf: no clipping)")
    if not rho_bar >= c_bar:
        raise ValueError(f"rho_bar={rho_bar!r} < c_bar={c_bar!r} is not allowed; V-trace needs rho_bar >= c_bar")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam={lam!r} is not allowed; expected a number in [0, 1]")
    args = (
        log_rhos.contiguous(),
        discounts.contiguous(),
        rewards.contiguous(),
        values.contiguous(),
        bootstrap_value.contiguous(),
    )
    clips = (float(rho_bar), float(c_bar), float(lam), float(pg_rho_bar))
    if select_impl(impl, values.device) == "triton" and values.numel():
        return _vtrace_triton(*args, *clips)
    if values.shape[0] == 0:
        return torch.empty_like(values), torch.empty_like(values)
    return _vtrace_torch(*args, *clips)
