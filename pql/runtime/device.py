"""Each process's device, and the only places where the runtime waits for a device.

Every process of a run (main, each role, evaluation) calls `use_device` first thing: on CUDA it
makes the run's GPU the current one, so that Triton launches, `torch.cuda.current_stream()` and
events land on that GPU and not on GPU 0, and it enables TF32 matmuls.

The hot path never synchronises a whole stream. Work that another process must see whole is
marked with a `Fence` (a CUDA event) and polled with `Fence.done()`, which does not block. Where
the host must wait (evaluation, a checkpoint, IMPALA's trajectory hand-over) it goes through
`synchronize` or `host_values`, which count their calls on every device, the CPU included, so a
test can bound the synchronisations per update without a GPU.
"""

from __future__ import annotations

import collections

import torch

_syncs = 0


def use_device(device: torch.device | str) -> torch.device:
    """Make `device` this process's device. -> the device with its CUDA index filled in."""
    device = torch.device(device)
    if device.type != "cuda":
        return device
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    # TF32 keeps float32 storage and a 10-bit mantissa in the matmul's products: the learners'
    # MLPs lose nothing measurable and run several times faster on Ampere and later.
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return device


def sync_count() -> int:
    """Host-device synchronisations made through this module by this process so far."""
    return _syncs


def synchronize(device: torch.device) -> None:
    """Wait until every stream of `device` has finished its queued work (counted)."""
    global _syncs
    _syncs += 1
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def host_values(*tensors: torch.Tensor) -> list[float]:
    """The values of scalar tensors, read in one host transfer (counted as one synchronisation)."""
    global _syncs
    _syncs += 1
    return torch.stack([t.detach().reshape(()).double() for t in tensors]).tolist()


class Fence:
    """Marks the point reached by the current stream of `device`; `done()` tells, without
    waiting, whether the work queued before that point has finished. On the CPU work is done
    when it returns, so a fence is always done there."""

    def __init__(self, device: torch.device):
        self.device = device
        self._event = torch.cuda.Event() if device.type == "cuda" else None

    def record(self) -> Fence:
        if self._event is not None:
            self._event.record(torch.cuda.current_stream(self.device))
        return self

    def done(self) -> bool:
        return self._event is None or self._event.query()

    def wait(self) -> None:
        """Block until done (counted as a synchronisation)."""
        global _syncs
        _syncs += 1
        if self._event is not None:
            self._event.synchronize()


class InFlight:
    """Copies queued on `device`'s current stream, oldest first, each marked by a fence.
    wait=True: each copy is waited for as it is marked, so what has landed never depends on
    timing (sequential mode under torchrun: the replicas' roles must make their collectives in
    the same order, and that order follows what has landed)."""

    def __init__(self, device: torch.device, wait: bool = False):
        self.device, self.wait = device, wait
        self._fences: collections.deque[Fence] = collections.deque()

    def __len__(self) -> int:
        return len(self._fences)

    def mark(self) -> None:
        """Mark the copy just queued."""
        fence = Fence(self.device).record()
        if self.wait:
            fence.wait()
        self._fences.append(fence)

    def landed(self) -> int:
        """Forget the copies that have landed. -> how many did (a stream runs its work in order,
        so they are the oldest)."""
        count = 0
        while self._fences and self._fences[0].done():
            self._fences.popleft()
            count += 1
        return count
