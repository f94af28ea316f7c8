"""What a checkpoint costs each replica: writing its replays and its part of the set, and reading
them back at a resume.

    python bench/checkpoint.py [--replicas 1 2] [--capacity 1000000] [--obs-dim 105] [--act-dim 8] [--dir DIR]

For each number of replicas G, starts G processes (gloo, sharing the machine as G replicas on one
CPU machine do), each holding a full V-learner replay (obs, next_obs, action, reward, discount:
4·(2·obs + act + 2) bytes a transition) and a full P-learner replay (obs) of `capacity`
transitions at Ant's sizes by default, filled with random numbers, and times in each, all
replicas at once into one run directory: the two replays' bulk files (pql.bulk.write_bulk, what
each learner writes when it hands in its state, one after the other here), the set's commit
(pql.runtime.shards.commit: each rank's shard, then rank 0's checkpoint.pt), and at the resume
the set's checks (every shard's and bulk file's size and CRC-32) and the reading of the replays.
Prints one row per rank: bytes written, and seconds for each part.
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

from pql.bulk import descriptions, locate, read_bulk, stem_of, write_bulk
from pql.checkpoint import FILE_NAME, load_checkpoint
from pql.runtime.distributed import Replicas
from pql.runtime.shards import commit, replica_state


def replays(capacity: int, obs_dim: int, act_dim: int) -> dict[str, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    obs = torch.rand(capacity, obs_dim, generator=g)
    return {
        "v_learner": {
            "obs": obs,
            "next_obs": torch.rand(capacity, obs_dim, generator=g),
            "action": torch.rand(capacity, act_dim, generator=g),
            "reward": torch.rand(capacity, generator=g),
            "discount": torch.rand(capacity, generator=g),
        },
        "p_learner": {"obs": obs.clone()},
    }


def worker(rank: int, world: int, port: int, args, directory: str, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    replicas = Replicas(rank, world, rank, world)
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    data = replays(args.capacity, args.obs_dim, args.act_dim)
    if world > 1:
        dist.barrier()
    start = time.perf_counter()
    roles = {
        name: {"replay": {"bulk": write_bulk(directory, stem_of(f"replay-{name}", rank), tensors)}}
        for name, tensors in data.items()
    }
    bulk_s = time.perf_counter() - start
    state = {"counters": {"env_steps": 0}, "roles": roles}
    header = {"algo": "pql", "task": "Ant", "config": {}, "replicas": world}
    path = os.path.join(directory, FILE_NAME)
    start = time.perf_counter()
    commit(replicas, path, header, state)
    commit_s = time.perf_counter() - start
    written = sum(d["bytes"] for d in descriptions(state))
    shard = os.path.join(directory, load_checkpoint(path)["shards"][rank - 1]["file"]) if rank else path
    if world > 1:
        dist.barrier()
    start = time.perf_counter()
    resumed = replica_state(load_checkpoint(path), path, rank)
    locate(resumed, path)  # every bulk file's size and CRC-32
    check_s = time.perf_counter() - start
    start = time.perf_counter()
    for name, tensors in data.items():
        description = resumed["roles"][name]["replay"]["bulk"]
        read_bulk(description["file"], description, {k: torch.empty_like(t) for k, t in tensors.items()})
    read_s = time.perf_counter() - start
    out[rank] = (written + os.path.getsize(shard), bulk_s, commit_s, check_s, read_s)
    if world > 1:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--obs-dim", type=int, default=105)
    parser.add_argument("--act-dim", type=int, default=8)
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    args = parser.parse_args()
    print(
        "| replicas | rank | bytes written | replays written (s) | set committed (s) | checked at resume (s) "
        "| replays read (s) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for world in args.replicas:
        with tempfile.TemporaryDirectory(dir=args.dir) as directory:
            out = mp.Manager().dict()
            port = 29500 + os.getpid() % 1000 + world
            mp.start_processes(worker, args=(world, port, args, directory, out), nprocs=world, start_method="spawn")
            for rank in range(world):
                size, bulk_s, commit_s, check_s, read_s = out[rank]
                cells = [f"{size / 1e9:.2f} GB", f"{bulk_s:.1f}", f"{commit_s:.2f}", f"{check_s:.1f}", f"{read_s:.1f}"]
                print(f"| {world} | {rank} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
