"""Data-parallel replicas under torchrun, on torch.distributed (NCCL on CUDA, gloo on CPU).

`torchrun --nproc_per_node=G [--nnodes=M ...] train.py ...` starts G·M processes; each is the
main process of one replica, a whole run of its own: its own envs (seeded by rank), replay and
roles on its own device (cuda:<LOCAL_RANK>, or the CPU). Replicas meet only in collectives of
the same role, one process group per role (`role_group`):

* learners average their gradients before every optimiser step, so every replica holds the same
  networks at every update;
* actors merge the batch statistics of their observations (and with algo.return_scaling of their
  discounted returns) at every step, so every replica holds the same statistics; and agree,
  every FINISH_CHECK_EVERY steps, on whether any
  replica asked to finish and why (time limit or solved, or a stop signal: a stop code of
  pql/runtime/stopping.py), so they all stop at the same step and end the same way.

A collective pairs the k-th call of each replica, so every replica makes the same number of
each: the env-step budget is the same for all, the finish is agreed, and after the actors stop
the learners catch up to the ratios' final counts, which are the same everywhere.

The role groups rendezvous on torchrun's TCPStore (MASTER_ADDR:MASTER_PORT, set by torchrun for
every process and inherited by the role processes), each under a prefix of its own. Plain
`python train.py` makes no process group: `Replicas.world == 1` and every collective is a no-op.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

FINISH_CHECK_EVERY = 16  # actor steps between agreements on finishing (a host round trip each)
SEED_STRIDE = 1_000_003  # replica r seeds its envs and samplers with seed + r * SEED_STRIDE
CAUSE_WAIT_S = 15.0  # how long a replica that lost the others waits for the failing one's cause


class ReplicaLost(RuntimeError):
    """This replica stops because another one did: a collective with it failed. Once the run
    ends, str() is the failing replica's own cause when it posted one (`FailureBoard`)."""


@contextlib.contextmanager
def _collective(what: str):
    """Turn the failure of a collective (gloo's, NCCL's and the store's errors are RuntimeErrors)
    into ReplicaLost: when one replica stops, the others learn it here."""
    try:
        yield
    except RuntimeError as e:
        raise ReplicaLost(f"{what} with the other replicas failed (did one stop?): {str(e).splitlines()[0]}") from e


@dataclass(frozen=True)
class Replicas:
    """This process's place among the replicas (rank 0 of world 1 without torchrun)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1

    @staticmethod
    def from_env() -> Replicas:
        """Read torchrun's environment (role processes inherit it from their replica's main)."""
        env = os.environ
        if "WORLD_SIZE" not in env or "TORCHELASTIC_RUN_ID" not in env:
            return Replicas()
        return Replicas(
            int(env["RANK"]),
            int(env["WORLD_SIZE"]),
            int(env["LOCAL_RANK"]),
            int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])),
        )

    @property
    def lead(self) -> bool:
        """Rank 0: the replica that evaluates, logs and checkpoints."""
        return self.rank == 0

    def budget_spent(self, env_steps: int, max_env_steps: int) -> bool:
        """Whether this replica has stepped its share of runtime.max_env_steps, which counts the
        env steps of every replica (each steps the same number)."""
        return env_steps * self.world >= max_env_steps

    def seed(self, seed: int) -> int:
        """The seed of this replica's data (envs, samplers, exploration) for the run's `seed`."""
        return seed + self.rank * SEED_STRIDE


def _store(prefix: str, timeout_s: float) -> dist.Store:
    """A client of torchrun's store, keys under `prefix` (unique to this launch of the job)."""
    env = os.environ
    store = dist.TCPStore(
        env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=False, timeout=timedelta(seconds=timeout_s)
    )
    launch = f"pql/{env['TORCHELASTIC_RUN_ID']}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return dist.PrefixStore(f"{launch}/{prefix}", store)


def _backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def init_replicas(replicas: Replicas, timeout_s: float) -> None:
    """The main process's process group (gloo, among the replicas' main processes): role groups
    of roles that run in the main process are made from it."""
    if replicas.world > 1 and not dist.is_initialized():
        with _collective("the replicas' rendezvous"):
            dist.init_process_group(
                "gloo",
                store=_store("main", timeout_s),
                rank=replicas.rank,
                world_size=replicas.world,
                timeout=timedelta(seconds=timeout_s),
            )


def spread(replicas: Replicas, value: int) -> tuple[int, int]:
    """(lowest, highest) `value` of the replicas' main processes, in one all-reduce of the main
    group (every replica must ask, at the same point)."""
    if replicas.world == 1:
        return value, value
    t = torch.tensor([-value, value])
    with _collective("the comparison of the replicas' starts"):
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return -int(t[0]), int(t[1])


def lead_run_dir(replicas: Replicas, run_dir: str) -> str:
    """Rank 0's run directory, absolute, for every replica (each writes its checkpoint shard
    there, and checkpoint=auto looks there), in one broadcast of the main group."""
    return run_dir if replicas.world == 1 else str(from_lead(replicas, os.path.abspath(run_dir)))


def gather_at_lead(replicas: Replicas, value: object) -> list | None:
    """Every replica's `value`, in rank order, on rank 0 (None elsewhere), in one gather of the
    main group (every replica must call it, at the same point)."""
    if replicas.world == 1:
        return [value]
    gathered: list | None = [None] * replicas.world if replicas.lead else None
    with _collective("the gathering of the replicas' checkpoint shards"):
        dist.gather_object(value, gathered, dst=0)
    return gathered


def from_lead(replicas: Replicas, value: object) -> object:
    """Rank 0's `value` on every replica, in one broadcast of the main group."""
    if replicas.world == 1:
        return value
    box = [value]
    with _collective("a broadcast from rank 0"):
        dist.broadcast_object_list(box, src=0)
    return box[0]


def close_replicas() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


class ReplicaGroup:
    """One role's collectives across the replicas; with one replica every one is a no-op.
    `device` carries the tensors (NCCL on CUDA), `host` the decisions the host reads (gloo).
    `ordered`: the group shares its process with other roles' groups (sequential mode), so the
    role must not let timing decide when it makes a collective (see device.InFlight)."""

    def __init__(self, replicas: Replicas = Replicas(), device=None, host=None, ordered: bool = False):
        self.replicas, self.device, self.host, self.ordered = replicas, device, host, ordered

    @property
    def world(self) -> int:
        return self.replicas.world

    @torch.no_grad()
    def average_gradients(self, params) -> None:
        """Replace each parameter's gradient by its mean over the replicas (a missing gradient
        counts as zero)."""
        if self.world == 1:
            return
        params = list(params)
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        for p, g in zip(params, self._mean(grads)):
            p.grad = g

    def gradient_mean(self):
        """The replicas' mean of a list of gradients (pql.algos.off_policy.GradientMean); None with one
        replica, where there is nothing to average."""
        return None if self.world == 1 else self._mean

    def _mean(self, grads) -> list[torch.Tensor]:
        """Each gradient's mean over the replicas, in one all-reduce."""
        flat = torch.cat([g.reshape(-1) for g in grads])
        with _collective("the gradient all-reduce"):
            dist.all_reduce(flat, group=self.device)
        flat /= self.world
        return [m.view_as(g) for g, m in zip(grads, flat.split([g.numel() for g in grads]))]

    @torch.no_grad()
    def broadcast(self, module: torch.nn.Module) -> None:
        """Give every replica rank 0's parameters and buffers."""
        if self.world == 1:
            return
        with _collective("the broadcast of rank 0's networks"):
            for t in [*module.parameters(), *module.buffers()]:
                dist.broadcast(t.data, src=0, group=self.device)

    @torch.no_grad()
    def update_normalizer(self, normalizer, obs: torch.Tensor) -> None:
        """Update `normalizer` with this step's observations of every replica: the replicas sum
        their counts, sums and sums of squares (float64), so every normaliser gets the same update."""
        if self.world == 1:
            normalizer.update(obs)
            return
        x = obs.double()
        moments = torch.cat([x.new_tensor([x.shape[0]]), x.sum(0), x.pow(2).sum(0)])
        with _collective("the observation-statistics all-reduce"):
            dist.all_reduce(moments, group=self.device)
        n, s, sq = moments[0], *moments[1:].chunk(2)
        mean = s / n
        normalizer.update_moments(n.float(), mean.float(), (sq / n - mean.pow(2)).clamp_min(0).float())

    def update_return_scale(self, return_scale, returns: torch.Tensor) -> None:
        """Update `return_scale` (pql.nets.ReturnScale) with this step's discounted returns of
        every replica: their counts, sums and sums of squares summed (float64), their largest and
        (negated) smallest maxed, so every replica's statistics get the same update."""
        if self.world == 1:
            return_scale.update(returns)
            return
        x = returns.double()
        moments = torch.stack([x.new_tensor(float(x.shape[0])), x.sum(), x.pow(2).sum()])
        smallest, largest = torch.aminmax(x)
        extremes = torch.stack([largest, -smallest])
        with _collective("the return-statistics all-reduce"):
            dist.all_reduce(moments, group=self.device)
            dist.all_reduce(extremes, op=dist.ReduceOp.MAX, group=self.device)
        n, s, sq = moments
        mean = s / n
        return_scale.update_moments(
            n.float(),
            mean.float(),
            (sq / n - mean.pow(2)).clamp_min(0).float(),
            extremes[0].float(),
            -extremes[1].float(),
        )

    def agree(self, code: int) -> int:
        """The largest stop code any replica asks for (pql/runtime/stopping.py; 0: none), in one
        all-reduce on the host (every replica must ask, at the same point)."""
        return self.agree_on(code, cut=False)[0]

    def agree_on(self, code: int, cut: bool) -> tuple[int, bool]:
        """(the largest stop code any replica asks for, whether any asks to cut every replica's
        state here for a checkpoint), in one all-reduce on the host (every replica must ask, at
        the same point)."""
        if self.world == 1:
            return code, cut
        t = torch.tensor([code, int(cut)])
        with _collective("the agreement on finishing"):
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.host)
        return int(t[0]), bool(t[1])


def role_group(replicas: Replicas, role: str, device: torch.device, timeout_s: float) -> ReplicaGroup:
    """The group of role `role` of every replica. In a role process of its own it is that
    process's default group, met on torchrun's store under the role's name; in a replica's main
    process (sequential mode, IMPALA's and PPO's learner) a new group of the main group (every
    replica makes its groups in the same order). A CPU device needs no separate host group."""
    if replicas.world == 1:
        return ReplicaGroup()
    timeout = timedelta(seconds=timeout_s)
    backend = _backend(torch.device(device))
    ordered = dist.is_initialized()
    with _collective(f"the {role}'s rendezvous"):
        if ordered:
            group = dist.new_group(backend=backend, timeout=timeout)
        else:
            dist.init_process_group(
                backend, store=_store(role, timeout_s), rank=replicas.rank, world_size=replicas.world, timeout=timeout
            )
            group = dist.group.WORLD
        host = group if backend == "gloo" else dist.new_group(backend="gloo", timeout=timeout)
    return ReplicaGroup(replicas, group, host, ordered)


class RankBoard:
    """What each replica's main process posts for rank 0 to show (its ratios): keys in torchrun's
    store, read without waiting. Rank 0 shows the latest posting of every other rank."""

    def __init__(self, replicas: Replicas, timeout_s: float):
        self.replicas = replicas
        self.store = _store("board", timeout_s) if replicas.world > 1 else None

    def post(self, scalars: dict) -> None:
        if self.store is not None and not self.replicas.lead:
            self.store.set(f"rank{self.replicas.rank}", json.dumps(scalars))

    def read(self) -> dict:
        """{rank: scalars} of the other ranks that have posted."""
        if self.store is None:
            return {}
        keys = [f"rank{r}" for r in range(1, self.replicas.world)]
        return {int(k[4:]): json.loads(self.store.get(k)) for k in keys if self.store.check([k])}


# When a role of one replica fails, the other replicas' collectives fail a moment later
# (ReplicaLost), and torchrun may stop the failing replica before it has printed. So the failing
# replica posts its cause in torchrun's store, and a replica that merely lost the others reports
# that cause rather than its own symptom. A store that is gone too leaves each its local report.


def post_failure(replicas: Replicas, cause: str, timeout_s: float) -> None:
    if replicas.world > 1:
        with contextlib.suppress(RuntimeError):
            _store("failures", timeout_s).set(f"rank{replicas.rank}", cause)


def failure_elsewhere(replicas: Replicas, timeout_s: float, wait_s: float = CAUSE_WAIT_S) -> str | None:
    """The first cause another replica posts within wait_s seconds (None: none did)."""
    if replicas.world == 1:
        return None
    keys = [f"rank{r}" for r in range(replicas.world) if r != replicas.rank]
    deadline = time.monotonic() + wait_s
    with contextlib.suppress(RuntimeError):
        store = _store("failures", timeout_s)
        while time.monotonic() < deadline:
            posted = [k for k in keys if store.check([k])]
            if posted:
                return store.get(posted[0]).decode()
            time.sleep(0.1)
    return None
