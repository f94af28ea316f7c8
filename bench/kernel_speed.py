"""Kernel benchmark: prints a Markdown table (the one in docs/kernels.md).

    python bench/kernel_speed.py                  # CUDA if available, else CPU
    python bench/kernel_speed.py --device cpu [--batch 8192] [--log2-capacities 20 23] [--csv PATH]

Rows: one prioritized-replay step (update B priorities, then draw B) for capacities 2^20 and
2^23 at B = 8192, a full replay, as a bare index of the priorities and through
PrioritizedSampler (which adds the priority transform and the importance weights); V-trace at
T = 32, B = 4096; n-step returns over a T = 32, N = 4096 window with n = 3. Columns: the Triton
kernel, its PyTorch reference (for the replay rows: the sum-tree's), the flat index
(pql/replay/flat_priorities.py: a float64 prefix sum and a binary search per draw), and
torchrl's PrioritizedSampler (PrioritizedSampler rows, where torchrl and its C++ extension load).
A Triton cell gives its speed-up over the reference in brackets. --csv writes the raw times.
The CPU rule of index="auto" (pql/replay/prioritized.py) comes from
`--device cpu --batch 256 --log2-capacities 16 17 18 19 20 21 22 23`.

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

from bench.learner import CsvRows
from pql.kernels import INTERPRETING, SumTree, nstep_returns, vtrace
from pql.replay.flat_priorities import FlatPriorities
from pql.replay.prioritized import PrioritizedSampler

ALPHA, BETA0, EPS = 0.6, 0.4, 1e-6
NO_CUDA = "not measured (no CUDA)"
IMPLS = ("triton", "torch", "flat", "torchrl")  # the table's columns, in order


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
        import torchrl._torchrl
    except ImportError:
        return None, (
            f"n/a (torchrl {torchrl.__version__}'s C++ extension fails to load with torch {torch.__version__})"
        )
    try:
        sampler = TorchRLSampler(
            capacity, alpha=ALPHA, beta=BETA0, eps=EPS, device=device, max_priority_within_buffer=False
        )
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


def record(operation: str, impl: str, microseconds: float | None, note: str = "") -> dict:
    return {"operation": operation, "impl": impl, "microseconds": microseconds, "note": note}


def replay_records(capacity: int, batch: int, device: torch.device, measure_triton: bool) -> list[dict]:
    """One prioritized-replay step on a full replay, a bare index and through PrioritizedSampler
    (and torchrl's sampler where it loads). -> records {operation, impl, microseconds (None: not
    measured), note}."""
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

    log2 = capacity.bit_length() - 1
    tree_op = f"index update + sample, capacity 2^{log2}, B={batch}"
    sampler_op = f"PrioritizedSampler update + sample (+ weights), capacity 2^{log2}, B={batch}"
    records = []
    for impl in ("triton", "torch"):
        if impl == "triton" and not measure_triton:
            records += [record(tree_op, impl, None, NO_CUDA), record(sampler_op, impl, None, NO_CUDA)]
            continue
        tree = SumTree(capacity, device, validate=False, impl=impl)
        tree.reset(priorities)
        records.append(record(tree_op, impl, median_ms(tree_step(tree), device) * 1e3))
        del tree
        sampler = PrioritizedSampler(
            capacity, device, alpha=ALPHA, beta0=BETA0, eps=EPS, validate=False, impl=impl, index="sum_tree"
        )
        sampler.priorities.reset(priorities)
        records.append(record(sampler_op, impl, median_ms(sampler_step(sampler), device) * 1e3))
        del sampler
    flat = FlatPriorities(capacity, device, validate=False)
    flat.reset(priorities)
    records.append(record(tree_op, "flat", median_ms(tree_step(flat), device) * 1e3))
    del flat
    sampler = PrioritizedSampler(capacity, device, alpha=ALPHA, beta0=BETA0, eps=EPS, validate=False, index="flat")
    sampler.priorities.reset(priorities)
    records.append(record(sampler_op, "flat", median_ms(sampler_step(sampler), device) * 1e3))
    del sampler
    made, reason = torchrl_sampler(capacity, device)
    if made is None:
        records.append(record(sampler_op, "torchrl", None, reason))
    else:
        sampler, storage = made
        sampler.update_priority(torch.arange(capacity, device=device), priorities)

        def torchrl_step():
            sampler.update_priority(idx, td)
            sampler.sample(storage, batch)

        records.append(record(sampler_op, "torchrl", median_ms(torchrl_step, device) * 1e3))
    return records


def target_records(device: torch.device, measure_triton: bool) -> list[dict]:
    """V-trace and n-step returns, Triton vs the PyTorch reference. -> records as replay_records."""
    gen = torch.Generator(device).manual_seed(1)
    T, B = 32, 4096
    log_rhos = torch.randn(T, B, device=device, generator=gen) * 0.5
    discounts = 0.99 * (torch.rand(T, B, device=device, generator=gen) > 0.02).float()
    rewards, values = (torch.randn(T, B, device=device, generator=gen) for _ in range(2))
    bootstrap = torch.randn(B, device=device, generator=gen)
    terminated = torch.rand(T, B, device=device, generator=gen) < 0.01
    truncated = torch.rand(T, B, device=device, generator=gen) < 0.005
    calls = {
        f"V-trace, T={T}, B={B}": lambda impl: vtrace(
            log_rhos, discounts, rewards, values, bootstrap, 1.0, 1.0, impl=impl
        ),
        f"n-step returns (n=3), T={T}, N={B}": lambda impl: nstep_returns(
            rewards, terminated, truncated, 0.99, 3, impl=impl
        ),
    }
    records = []
    for name, call in calls.items():
        records.append(
            record(name, "triton", median_ms(lambda: call("triton"), device) * 1e3)
            if measure_triton
            else record(name, "triton", None, NO_CUDA)
        )
        records.append(record(name, "torch", median_ms(lambda: call("torch"), device) * 1e3))
    return records


def table_rows(records: list[dict]) -> list[list[str]]:
    """One Markdown row per operation: the Triton cell (with its speed-up over the reference),
    the reference, torchrl; "—" where an implementation does not apply."""
    by_op: dict[str, dict[str, dict]] = {}
    for r in records:
        by_op.setdefault(r["operation"], {})[r["impl"]] = r
    rows = []
    for operation, impls in by_op.items():
        cells = []
        for impl in IMPLS:
            r = impls.get(impl)
            if r is None:
                cells.append("—")
            elif r["microseconds"] is None:
                cells.append(r["note"])
            else:
                text = f"{r['microseconds']:,.0f} µs"
                reference = impls.get("torch", {}).get("microseconds")
                if impl == "triton" and reference:
                    text += f" ({reference / r['microseconds']:.0f}x)"
                cells.append(text)
        rows.append([operation, *cells])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--log2-capacities", type=int, nargs="+", default=[20, 23])
    parser.add_argument(
        "--csv",
        default=None,
        help="also write the raw times to this CSV file (device, operation, impl, microseconds, note)",
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    measure_triton = device.type == "cuda" and not INTERPRETING
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"device: {name}; torch {torch.__version__}", flush=True)
    rows = CsvRows(args.csv, ["device", "operation", "impl", "microseconds", "note"])

    def measured():
        for log2 in args.log2_capacities:
            yield from replay_records(2**log2, args.batch, device, measure_triton)
        yield from target_records(device, measure_triton)

    records = []
    for r in measured():
        records.append(r)
        rows.write(
            device=str(device),
            operation=r["operation"],
            impl=r["impl"],
            note=r["note"],
            microseconds=None if r["microseconds"] is None else f"{r['microseconds']:.2f}",
        )
    rows.close()
    header = ["", "Triton kernel", "PyTorch reference", "flat index", "torchrl PrioritizedSampler"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in table_rows(records):
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
