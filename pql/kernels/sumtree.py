"""Sum-tree (with a min-tree beside it) over the replay's slots, for prioritized sampling.

Layout: the capacity is padded to P = the next power of two; both trees are flat float32 arrays
of 2P nodes in heap order (node 1 is the root, node k has children 2k and 2k+1, slot i is the
leaf P + i, node 0 is unused). Padding leaves are 0 in the sum-tree and +inf in the min-tree.
The min-tree holds only positive priorities (a zero leaf is +inf there): its root is the least
priority that can be sampled, which is what importance-weight normalisation needs.

Invariant: every internal node equals fl32(left + right) (resp. min(left, right)) of its current
children, bit for bit what a full rebuild from the leaves gives. Updates keep it by writing the
leaves, then recomputing each affected ancestor from its children level by level; adding deltas
up the path would drift with rounding and break when two updated leaves share ancestors.

Each operation has a Triton kernel with its launcher, and a PyTorch reference beside it that is
also the CPU path (dispatch: pql/kernels/_dispatch.py). Given the same uniforms, both give the
same tree and the same samples.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from pql.kernels._dispatch import LAUNCH_OPTIONS, check_same_device, select_impl

# Node ids are int32 inside the kernels.
MAX_CAPACITY = 2**30

# One update launch takes at most this many items in a single program (see _update_kernel);
# a larger batch is split into launches in batch order, which keeps "the last write wins".
UPDATE_BLOCK_MAX = 8192

# Strata per sampling program: each item descends the tree alone, so a small block gives more
# programs in flight to hide the latency of the log2(P) dependent loads.
SAMPLE_BLOCK = 128


# --------------------------------------------------------------------------------------------
# Batched priority update
# --------------------------------------------------------------------------------------------


@triton.jit
def _update_kernel(sum_ptr, min_ptr, owner_ptr, idx_ptr, prio_ptr, n, num_leaves, depth, BLOCK: tl.constexpr):
    # One program (CTA) for the whole batch: recomputing level L needs every node of level L-1
    # final, and a barrier inside one CTA is the only cheap way to order that. The work is
    # latency-bound anyway (n nodes per level, log2(P) dependent levels), so one CTA of 32 warps
    # holding the whole batch in registers loses little to a grid-wide scheme.
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    leaf = tl.load(idx_ptr + offs, mask=mask, other=0).to(tl.int32)
    prio = tl.load(prio_ptr + offs, mask=mask, other=0.0)

    # Duplicates: the last write wins. Each leaf is claimed by the greatest batch position
    # that writes it; only that position stores. Plain scattered stores to one address would
    # leave an unspecified winner.
    # Relaxed: the barrier below, not the atomic, orders these against the loads after it.
    tl.atomic_max(owner_ptr + leaf, offs, mask=mask, sem="relaxed")
    tl.debug_barrier()
    won = tl.load(owner_ptr + leaf, mask=mask, other=-1, cache_modifier=".cg") == offs
    node = leaf + num_leaves
    tl.store(sum_ptr + node, prio, mask=mask & won)
    tl.store(min_ptr + node, tl.where(prio > 0.0, prio, float("inf")), mask=mask & won)
    tl.debug_barrier()
    # Give the scratch back (all -1) for the next launch; nothing below reads it.
    tl.store(owner_ptr + leaf, tl.full([BLOCK], -1, tl.int32), mask=mask)

    # Level by level, every ancestor is recomputed from its two (final) children. Items that
    # share an ancestor compute and store the same value, so their duplicate stores are benign.
    # .cg loads go to L2, never a stale L1 line.
    for level in range(1, depth + 1):
        parent = node >> level
        left = 2 * parent
        s = tl.load(sum_ptr + left, mask=mask, other=0.0, cache_modifier=".cg") + tl.load(
            sum_ptr + left + 1, mask=mask, other=0.0, cache_modifier=".cg"
        )
        m = tl.minimum(
            tl.load(min_ptr + left, mask=mask, other=0.0, cache_modifier=".cg"),
            tl.load(min_ptr + left + 1, mask=mask, other=0.0, cache_modifier=".cg"),
        )
        tl.store(sum_ptr + parent, s, mask=mask)
        tl.store(min_ptr + parent, m, mask=mask)
        tl.debug_barrier()


def _update_triton(
    sum_tree: torch.Tensor, min_tree: torch.Tensor, owner: torch.Tensor, indices: torch.Tensor, priorities: torch.Tensor
) -> None:
    num_leaves = sum_tree.numel() // 2
    depth = num_leaves.bit_length() - 1
    for start in range(0, indices.numel(), UPDATE_BLOCK_MAX):
        idx = indices[start : start + UPDATE_BLOCK_MAX]
        n = idx.numel()
        block = max(128, triton.next_power_of_2(n))
        # 32 warps (the most a CTA has) at the full block: 8 items per thread, 64 registers
        # per thread (the whole register file of an SM, no spills on sm_90).
        _update_kernel[(1,)](
            sum_tree,
            min_tree,
            owner,
            idx,
            priorities[start : start + n],
            n,
            num_leaves,
            depth,
            BLOCK=block,
            num_warps=min(32, max(4, block // 256)),
            **LAUNCH_OPTIONS,
        )


def last_write_wins(indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For indices [B] long: (unique indices [U] long, batch position of each one's last write [U] long).

    Deterministic on every device, unlike an index_put_ with repeated indices.
    """
    unique, inverse = torch.unique(indices, return_inverse=True)
    positions = torch.arange(indices.numel(), device=indices.device)
    last = torch.full_like(unique, -1).scatter_reduce_(0, inverse, positions, "amax")
    return unique, last


def _update_torch(
    sum_tree: torch.Tensor, min_tree: torch.Tensor, indices: torch.Tensor, priorities: torch.Tensor
) -> None:
    """Reference of _update_kernel: same rule, same float operations."""
    # index_select / index_copy_ rather than x[i]: the latter's multi-threaded CPU path was
    # 500x slower on a busy 2-core machine. Repeated parents below carry equal values.
    num_leaves = sum_tree.numel() // 2
    slots, last = last_write_wins(indices)
    prio = priorities.index_select(0, last)
    node = slots + num_leaves
    sum_tree.index_copy_(0, node, prio)
    min_tree.index_copy_(0, node, torch.where(prio > 0, prio, math.inf))
    for level in range(1, num_leaves.bit_length()):
        parent = node >> level
        left, right = 2 * parent, 2 * parent + 1
        sum_tree.index_copy_(0, parent, sum_tree.index_select(0, left) + sum_tree.index_select(0, right))
        min_tree.index_copy_(0, parent, torch.minimum(min_tree.index_select(0, left), min_tree.index_select(0, right)))


# --------------------------------------------------------------------------------------------
# Stratified sampling
# --------------------------------------------------------------------------------------------


# n is never specialised: a batch of one would turn it into a constexpr without .to().
@triton.jit(do_not_specialize=["n"])
def _sample_kernel(sum_ptr, u_ptr, out_ptr, n, num_leaves, depth, capacity, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    u = tl.load(u_ptr + offs, mask=mask, other=0.0)
    total = tl.load(sum_ptr + 1)
    # Stratum i covers [i, i+1) * total / n. div_rn: IEEE division, as torch does, so both
    # implementations aim at the same prefix sum.
    target = (offs.to(tl.float32) + u) * tl.math.div_rn(total, n.to(tl.float32))
    node = tl.full([BLOCK], 1, tl.int32)
    for _ in range(depth):
        left = 2 * node
        lsum = tl.load(sum_ptr + left, mask=mask, other=0.0)
        rsum = tl.load(sum_ptr + left + 1, mask=mask, other=0.0)
        # Enter only subtrees of positive mass. Rounding can leave target >= lsum + rsum at the
        # right edge; it then keeps going right, to the last positive leaf, never to an empty one.
        go_left = (lsum > 0.0) & ((target < lsum) | (rsum <= 0.0))
        target = tl.where(go_left, target, target - lsum)
        node = tl.where(go_left, left, left + 1)
    # The clamp only matters for an all-zero tree (which SumTree.sample rejects when validating).
    tl.store(out_ptr + offs, tl.minimum(node - num_leaves, capacity - 1).to(tl.int64), mask=mask)


def _sample_triton(sum_tree: torch.Tensor, u: torch.Tensor, capacity: int) -> torch.Tensor:
    num_leaves = sum_tree.numel() // 2
    out = torch.empty(u.numel(), dtype=torch.int64, device=u.device)
    grid = (triton.cdiv(u.numel(), SAMPLE_BLOCK),)
    _sample_kernel[grid](
        sum_tree,
        u,
        out,
        u.numel(),
        num_leaves,
        num_leaves.bit_length() - 1,
        capacity,
        BLOCK=SAMPLE_BLOCK,
        num_warps=4,
        **LAUNCH_OPTIONS,
    )
    return out


def _sample_torch(sum_tree: torch.Tensor, u: torch.Tensor, capacity: int) -> torch.Tensor:
    """Reference of _sample_kernel: same rule, same float operations."""
    num_leaves = sum_tree.numel() // 2
    n = u.numel()
    target = (torch.arange(n, device=u.device, dtype=torch.float32) + u) * (sum_tree[1] / n)
    node = torch.ones(n, dtype=torch.int64, device=u.device)
    for _ in range(num_leaves.bit_length() - 1):
        left = 2 * node
        lsum, rsum = sum_tree.index_select(0, left), sum_tree.index_select(0, left + 1)
        go_left = (lsum > 0) & ((target < lsum) | (rsum <= 0))
        target = torch.where(go_left, target, target - lsum)
        node = torch.where(go_left, left, left + 1)
    return (node - num_leaves).clamp_(max=capacity - 1)


def sample_from_uniforms(sum_tree: torch.Tensor, u: torch.Tensor, capacity: int, impl: str = "auto") -> torch.Tensor:
    """Stratified inverse-CDF sampling: item i of the batch falls in stratum i.

    sum_tree: [2P] float32 (a SumTree's `sum_tree`); u: [B] float32 in [0, 1) on the same device.
    Returns [B] int64 slots: slot j holds target = (i + u_i) * total / B in its prefix-sum
    interval, and always has a positive priority when total > 0.
    """
    check_same_device(sum_tree.device, u=u)
    if u.numel() == 0:
        return torch.empty(0, dtype=torch.int64, device=u.device)
    u = u.to(torch.float32).contiguous()
    if select_impl(impl, u.device) == "triton":
        return _sample_triton(sum_tree, u, capacity)
    return _sample_torch(sum_tree, u, capacity)


# --------------------------------------------------------------------------------------------
# The tree
# --------------------------------------------------------------------------------------------


def check_slots(
    indices: torch.Tensor, priorities: torch.Tensor | None, capacity: int, device: torch.device, validate: bool
) -> None:
    """Raise unless indices is a 1-D int64 tensor on `device` and, when validating, every index is
    a slot in [0, capacity) and every priority (if given) is finite and >= 0. One host sync, and
    only when validating."""
    if indices.dim() != 1 or indices.dtype != torch.int64:
        raise ValueError(f"indices must be a 1-D int64 tensor, got shape {tuple(indices.shape)} dtype {indices.dtype}")
    check_same_device(device, indices=indices)
    if priorities is not None:
        check_same_device(device, priorities=priorities)
    if not validate or indices.numel() == 0:
        return
    bad_index = (indices < 0) | (indices >= capacity)
    bad = bad_index if priorities is None else bad_index | ~(priorities >= 0) | torch.isinf(priorities)
    if bad.any():
        i = int(bad.nonzero()[0])
        if bad_index[i]:
            raise IndexError(f"indices[{i}]={int(indices[i])} is out of range; expected a slot in [0, {capacity})")
        assert priorities is not None  # without priorities only an index can be bad
        raise ValueError(f"priorities[{i}]={float(priorities[i])} is not allowed; expected a finite number >= 0")


def checked_priorities(
    indices: torch.Tensor, priorities: torch.Tensor, capacity: int, device: torch.device, validate: bool
) -> torch.Tensor:
    """An update's priorities as float32, once they are known to be one float per index and to
    pass check_slots with the indices."""
    if priorities.shape != indices.shape or not priorities.is_floating_point():
        raise ValueError(
            f"priorities must be a float tensor of shape {tuple(indices.shape)} "
            f"(one per index), got shape {tuple(priorities.shape)} dtype {priorities.dtype}"
        )
    priorities = priorities.to(torch.float32)
    check_slots(indices, priorities, capacity, device, validate)
    return priorities


def check_all_priorities(priorities: torch.Tensor, capacity: int, validate: bool) -> None:
    """Raise unless a reset's priorities are one float per slot (and, when validating, finite and >= 0)."""
    if priorities.shape != (capacity,) or not priorities.is_floating_point():
        raise ValueError(
            f"priorities must be a float tensor of shape ({capacity},), got "
            f"shape {tuple(priorities.shape)} dtype {priorities.dtype}"
        )
    if validate and not (torch.isfinite(priorities) & (priorities >= 0)).all():
        raise ValueError("priorities must be finite and >= 0")


def check_batch_size(batch_size) -> None:
    if not isinstance(batch_size, int) or batch_size < 0:
        raise ValueError(f"batch_size={batch_size!r} is not allowed; expected an integer >= 0")


class SlotPriorities:
    """What both indexes of a replay's priorities share (SumTree; pql/replay/flat_priorities.py's
    FlatPriorities): `capacity` slots on `device`, their priorities `leaves` [capacity] float32,
    and the checks of the slots a call names (`validate`: one host sync per call)."""

    def __init__(self, capacity: int, validate: bool):
        if not isinstance(capacity, int) or not 1 <= capacity <= MAX_CAPACITY:
            raise ValueError(f"capacity={capacity!r} is not allowed; expected an integer in [1, 2**30]")
        self.capacity = capacity
        self.validate = validate

    @property
    def leaves(self) -> torch.Tensor:
        """The priorities of all slots: a [capacity] float32 view of the index's storage."""
        raise NotImplementedError

    def check_indices(self, indices: torch.Tensor, priorities: torch.Tensor | None = None) -> None:
        check_slots(indices, priorities, self.capacity, self.leaves.device, self.validate)

    def get(self, indices: torch.Tensor) -> torch.Tensor:
        """Priorities of slots `indices` [B] int64: [B] float32."""
        self.check_indices(indices)
        return self.leaves.index_select(0, indices)


class SumTree(SlotPriorities):
    """Sum- and min-tree over `capacity` slots on `device`.

    update(indices, priorities)  O(B log P), duplicates: the last write in the batch wins
    total(), min()               0-dim float32 tensors on device (no host sync)
    get(indices)                 [B] float32 leaf priorities
    sample(batch_size, gen)      [B] int64 slots, stratified, proportional to priority
    reset(priorities)            all leaves at once, rebuilt in O(P)

    Memory: 20 bytes per padded slot (two float32 trees of 2P nodes, one int32 scratch of P).
    validate=True checks every input (one device-to-host sync per call); validate=False skips
    the checks for a hot loop whose inputs are known good (an index out of range then writes
    outside the tree). impl: "auto", "triton" or "torch" (see pql/kernels/_dispatch.py).
    Updates must not run concurrently on two streams (they share the scratch).
    """

    def __init__(self, capacity: int, device: torch.device | str = "cpu", validate: bool = True, impl: str = "auto"):
        super().__init__(capacity, validate)
        self.num_leaves = triton.next_power_of_2(capacity)
        self.sum_tree = torch.zeros(2 * self.num_leaves, dtype=torch.float32, device=device)
        self.min_tree = torch.full_like(self.sum_tree, math.inf)
        self.device = self.sum_tree.device
        self.impl = select_impl(impl, self.device)
        # Scratch for the kernel's last-write-wins claim; always all -1 between launches.
        self._owner = (
            torch.full((self.num_leaves,), -1, dtype=torch.int32, device=self.device) if self.impl == "triton" else None
        )

    @property
    def leaves(self) -> torch.Tensor:
        """The priorities of all slots: a [capacity] float32 view (written only to be rebuilt)."""
        return self.sum_tree[self.num_leaves : self.num_leaves + self.capacity]

    def update(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Set the priorities of slots `indices`.

        indices: [B] int64; priorities: [B] float32, finite and >= 0 (0 removes the slot from
        sampling and from min()); both on the tree's device. A slot repeated in the batch ends
        with the priority of its last occurrence.
        """
        priorities = checked_priorities(indices, priorities, self.capacity, self.device, self.validate)
        if indices.numel() == 0:
            return
        if self._owner is not None:  # the Triton path's scratch, made for it alone
            _update_triton(self.sum_tree, self.min_tree, self._owner, indices.contiguous(), priorities.contiguous())
        else:
            _update_torch(self.sum_tree, self.min_tree, indices, priorities)

    def writes_cheaper_than_reset(self, count: int) -> bool:
        """Whether updating `count` slots costs less than a reset: `count` paths of log2(P) nodes
        against the 2P nodes of a rebuild (a few thousand slots in a tree of millions: the writes)."""
        return count * (self.num_leaves.bit_length() - 1) < self.num_leaves

    def total(self) -> torch.Tensor:
        """Sum of all priorities: 0-dim float32 on device."""
        return self.sum_tree[1]

    def min(self, size: int | None = None) -> torch.Tensor:
        """Least positive priority (+inf when none): 0-dim float32 on device. size: ignored (the
        root covers every slot at no cost; FlatPriorities.min's counterpart)."""
        return self.min_tree[1]

    def sample(
        self, batch_size: int, generator: torch.Generator | None = None, size: int | None = None
    ) -> torch.Tensor:
        """[batch_size] int64 slots, slot j with probability priority_j / total (stratified:
        one uniform draw in each of batch_size equal strata of the total). generator: a
        torch.Generator on the tree's device, or None for the default one. size: ignored (a walk
        costs log2(P) at any size; FlatPriorities.sample's counterpart)."""
        check_batch_size(batch_size)
        if self.validate and batch_size and not self.total() > 0:
            raise ValueError("cannot sample from a sum-tree whose priorities are all zero")
        u = torch.rand(batch_size, generator=generator, device=self.device)
        return sample_from_uniforms(self.sum_tree, u, self.capacity, self.impl)

    def reset(self, priorities: torch.Tensor) -> None:
        """Replace every leaf: priorities [capacity] float32, finite and >= 0; O(P) rebuild."""
        check_all_priorities(priorities, self.capacity, self.validate)
        self.leaves.copy_(priorities)
        self.rebuild()

    def rebuild(self) -> None:
        """Make every other node from the leaves (`leaves`, after they were written in place: a
        checkpoint's priorities); O(P)."""
        padded = self.sum_tree[self.num_leaves :]
        padded[self.capacity :] = 0
        self.min_tree[self.num_leaves :] = torch.where(padded > 0, padded, math.inf)
        # Same float operations as the updates, level by level, so the invariant holds exactly.
        width = self.num_leaves
        while width > 1:
            children = self.sum_tree[width : 2 * width].view(-1, 2)
            self.sum_tree[width // 2 : width] = children[:, 0] + children[:, 1]
            children = self.min_tree[width : 2 * width].view(-1, 2)
            self.min_tree[width // 2 : width] = torch.minimum(children[:, 0], children[:, 1])
            width //= 2
