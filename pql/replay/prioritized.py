"""Prioritized experience replay sampler (Schaul et al. 2016), on the sum-tree of
pql/kernels/sumtree.py or the flat prefix sum of pql/replay/flat_priorities.py (`choose_index`).
Implements the sampler contract of docs/architecture.md (Replay).

Priorities, as stored in the index (p_i^alpha in the paper's notation, so P(i) = leaf_i / total):
  proportional: leaf_i = (|delta_i| + eps)^alpha
  rank:         leaf_i = (1 / rank_i)^alpha, rank 1 = the largest |delta| in the buffer
Importance weights: w_i = (N P(i))^-beta / max_j w_j = (leaf_i / min_j leaf_j)^-beta, the max
weight coming from the least priority (the index's min), as Schaul et al.; beta goes linearly
from beta0 to 1 over `beta_anneal_updates` sample calls.

New items enter at the running maximum priority (the largest ever written, initially 1), so
each is sampled soon after it arrives. Valid items are the slots [0, size) of the ring, the
`size` that ReplayBuffer passes to sample().

Rank mode keeps |delta| per slot and re-ranks the buffer with a stable sort (ties by slot),
then writes the leaves (a reset of them all, or an update of the ranked leaves while they are few).
Sorting every update would cost O(N log N) per critic update (0.8 s at 5M items on a 2-core
CPU, docs/kernels.md), so, as Schaul et al. re-sort only periodically, a ranking serves
`rerank_every` sample calls before the next re-rank. Between re-ranks, a written item takes the
rank its |delta| would have had in the last ranking, found by binary search in that ranking's
sorted |delta|, ranking after the items tied with it:
  updated:           rank = 1 + #{ranked items with |delta| >= its |delta|}
  new, at the max:   rank = 1 + #{ranked items with |delta| >= the max}
                            + (items that entered at the max since the re-rank, before it)
so new items rank just below the ones already at the max, one after another as they arrive,
as ties at the max do in an exact ranking. Estimated ranks may repeat; sampling and the
importance weights follow the leaves as they are, so both stay exact for the index that is
sampled. rerank_every=None re-ranks after ceil(size / batch_size) sample calls, about one
buffer's worth of priority writes: the sort's O(N log N) is spread over N writes, O(log N) per
write like the tree update itself, and a buffer no larger than a batch is ranked exactly.
"""

from __future__ import annotations

import torch

from pql.kernels.sumtree import SumTree, last_write_wins
from pql.replay.flat_priorities import FlatPriorities

MODES = ("proportional", "rank")
INDEXES = ("auto", "sum_tree", "flat")
# The most items the flat index serves on the CPU under index="auto": a draw's O(size) prefix sum
# costs what the sum-tree's O(B log P) walks cost near 2^17 items at batch 256 on 2 cores, and
# 5-8 times less at 2^16. On CUDA the flat index serves every size: on an H200 at batch 8,192 a
# sampler step (update, draw, weights) on it was 1.2-2.9 times faster than on the sum-tree's
# Triton kernels from 2^16 to 2^23 items, the prefix sum being one pass at memory speed where the
# tree's walks are B·log P dependent reads (docs/benchmarks.md#kernels, bench/kernel_speed.py).
FLAT_MAX_SIZE_CPU = 2**17


def choose_index(index: str, size: int, device: torch.device) -> str:
    """The index that `index` means for a replay of `size` items on `device`: "flat" or
    "sum_tree" ("auto": the flat index on CUDA, and while a CPU replay holds at most
    FLAT_MAX_SIZE_CPU)."""
    if index != "auto":
        return index
    return "flat" if device.type != "cpu" or size <= FLAT_MAX_SIZE_CPU else "sum_tree"


def _make_index(index: str, capacity: int, device: torch.device, validate: bool, impl: str):
    if index == "flat":
        return FlatPriorities(capacity, device, validate=validate)
    return SumTree(capacity, device, validate=validate, impl=impl)


def _check_number(name: str, value, ok: bool, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{name}={value!r} is not allowed; expected {allowed}")


def sampler_kind(mode: str) -> str:
    """How a saved replay names a prioritized sampler of `mode`: its priorities mean nothing to another."""
    return f"prioritized/{mode}"


class PrioritizedSampler:
    """Prioritized sampler over `capacity` slots on `device`.

    mode: "proportional" or "rank"; alpha >= 0 (0: uniform); beta0 in [0, 1];
    beta_anneal_updates > 0 (sample calls over which beta reaches 1); eps > 0.
    validate=True checks every input: a device-to-host sync per call (two in update()); a CUDA
    hot loop whose inputs are known good may turn it off.
    index: "sum_tree", "flat" (pql/replay/flat_priorities.py) or "auto": the index `choose_index`
    gives for the most items drawn among so far, moving once from the flat index to the sum-tree
    as a CPU replay grows past FLAT_MAX_SIZE_CPU (the leaves carry over; a draw the move is made
    for is the tree's already).
    impl: "auto", "triton" or "torch" for the sum-tree kernels.
    rerank_every (rank mode only): sample calls a ranking serves before the next re-rank, an
    integer >= 1 (1: re-rank at every sample after a change, exact ranks), or None: ceil(size /
    batch_size) of the sample call that re-ranks (see the module docstring).
    Memory in rank mode: 8 bytes per slot beside the index (|delta| and the last ranking's).
    """

    def __init__(
        self,
        capacity: int,
        device: torch.device | str = "cpu",
        mode: str = "proportional",
        alpha: float = 0.6,
        beta0: float = 0.4,
        beta_anneal_updates: int = 100_000,
        eps: float = 1e-6,
        validate: bool = True,
        impl: str = "auto",
        rerank_every: int | None = None,
        index: str = "auto",
    ):
        _check_number("mode", mode, mode in MODES, f"one of {', '.join(MODES)}")
        _check_number("alpha", alpha, alpha >= 0, "a number >= 0")
        _check_number("beta0", beta0, 0 <= beta0 <= 1, "a number in [0, 1]")
        _check_number(
            "beta_anneal_updates",
            beta_anneal_updates,
            isinstance(beta_anneal_updates, int) and beta_anneal_updates > 0,
            "an integer > 0",
        )
        _check_number("eps", eps, eps > 0, "a number > 0")
        _check_number(
            "rerank_every",
            rerank_every,
            rerank_every is None or (isinstance(rerank_every, int) and rerank_every >= 1),
            "an integer >= 1 (sample calls between re-ranks) or None (size / batch_size)",
        )
        self.mode, self.alpha, self.beta0, self.eps = mode, float(alpha), float(beta0), float(eps)
        _check_number("index", index, index in INDEXES, f"one of {', '.join(INDEXES)}")
        self.kind = sampler_kind(mode)
        self.beta_anneal_updates = beta_anneal_updates
        self.validate = validate
        self.index_rule, self.impl = index, impl
        self.largest_size = 0  # the most items a draw was made among: what "auto" follows
        self.priorities: SumTree | FlatPriorities = _make_index(
            choose_index(index, 0, torch.device(device)), capacity, torch.device(device), validate, impl
        )
        self.capacity, self.device = capacity, self.priorities.device
        self.num_samples = 0
        # Running max, kept on the device so that adding and updating never sync: in tree units
        # (leaf) for proportional mode, in |delta| for rank mode.
        self.max_priority = torch.ones((), dtype=torch.float32, device=self.device)
        if mode == "rank":
            self.rerank_every = rerank_every
            self.td_abs = torch.zeros(capacity, dtype=torch.float32, device=self.device)
            # The last ranking: its |delta| sorted descending and negated (ascending, for
            # searchsorted), the sample calls it may still serve, whether anything was written
            # since, and how many items entered at the max since. Empty: must re-rank.
            self._ranked_neg_td = torch.zeros(0, dtype=torch.float32, device=self.device)
            self._uses_left = 0
            self._changed = False
            self._new_at_max = 0

    def state(self) -> tuple[dict, dict[str, torch.Tensor]]:
        """(scalars, tensors) that restore this sampler exactly: the priorities (the leaves, from
        which either index rebuilds the rest), the running max, the anneal count, and in rank mode
        the |delta| per slot and the last ranking's state."""
        small = {
            "num_samples": self.num_samples,
            "largest_size": self.largest_size,
            "max_priority": self.max_priority.item(),
        }
        bulk = {"priorities": self.priorities.leaves}
        if self.mode == "rank":
            small.update(
                uses_left=self._uses_left,
                changed=self._changed,
                new_at_max=self._new_at_max,
                ranked=self._ranked_neg_td.numel(),
            )
            bulk.update(td_abs=self.td_abs, ranked_neg_td=self._ranked_neg_td)
        return small, bulk

    def state_targets(self, small: dict) -> dict[str, torch.Tensor]:
        """Where a saved state's tensors go (`state`'s order): the index's leaves in place."""
        targets = {"priorities": self.priorities.leaves}
        if self.mode == "rank":
            self._ranked_neg_td = torch.empty(small["ranked"], dtype=torch.float32, device=self.device)
            targets.update(td_abs=self.td_abs, ranked_neg_td=self._ranked_neg_td)
        return targets

    def load_state(self, small: dict) -> None:
        self.priorities.rebuild()
        self.largest_size = small["largest_size"]
        self._follow_size()  # the index the saved sampler had, unless this device's rule differs
        self.num_samples = small["num_samples"]
        self.max_priority.fill_(small["max_priority"])
        if self.mode == "rank":
            self._uses_left, self._changed, self._new_at_max = small["uses_left"], small["changed"], small["new_at_max"]

    @property
    def beta(self) -> float:
        """Importance exponent for the next sample call."""
        return self.beta0 + (1.0 - self.beta0) * min(1.0, self.num_samples / self.beta_anneal_updates)

    def on_add(self, indices: torch.Tensor, td_abs: torch.Tensor | None = None) -> None:
        """New items in slots `indices` [B] int64 (overwritten ones included): at the running max
        priority, or, given td_abs [B] (|TD errors| computed where the data was made, Ape-X), at
        the priorities those give."""
        if td_abs is not None:
            self.update(indices, td_abs)
            return
        if self.mode == "proportional":
            self.priorities.update(indices, self.max_priority.expand(indices.shape))
            return
        self._set_td_abs(indices, self.max_priority.expand(indices.shape))
        if self._estimates_ranks():
            ranks = (
                self._ranks_after(self.max_priority)
                + self._new_at_max
                + torch.arange(indices.numel(), device=self.device)
            )
            self.priorities.update(indices, ranks.to(torch.float32).pow(-self.alpha))
        self._new_at_max += indices.numel()

    def update(self, indices: torch.Tensor, td_abs: torch.Tensor) -> None:
        """Priorities after a critic update. indices: [B] int64 slots from sample();
        td_abs: [B] float |TD error| >= 0 (finite). A slot repeated in the batch keeps its last."""
        if td_abs.shape != indices.shape or not td_abs.is_floating_point():
            raise ValueError(
                f"td_abs must be a float tensor of shape {tuple(indices.shape)} (one per "
                f"index), got shape {tuple(td_abs.shape)} dtype {td_abs.dtype}"
            )
        if self.validate and td_abs.numel():
            bad = ~(torch.isfinite(td_abs) & (td_abs >= 0))
            if bad.any():
                i = int(bad.nonzero()[0])
                raise ValueError(
                    f"td_abs[{i}]={float(td_abs[i])} is not allowed: td_abs must be finite "
                    "and >= 0 (a NaN or inf TD error usually means the critic diverged)"
                )
        if indices.numel() == 0:
            return
        td_abs = td_abs.detach().to(torch.float32)
        if self.mode == "proportional":
            priorities = (td_abs + self.eps).pow(self.alpha)
            self.priorities.update(indices, priorities)
            torch.maximum(self.max_priority, priorities.max(), out=self.max_priority)
        else:
            self._set_td_abs(indices, td_abs)
            if self._estimates_ranks():
                self.priorities.update(indices, self._ranks_after(td_abs).to(torch.float32).pow(-self.alpha))
            torch.maximum(self.max_priority, td_abs.max(), out=self.max_priority)

    def _set_td_abs(self, indices: torch.Tensor, td_abs: torch.Tensor) -> None:
        self.priorities.check_indices(indices)
        if indices.numel():
            slots, last = last_write_wins(indices)
            self.td_abs.index_copy_(0, slots, td_abs.index_select(0, last))
            self._changed = True

    def _estimates_ranks(self) -> bool:
        """Whether a write must set its leaf now: not when the next sample re-ranks anyway."""
        return self._ranked_neg_td.numel() > 0 and self._uses_left > 0

    def _ranks_after(self, td_abs: torch.Tensor) -> torch.Tensor:
        """1 + the number of items in the last ranking with |delta| >= td_abs (any shape): int64."""
        return 1 + torch.searchsorted(self._ranked_neg_td, -td_abs, right=True)

    def _rerank(self, size: int, batch_size: int) -> None:
        # Ordinal ranks: a stable descending sort gives tied |delta| consecutive ranks by slot.
        ranked_td, order = torch.sort(self.td_abs[:size], descending=True, stable=True)
        leaves = torch.arange(1, size + 1, dtype=torch.float32, device=self.device).pow_(-self.alpha)
        # Slots from `size` on were never written, so their leaves are 0 already, and writing only
        # the ranked ones gives the same index, bit for bit, as a reset.
        if self.priorities.writes_cheaper_than_reset(size):
            self.priorities.update(order, leaves)
        else:
            self.priorities.reset(
                torch.zeros(self.capacity, dtype=torch.float32, device=self.device).index_copy_(0, order, leaves)
            )
        self._ranked_neg_td = ranked_td.neg_()
        self._uses_left = self.rerank_every or -(-size // max(1, batch_size))
        self._changed = False
        self._new_at_max = 0

    @property
    def index(self) -> str:
        """The index the priorities are in now: "flat" or "sum_tree"."""
        return "flat" if isinstance(self.priorities, FlatPriorities) else "sum_tree"

    def _follow_size(self) -> None:
        """Move the priorities to the index that the rule gives for `largest_size`, if another."""
        index = choose_index(self.index_rule, self.largest_size, self.device)
        if index != self.index:
            moved = _make_index(index, self.capacity, self.device, self.validate, self.impl)
            moved.leaves.copy_(self.priorities.leaves)
            moved.rebuild()
            self.priorities = moved

    def sample(
        self, batch_size: int, size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw batch_size slots among the first `size`: (indices [B] int64, weights [B] float32),
        weights in (0, 1]. generator: a torch.Generator on the sampler's device, or None."""
        _check_number(
            "size",
            size,
            isinstance(size, int) and 0 < size <= self.capacity,
            f"an integer in [1, {self.capacity}] (the number of items in the buffer)",
        )
        if size > self.largest_size:
            self.largest_size = size
            self._follow_size()
        if self.mode == "rank":
            if self._ranked_neg_td.numel() == 0 or (self._changed and self._uses_left <= 0):
                self._rerank(size, batch_size)
            self._uses_left -= 1
        indices = self.priorities.sample(batch_size, generator, size)
        beta = self.beta
        self.num_samples += 1
        # Drawn slots are in range by construction: read the leaves without get()'s check.
        weights = (self.priorities.leaves.index_select(0, indices) / self.priorities.min(size)).pow(-beta)
        return indices, weights


def sequence_priority(td_abs: torch.Tensor, eta: float = 0.9, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Priority of a sequence (R2D2 / Agent57): eta * max_t |delta_t| + (1 - eta) * mean_t |delta_t|.

    td_abs: [B, T] float |TD errors| along each sequence; lengths: [B] int64 in [1, T], the steps
    of each sequence that count (the first lengths[b]; None: all T). Returns [B] float, on the
    same device.
    """
    if td_abs.dim() != 2 or not td_abs.is_floating_point():
        raise ValueError(f"td_abs must be a [B, T] float tensor, got shape {tuple(td_abs.shape)} dtype {td_abs.dtype}")
    if td_abs.shape[1] == 0:
        raise ValueError("td_abs has T=0 steps; a sequence priority needs at least one")
    _check_number("eta", eta, 0 <= eta <= 1, "a number in [0, 1]")
    if lengths is None:
        return eta * td_abs.amax(dim=1) + (1 - eta) * td_abs.mean(dim=1)
    counted = torch.arange(td_abs.shape[1], device=td_abs.device) < lengths.unsqueeze(1)
    peak = torch.where(counted, td_abs, 0.0).amax(dim=1)  # |delta| >= 0, so 0 never wins a max
    mean = torch.where(counted, td_abs, 0.0).sum(dim=1) / lengths
    return eta * peak + (1 - eta) * mean
