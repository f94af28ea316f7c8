"""What data-parallel replicas pay per update: the gradient all-reduce against the update itself.

    python bench/distributed.py [--task Ant] [--device auto] [--replicas 2 4 8] [--seconds 5] [--csv PATH]

For each number of replicas G (default: 2 on a CPU, gloo; on CUDA every G from 2 to the GPUs
there are, NCCL), starts G processes (one per GPU, or sharing the CPU's cores) with the task's
default networks and batch size for the device, and measures in each: critic and policy updates/s
alone (bench/learner.py's `learner_rates`, no collective), then the all-reduce that averages the
gradients of each network (pql.runtime.distributed.ReplicaGroup.average_gradients, what the
learners call) per call. Prints, per network: parameters, bytes per all-reduce, all-reduce ms,
update ms and the all-reduce's share of an update (all-reduce / (update + all-reduce)), rank 0's
figures. On a CPU the G processes share the cores, as G replicas on one CPU machine would.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.learner import CsvRows, learner_rates, synchronize
from pql.config import load_config, resolve
from pql.envs import ObsLayout
from pql.runtime.distributed import ReplicaGroup, Replicas
from pql.runtime.off_policy.roles import make_rules


def allreduce_ms(group: ReplicaGroup, module: torch.nn.Module, device, seconds: float) -> float:
    """Milliseconds per gradient average of `module` (its gradients set once, then averaged over
    and over: the same bytes every call)."""
    for p in module.parameters():
        p.grad = torch.randn_like(p)
    params = list(module.parameters())
    for _ in range(3):
        group.average_gradients(params)
    synchronize(device)
    dist.barrier(group=group.host)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        group.average_gradients(params)
        calls += 1
    synchronize(device)
    elapsed = time.perf_counter() - start
    # Every rank must make as many calls: agree on the smallest count by one more round of calls.
    counts = torch.tensor([calls])
    dist.all_reduce(counts, op=dist.ReduceOp.MAX, group=group.host)
    for _ in range(int(counts.item()) - calls):
        group.average_gradients(params)
    return 1e3 * elapsed / calls


def worker(rank: int, world: int, port: int, args, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cpu = args.device == "cpu" or not torch.cuda.is_available()
    device = torch.device("cpu") if cpu else torch.device("cuda", rank)
    if cpu:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    else:
        torch.cuda.set_device(device)
    dist.init_process_group("gloo" if cpu else "nccl", rank=rank, world_size=world)
    host = dist.new_group(backend="gloo") if not cpu else dist.group.WORLD
    group = ReplicaGroup(Replicas(rank, world, rank, world), dist.group.WORLD, host)

    import tasks

    raw = {
        "task": {"name": args.task},
        "algo": {"name": "pql"},
        "runtime": {"device": str(device)},
        "run_dir": tempfile.gettempdir(),
    }
    with open(os.devnull, "w") as quiet:
        stdout, sys.stdout = sys.stdout, quiet  # tasks.make's backend line, once per process
        cfg = resolve(load_config(raw)).config
        probe = tasks.make(args.task, num_envs=1, device=device, seed=0)
        sys.stdout = stdout
    obs_dim, act_dim = probe.obs_dim, probe.act_dim
    probe.close()
    critic_rate, policy_rate = learner_rates(cfg, obs_dim, act_dim, device, args.seconds)
    rules = make_rules(cfg.algo, ObsLayout.shared(obs_dim), act_dim)
    rows = []
    for name, module, rate in (
        ("critic", rules.make_critic(), critic_rate),
        ("policy", rules.make_policy(), policy_rate),
    ):
        module = module.to(device)
        ms = allreduce_ms(group, module, device, args.seconds)
        numel = sum(p.numel() for p in module.parameters())
        rows.append(
            {
                "network": name,
                "params": numel,
                "bytes": 4 * numel,
                "allreduce_ms": ms,
                "update_ms": 1e3 / rate,
                "batch_size": cfg.algo.batch_size,
            }
        )
    if rank == 0:
        out.update(device=str(device), rows=rows)
    dist.destroy_process_group()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="Ant")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument(
        "--replicas",
        type=int,
        nargs="*",
        default=None,
        help="numbers of replicas (default: 2 on a CPU, 2..GPUs on CUDA)",
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="timing window of each measurement")
    parser.add_argument("--csv", default=None, help="also write the figures to this CSV file")
    args = parser.parse_args()
    on_cuda = args.device != "cpu" and torch.cuda.is_available()
    gpus = torch.cuda.device_count() if on_cuda else 0
    counts = args.replicas or (list(range(2, gpus + 1)) if on_cuda else [2])
    if on_cuda and gpus < 2:
        parser.error(f"this machine has {gpus} GPU; data-parallel replicas need 2 or more (or --device cpu)")
    bad = [g for g in counts if g < 2 or (on_cuda and g > gpus)]
    if bad:
        parser.error(f"--replicas {bad}: each must be >= 2" + (f" and <= {gpus} (GPUs here)" if on_cuda else ""))
    columns = [
        "task",
        "device",
        "replicas",
        "network",
        "batch_size",
        "params",
        "bytes",
        "allreduce_ms",
        "update_ms",
        "allreduce_share",
    ]
    rows = CsvRows(args.csv, columns)
    print(
        f"{'G':>3} {'network':<8} {'params':>9} {'bytes':>10} {'all-reduce ms':>14} {'update ms':>10} "
        f"{'share':>7}  ({args.task}, default networks and batch size, rank 0)"
    )
    for world in counts:
        out = mp.Manager().dict()
        mp.spawn(worker, args=(world, free_port(), args, out), nprocs=world, join=True)
        for r in out["rows"]:
            share = r["allreduce_ms"] / (r["update_ms"] + r["allreduce_ms"])
            print(
                f"{world:>3} {r['network']:<8} {r['params']:>9,} {r['bytes']:>10,} {r['allreduce_ms']:>14.3f} "
                f"{r['update_ms']:>10.3f} {100 * share:>6.1f}%  on {out['device']} (batch {r['batch_size']})",
                flush=True,
            )
            rows.write(
                task=args.task,
                device=out["device"],
                replicas=world,
                network=r["network"],
                batch_size=r["batch_size"],
                params=r["params"],
                bytes=r["bytes"],
                allreduce_ms=f"{r['allreduce_ms']:.6g}",
                update_ms=f"{r['update_ms']:.6g}",
                allreduce_share=f"{share:.4g}",
            )
    rows.close()


if __name__ == "__main__":
    main()
