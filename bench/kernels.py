"""Kernel benchmark: prints a Markdown table (the one in docs/kernels.md).

    python bench/kernels.py                 # CUDA if available, else CPU
    python bench/kernels.py --device cpu

Rows: one prioritized-replay step (update B priorities, then draw B) for capacities 2^20 and
2^23 at B = 8192, as a bare SumTree and through PrioritizedSampler (which adds the priority
transform and the importance weights); V-trace at T = 32, B = 4096; n-step returns over a
T = 32, N = 4096 window with n = 3. Columns: the Triton kernel, its PyTorch reference, and
torchrl's PrioritizedSampler (PrioritizedSampler rows, where torchrl and its C++ extension load).

GPU timing: triton.testing.do_bench (warm-up, L2 flushed between calls, median). CPU timing:
wall clock, warm-up, median. The Triton column needs CUDA: on CPU it would time the interpreter.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pql.kernels import INTERPRETING, SumTree, nstep_returns, vtrace  # noqa: E402
from pql.replay.prioritized import PrioritizedSampler  # noqa: E402

ALPHA, BETA0, EPS = 0.6, 0.4, 1e-6


def median_ms(fn, device: torch.device) -> float:
    """Median time of one call of fn, in milliseconds."""
    if device.type == "cuda":
        import triton.testing
        return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")
    for _ in range(3):
        fn()
    times, start = [], time.perf_counter()
    while len(times) < 5 or (len(times) < 100 and time.perf_counter() - start < 2.0):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def torchrl_sampler(capacity: int, device: torch.device):
    """torchrl's PrioritizedSampler on `device` and a storage stand-in for its sample(), or the
    reason it cannot run."""
    try:
        import torchrl
        from torchrl.data.replay_buffers.samplers import PrioritizedSampler as TorchRLSampler
    except ImportError:
        return None, "n/a (torchrl not installed)"
    try:
        import torchrl._torchrl  # noqa: F401  (its C++ segment trees, compiled for one torch)
    except ImportError:
        return None, (f"n/a (torchrl {torchrl.__version__}'s C++ extension fails to load with "
                      f"torch {torch.__version__})")
    try:
        sampler = TorchRLSampler(capacity, alpha=ALPHA, beta=BETA0, eps=EPS, device=device,
                                 max_priority_within_buffer=False)
    except RuntimeError as err:  # e.g. a CUDA device with a CPU-only torchrl wheel
        return None, f"n/a ({str(err).splitlines()[0][:80]})"

    class FullStorage:
        """What sample() reads of a storage: a length, a rank and a device."""
        ndim = 1

        def __init__(self):
            self.device = device

        def __len__(self):
            return capacity

    return (sampler, FullStorage()), None


def replay_rows(capacity: int, batch: int, device: torch.device, measure_triton: bool) -> list[list[str]]:
    gen = torch.Generator(device).manual_seed(0)
    priorities = torch.rand(capacity, device=device, generator=gen) + 0.01
    idx = torch.randint(0, capacity, (batch,), device=device, generator=gen)
    td = torch.rand(batch, device=device, generator=gen)

    def tree_step(tree):
        def step():
            tree.update(idx, td)
            tree.sample(batch, gen)
        return step

    def sampler_step(sampler):
        def step():
            sampler.update(idx, td)
            sampler.sample(batch, capacity, gen)
        return step

    tree_cells, sampler_cells = [], []
    for impl in ("triton", "torch"):
        if impl == "triton" and not measure_triton:
            tree_cells.append("not measured (no CUDA)")
            sampler_cells.append("not measured (no CUDA)")
            continue
        tree = SumTree(capacity, device, validate=False, impl=impl)
        tree.reset(priorities)
        tree_cells.append(f"{median_ms(tree_step(tree), device) * 1e3:,.0f} µs")
        del tree
        sampler = PrioritizedSampler(capacity, device, alpha=ALPHA, beta0=BETA0, eps=EPS,
                                     validate=False, impl=impl)
        sampler.tree.reset(priorities)
        sampler_cells.append(f"{median_ms(sampler_step(sampler), device) * 1e3:,.0f} µs")
        del sampler
    made, reason = torchrl_sampler(capacity, device)
    if made is None:
        tree_cells.append("—")
        sampler_cells.append(reason)
    else:
        sampler, storage = made
        sampler.update_priority(torch.arange(capacity, device=device), priorities)

        def torchrl_step():
            sampler.update_priority(idx, td)
            sampler.sample(storage, batch)
        tree_cells.append("—")
        sampler_cells.append(f"{median_ms(torchrl_step, device) * 1e3:,.0f} µs")
    log2 = capacity.bit_length() - 1
    return [[f"SumTree update + sample, capacity 2^{log2}, B={batch}", *tree_cells],
            [f"PrioritizedSampler update + sample (+ weights), capacity 2^{log2}, B={batch}", *sampler_cells]]


def target_rows(device: torch.device, measure_triton: bool) -> list[list[str]]:
    gen = torch.Generator(device).manual_seed(1)
    T, B = 32, 4096
    log_rhos = torch.randn(T, B, device=device, generator=gen) * 0.5
    discounts = 0.99 * (torch.rand(T, B, device=device, generator=gen) > 0.02).float()
    rewards, values = (torch.randn(T, B, device=device, generator=gen) for _ in range(2))
    bootstrap = torch.randn(B, device=device, generator=gen)
    terminated = torch.rand(T, B, device=device, generator=gen) < 0.01
    truncated = torch.rand(T, B, device=device, generator=gen) < 0.005
    calls = {
        f"V-trace, T={T}, B={B}":
            lambda impl: vtrace(log_rhos, discounts, rewards, values, bootstrap, 1.0, 1.0, impl=impl),
        f"n-step returns (n=3), T={T}, N={B}":
            lambda impl: nstep_returns(rewards, terminated, truncated, 0.99, 3, impl=impl),
    }
    rows = []
    for name, call in calls.items():
        ref_ms = median_ms(lambda: call("torch"), device)
        if measure_triton:
            tri_ms = median_ms(lambda: call("triton"), device)
            tri = f"{tri_ms * 1e3:,.0f} µs ({ref_ms / tri_ms:.0f}x)"
        else:
            tri = "not measured (no CUDA)"
        rows.append([name, tri, f"{ref_ms * 1e3:,.0f} µs", "—"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--log2-capacities", type=int, nargs="+", default=[20, 23])
    args = parser.parse_args()
    device = torch.device(args.device)
    measure_triton = device.type == "cuda" and not INTERPRETING
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"CPU, {torch.get_num_threads()} threads"
    print(f"device: {name}; torch {torch.__version__}")
    rows = []
    for log2 in args.log2_capacities:
        rows += replay_rows(2 ** log2, args.batch, device, measure_triton)
    rows += target_rows(device, measure_triton)
    header = ["", "Triton kernel", "PyTorch reference", "torchrl PrioritizedSampler"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
