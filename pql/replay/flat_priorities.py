"""Priorities in a flat array, sampled through a float64 prefix sum made at each draw.

The sum-tree's alternative (pql/kernels/sumtree.py), with the same surface for
PrioritizedSampler. An update writes its leaves and nothing else; a draw takes the cumulative
sum of all `capacity` priorities in float64 and finds each stratum's target in it by binary
search (`torch.searchsorted`). The prefix sum is made afresh from the priorities at every draw,
so no rounding carries over from one update to the next: nothing drifts, and an item's chance
is its priority over the float64 total of the priorities as they are. Cost per draw: O(capacity)
for the prefix sum over the slots written so far (a bandwidth-bound scan, 12 bytes per slot)
against the tree's O(B log P) dependent reads; which is faster depends on the size and the
device (`choose_index`).
"""

from __future__ import annotations

import math

import torch

from pql.kernels.sumtree import SlotPriorities, check_all_priorities, check_batch_size, checked_priorities


class FlatPriorities(SlotPriorities):
    """Priorities of `capacity` slots on `device`, drawn from by prefix sum.

    update(indices, priorities)  O(B), duplicates: the last write in the batch wins
    total(), min()               0-dim float32 tensors on device (no host sync), O(capacity)
    get(indices)                 [B] float32 priorities
    sample(batch_size, gen)      [B] int64 slots, stratified, proportional to priority
    reset(priorities)            all at once

    Memory: 4 bytes per slot, and 8 per slot of scratch during a draw (the float64 prefix sum).
    validate: as SumTree's (one host sync per call when True); with validate=False no call makes
    the host wait for the device, so the calls can be captured in a CUDA graph.
    """

    def __init__(self, capacity: int, device: torch.device | str = "cpu", validate: bool = True):
        super().__init__(capacity, validate)
        # One slot past the end takes the writes that lose to a later one in the same batch.
        self._slots = torch.zeros(capacity + 1, dtype=torch.float32, device=device)
        self._leaves = self._slots[:capacity]
        self.device = self._leaves.device

    def update(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Set the priorities of slots `indices`: as SumTree.update."""
        priorities = checked_priorities(indices, priorities, self.capacity, self.device, self.validate)
        if indices.numel():
            # Last write wins without a data-dependent shape (torch.unique's would make the host
            # wait for the device): a stable sort puts each slot's writes together in batch order,
            # every write but a slot's last goes to the spare slot, and the spare is never read.
            order = torch.argsort(indices, stable=True)
            slots = indices.index_select(0, order)
            superseded = torch.zeros_like(slots, dtype=torch.bool)
            superseded[:-1] = slots[:-1] == slots[1:]
            self._slots.index_copy_(0, slots.masked_fill(superseded, self.capacity), priorities.index_select(0, order))

    @property
    def leaves(self) -> torch.Tensor:
        return self._leaves

    def writes_cheaper_than_reset(self, count: int) -> bool:
        """Whether updating `count` slots costs less than a reset: always, each write is one store."""
        return count < self.capacity

    def total(self) -> torch.Tensor:
        return self.leaves.sum()

    def min(self, size: int | None = None) -> torch.Tensor:
        """Least positive priority among the first `size` slots (None: all; +inf when none)."""
        leaves = self.leaves[:size]
        return torch.where(leaves > 0, leaves, math.inf).min()

    def sample(
        self, batch_size: int, generator: torch.Generator | None = None, size: int | None = None
    ) -> torch.Tensor:
        """[batch_size] int64 slots, slot j with probability priority_j / total, stratified as the
        tree's: item i of the batch aims at (i + u_i) * total / B, one float32 uniform u_i each.
        size: the slots from `size` on hold priority 0 (never written), so the prefix sum stops
        there (None: it covers all): a draw costs O(size)."""
        check_batch_size(batch_size)
        prefix = torch.cumsum(self.leaves[:size], 0, dtype=torch.float64)
        total = prefix[-1]
        if self.validate and batch_size and not total > 0:
            raise ValueError("cannot sample from priorities that are all zero")
        u = torch.rand(batch_size, generator=generator, device=self.device)
        return sample_prefix(prefix, u)

    def reset(self, priorities: torch.Tensor) -> None:
        """Replace every priority: [capacity] float32, finite and >= 0."""
        check_all_priorities(priorities, self.capacity, self.validate)
        self.leaves.copy_(priorities)

    def rebuild(self) -> None:
        """Nothing is derived from the priorities between draws (SumTree.rebuild's counterpart)."""


def sample_prefix(prefix: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Stratified inverse-CDF sampling over a float64 prefix sum [N] (nondecreasing, prefix[-1]
    the total): item i aims at t_i = (i + u_i) * total / B and takes the first slot whose prefix
    exceeds t_i. Each t_i is held below the total, so the slot always exists and has a positive
    priority (its prefix rises past t_i) whenever the total is positive."""
    n = u.numel()
    total = prefix[-1]
    target = (torch.arange(n, device=u.device, dtype=torch.float64) + u.to(torch.float64)) * (total / n)
    target = torch.minimum(target, torch.nextafter(total, total.new_zeros(())))
    return torch.searchsorted(prefix, target, right=True).clamp_(max=prefix.numel() - 1)
