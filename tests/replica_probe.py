"""What one replica does, saved for tests/test_distributed.py to compare across ranks:

    torchrun --standalone --nproc_per_node=2 tests/replica_probe.py collectives OUT
    torchrun --standalone --nproc_per_node=2 tests/replica_probe.py train OUT key=value ...

`train` runs the algorithm's real runner (its roles, processes and collectives) to the end of
its env-step budget and saves every rank's full training state (`runner.checkpoint()`) as
OUT/rank<r>.pt, which train.py would write for rank 0 only.
"""

import os
import sys

import torch
from conftest import compose_config

from pql.config import announce, resolve
from pql.envs import ObsLayout, build_env
from pql.nets import ObsNormalizer, ReturnScale
from pql.runtime.distributed import Replicas, close_replicas, init_replicas, role_group, spread
from pql.runtime.settings import load_runner, run_settings

TIMEOUT_S = 120


class Unattended:
    """The schedule a runner gets here: no evaluation, checkpoint or log, and no early stop."""

    def stop_code(self) -> int:
        return 0

    def tick(self, final: bool = False) -> None:
        return None


def train_replica(replicas: Replicas, out: str, overrides: list[str]) -> dict:
    cfg = compose_config(overrides, out)
    resolved = resolve(cfg, replicas.local_rank if replicas.world > 1 else None)
    announce(resolved, replicas.world)
    cfg, device = resolved.config, torch.device(resolved.devices.main)
    torch.manual_seed(replicas.seed(cfg.runtime.seed))
    env = build_env(cfg.task, 1, device, 0)
    settings = run_settings(cfg, device, replicas)
    obs = ObsLayout.of(env, cfg.task.privileged_critic)
    runner = load_runner(settings.algo)(settings.runner, device, obs, env.act_dim, None)
    try:
        runner.run(Unattended())
        return runner.checkpoint()
    finally:
        runner.close()


def collectives(replicas: Replicas) -> dict:
    """Each rank's own data, and what the collectives made of it."""
    group = role_group(replicas, "probe", torch.device("cpu"), TIMEOUT_S)
    g = torch.Generator().manual_seed(replicas.rank)
    batches = [
        torch.randn(5 + 3 * replicas.rank, 4, generator=g) * (1 + replicas.rank) + replicas.rank for _ in range(3)
    ]
    normalizer = ObsNormalizer(4)
    for obs in batches:
        group.update_normalizer(normalizer, obs)
    # Returns of both signs, the largest rank 1's and the smallest rank 0's.
    returns = [torch.randn(6 + replicas.rank, generator=g) * 4 for _ in range(3)]
    returns[1][0] = 40.0 if replicas.rank == 1 else -30.0
    return_scale = ReturnScale(-5.0, 5.0)
    for batch in returns:
        group.update_return_scale(return_scale, batch)
    net = torch.nn.Linear(4, 2)
    group.broadcast(net)
    start = {k: v.clone() for k, v in net.state_dict().items()}
    x = torch.randn(7, 4, generator=g)
    net(x).pow(2).sum().backward()
    group.average_gradients(net.parameters())
    return {
        "batches": batches,
        "normalizer": normalizer.state_dict(),
        "returns": returns,
        "return_scale": return_scale.state_dict(),
        "start": start,
        "x": x,
        "grads": [p.grad for p in net.parameters()],
        "agreed_rank1": group.agree(143 if replicas.rank == 1 else 1),
        "agreed_none": group.agree(0),
        "spread": spread(replicas, 10 * replicas.rank),
    }


def main() -> None:
    what, out, overrides = sys.argv[1], sys.argv[2], sys.argv[3:]
    replicas = Replicas.from_env()
    init_replicas(replicas, TIMEOUT_S)
    try:
        state = collectives(replicas) if what == "collectives" else train_replica(replicas, out, overrides)
    finally:
        close_replicas()
    torch.save(state, os.path.join(out, f"rank{replicas.rank}.pt"))


if __name__ == "__main__":
    main()
