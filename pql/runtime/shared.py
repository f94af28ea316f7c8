"""What the processes of a run share, made by the main process before any role starts (so that
it can be handed to them, pickled: shared memory on CPU, CUDA IPC on GPU): named counters and
statistics, a ring of staged data, versioned weights, and the supervisor's queues."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import torch

from tasks.base import MAX_EPISODE_METRICS


class _Entry:
    """One named value of a `SharedValues` tensor: `counters.env_steps += n` reads and writes
    shared memory. Each entry has one writer, so a read-modify-write needs no lock."""

    def __init__(self, index: int):
        self.index = index

    def __get__(self, obj, owner=None):
        return self if obj is None else obj.tensor[self.index].item()

    def __set__(self, obj, value) -> None:
        obj.tensor[self.index] = value


class SharedValues:
    """A small tensor in shared memory whose entries are a subclass's attributes annotated `int`
    or `float` (typed for mypy; a subclass's entries follow its bases'). dtype: int64 for
    counters, float64 for statistics."""

    dtype = torch.int64
    index: ClassVar[dict[str, int]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        names = [
            name
            for klass in reversed(cls.__mro__)
            for name, hint in inspect.get_annotations(klass).items()
            if hint in ("int", "float")
        ]
        cls.index = {name: i for i, name in enumerate(names)}
        for name, i in cls.index.items():
            setattr(cls, name, _Entry(i))

    def __init__(self):
        self.tensor = torch.zeros(len(self.index), dtype=self.dtype).share_memory_()

    def as_dict(self, names=None) -> dict:
        """{entry: value} of `names` (default: every entry), as plain numbers."""
        values = self.tensor.tolist()
        return {name: values[i] for name, i in self.index.items() if names is None or name in names}

    def load(self, values: dict) -> None:
        for name, value in values.items():
            setattr(self, name, value)


class RunCounters(SharedValues):
    """The counters of every runner with role processes (each has one writer):

    stop                 1: every role leaves its loop (main, or a failing role)
    checkpoint_request   id of the latest checkpoint the main process asked the roles for (main)
    finish               the stop code the main process asks the actor to finish early for (main:
                         pql/runtime/stopping.py, 0: none; time limit or solved, or a stop signal)
    env_steps            env transitions stepped by this replica's actor (actor)
    episodes             training episodes finished (actor)
    actor_done           1 once the actor has finished: its budget spent, or asked to finish (actor)
    finished_by          the stop code the replicas' actors agreed on when they finished early (actor)

    Runners add their own work counts, name those a checkpoint keeps (`persistent`) and those
    whose change is progress for the stall check (`progress`, see waiting.Waiter).
    """

    stop: int
    checkpoint_request: int
    finish: int
    env_steps: int
    episodes: int
    actor_done: int
    finished_by: int
    persistent: ClassVar[tuple[str, ...]] = ("env_steps", "episodes")
    progress: ClassVar[tuple[str, ...]] = ()


class RunStats(SharedValues):
    """The latest mean return and length of the training episodes (writer: actor), nan until an
    episode of this launch has finished (so no 0 is logged as a return), and in `train_metrics`
    [MAX_EPISODE_METRICS] float64 the means of the env's episode metrics in their order
    (tasks.base.BatchedEnv.episode_metrics; the rest unused); runners add their losses."""

    dtype = torch.float64
    train_return: float
    train_length: float

    def __init__(self):
        super().__init__()
        self.train_return = self.train_length = math.nan
        self.train_metrics = torch.zeros(MAX_EPISODE_METRICS, dtype=self.dtype).share_memory_()


Counters = TypeVar("Counters", bound="RunCounters")
Stats = TypeVar("Stats", bound="RunStats")


@dataclass
class SharedState(Generic[Counters, Stats]):
    """Typed by its runner's counters and statistics: SharedState[RatioCounters, LearnerStats] for
    PQL's roles, SharedState[QueueCounters, RunStats] for IMPALA's."""

    counters: Counters
    stats: Stats
    ring: dict  # {field: [slots, ...]} on the device: what the actor hands on
    weights: dict  # {name: SharedWeights}, each on its writer's device
    wakeup: Wakeup | None = None  # how roles wake each other (None in one process)
    errors: Any = None  # multiprocessing queue of (role, traceback) from failing roles
    checkpoint_parts: Any = None  # multiprocessing queue of (request id, role, serialized state)

    def release(self) -> None:
        """Drop this process's references to the ring and the weights. Each role process must,
        before it exits: torch counts a role's hold on the main process's CUDA tensors and gives
        the count back only when the role frees them, and a role that exits still holding them
        never does (torch then warns, as the main process exits, that shared CUDA tensors were not
        released; measured on an H200, docs/gpu.md)."""
        self.ring, self.weights = {}, {}

    @property
    def ring_slots(self) -> int:
        return next(iter(self.ring.values())).shape[0]

    def add(self, counter: str, by: int = 1) -> None:
        """Count work done (`counter`: one this role writes) and wake the roles waiting on it."""
        setattr(self.counters, counter, getattr(self.counters, counter) + by)
        self.wake()

    def wake(self) -> None:
        """Wake every role waiting for a count to change (in one process there is none)."""
        if self.wakeup is not None:
            self.wakeup.wake_all()


def alloc_tensors(spec: dict, leading: tuple, device) -> dict:
    """Zeroed tensors {field: [*leading, *shape]} of spec {field: (shape, dtype)} on `device`."""
    return {k: torch.zeros((*leading, *shape), dtype=dtype, device=device) for k, (shape, dtype) in spec.items()}


def make_shared_state(
    counters: Counters,
    stats: Stats,
    ring_spec: dict,
    ring_shape: tuple,
    ring_device,
    weights: dict,
    roles: tuple[str, ...],
    ctx=None,
) -> SharedState[Counters, Stats]:
    """ring_shape: the leading dimensions of every ring field ((slots, num_envs) or (slots, T, N)),
    on the device of the role that writes it; weights: {name: SharedWeights}, each on its writer's
    device; roles: the names of the role processes that wait; ctx: a multiprocessing context, None
    for one process."""
    ring = alloc_tensors(ring_spec, ring_shape, ring_device)
    if torch.device(ring_device).type == "cpu":
        for t in ring.values():
            t.share_memory_()
    return SharedState(
        counters=counters,
        stats=stats,
        ring=ring,
        weights=weights,
        wakeup=Wakeup(ctx, roles) if ctx else None,
        errors=ctx.Queue() if ctx else None,
        checkpoint_parts=ctx.Queue() if ctx else None,
    )


class Wakeup:
    """How a role that counted work wakes the roles waiting for a count, without waiting for them.

    multiprocessing's Condition.notify blocks until every sleeper has woken: a context switch that
    the notifying role paid on each count, 0.4 ms of a 4.3-ms critic update on 2 busy cores
    (docs/tuning.md). Here each role sleeps on a semaphore of its own and raises a shared flag
    first; a role that counted lowers the flags that are up, releases their semaphores and goes
    on. Two roles that count at once may both release one semaphore: that sleeper's next sleep
    then returns at once, and its caller checks its predicate again.
    """

    def __init__(self, ctx, roles: tuple[str, ...]):
        self.roles = {name: i for i, name in enumerate(roles)}
        self.asleep = torch.zeros(len(roles), dtype=torch.int32).share_memory_()
        self.semaphores = [ctx.Semaphore(0) for _ in roles]

    def sleep(self, role: str, ready: Callable[[], bool], timeout: float) -> None:
        """Sleep until woken or `timeout`, unless `ready()` holds once the flag is up: a count made
        before the flag is seen by that check, one made after it releases the semaphore."""
        i = self.roles[role]
        self.asleep[i] = 1
        try:
            if not ready():
                self.semaphores[i].acquire(timeout=timeout)
        finally:
            self.asleep[i] = 0

    def wake_all(self) -> None:
        for i, up in enumerate(self.asleep.tolist()):
            if up:
                self.asleep[i] = 0  # one release per sleep
                self.semaphores[i].release()
