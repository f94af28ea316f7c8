"""The flat index (pql/replay/flat_priorities.py) against a float64 reference written out here,
and against the sum-tree: the same priorities after the same writes (duplicates, zeros, the
last slot), draws that follow the inverse CDF exactly, never a slot of priority 0; and the rule
that picks an index."""

import math

import numpy as np
import pytest
import torch
from host_syncs import HostSyncs

import pql.replay.prioritized
from pql.kernels.sumtree import SumTree
from pql.replay.flat_priorities import FlatPriorities, sample_prefix
from pql.replay.prioritized import FLAT_MAX_SIZE_CPU, PrioritizedSampler, choose_index

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")],
    ),
]


def reference_draw(priorities: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Stratum i aims at t = (i + u_i) * total / B, held below the total, and takes the first slot
    whose float64 prefix sum exceeds t."""
    prefix = np.cumsum(priorities.astype(np.float64))
    total = prefix[-1]
    n = u.size
    t = np.minimum((np.arange(n, dtype=np.float64) + u.astype(np.float64)) * (total / n), np.nextafter(total, 0))
    return np.searchsorted(prefix, t, side="right")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("capacity", [1, 5, 1024, 1025])
def test_writes_match_the_tree_s_leaves_duplicates_zeros_and_the_last_slot(device, capacity):
    gen = torch.Generator().manual_seed(capacity)
    flat, tree = FlatPriorities(capacity, device), SumTree(capacity, device, impl="torch")
    for _ in range(4):
        # With replacement (duplicates in a batch), a quarter zeros, the last slot in every batch.
        idx = torch.cat([torch.randint(0, capacity, (300,), generator=gen), torch.tensor([capacity - 1] * 2)])
        prio = torch.rand(idx.numel(), generator=gen) * (torch.rand(idx.numel(), generator=gen) > 0.25)
        for index in (flat, tree):
            index.update(idx.to(device), prio.to(device))
        assert torch.equal(flat.leaves, tree.leaves)
        assert flat.leaves[capacity - 1].item() == prio[-1].item()  # the last write of the batch
    positive = flat.leaves[flat.leaves > 0]
    assert flat.min().item() == (positive.min().item() if positive.numel() else math.inf)
    assert flat.min().item() == tree.min().item()
    assert flat.total().item() == pytest.approx(tree.total().item(), rel=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("capacity,size,batch", [(1, 1, 7), (5, 5, 1), (1025, 1025, 300), (1025, 600, 300)])
def test_draws_equal_the_float64_reference_and_never_a_zero(device, capacity, size, batch):
    gen = torch.Generator().manual_seed(1)
    flat = FlatPriorities(capacity, device)
    prio = torch.rand(size, generator=gen) * (torch.rand(size, generator=gen) > 0.3)
    prio[size // 2] = 0.5  # at least one positive
    flat.update(torch.arange(size, device=device), prio.to(device))
    drawn = flat.sample(batch, torch.Generator(device).manual_seed(2), size=None if size == capacity else size)
    u = torch.rand(batch, generator=torch.Generator(device).manual_seed(2), device=device)
    assert drawn.dtype == torch.int64 and drawn.shape == (batch,)
    assert drawn.cpu().tolist() == reference_draw(prio.numpy(), u.cpu().numpy()).tolist()
    assert (prio[drawn.cpu()] > 0).all() and (drawn < size).all()


@pytest.mark.parametrize("device", DEVICES)
def test_the_right_edge_takes_the_last_positive_slot(device):
    """u just below 1 in the last stratum, where the target rounds to the total or past it: the
    last slot of positive priority, never the zeros after it."""
    prefix = torch.cumsum(torch.tensor([0.0, 0.3, 0.0, 0.7, 0.0, 0.0], dtype=torch.float64, device=device), 0)
    below_one = float(np.nextafter(np.float32(1), np.float32(0)))
    assert sample_prefix(prefix, torch.full((4,), below_one, device=device)).tolist() == [1, 3, 3, 3]
    # u = 1 itself (which torch.rand never gives) aims at the total: held below it, slot 3 still.
    assert sample_prefix(prefix, torch.ones(4, device=device)).tolist() == [1, 3, 3, 3]
    assert sample_prefix(prefix, torch.zeros(4, device=device)).tolist() == [1, 1, 3, 3]  # 0, .25, .5, .75


def test_draw_frequencies_are_the_tree_s():
    """The same law from both indexes: each slot's share of 200,000 draws against its priority."""
    gen = torch.Generator().manual_seed(3)
    prio = torch.rand(300, generator=gen) ** 3 * (torch.rand(300, generator=gen) > 0.2)
    counts = {}
    for name, index in (("flat", FlatPriorities(300)), ("tree", SumTree(300, impl="torch"))):
        index.update(torch.arange(300), prio)
        draws = torch.cat([index.sample(1000, torch.Generator().manual_seed(s)) for s in range(200)])
        counts[name] = torch.bincount(draws, minlength=300).double()
    share = prio.double() / prio.double().sum()
    for name, c in counts.items():
        assert c[prio == 0].sum() == 0, name
        # Stratified: each slot's count is within 1 per batch of its expected count.
        assert (c - share * c.sum()).abs().max() <= 200, name


def test_a_saved_sampler_loads_into_the_other_index_and_draws_the_same_law():
    """A checkpoint holds the leaves alone: one written from the tree resumes on the flat index
    (a run resumed on another device) with the same priorities, max and weights."""
    tree = PrioritizedSampler(64, index="sum_tree", impl="torch")
    tree.on_add(torch.arange(40))
    tree.update(torch.arange(40), torch.rand(40, generator=torch.Generator().manual_seed(5)) * 3)
    small, bulk = tree.state()
    flat = PrioritizedSampler(64, index="flat")
    for key, target in flat.state_targets(small).items():
        target.copy_(bulk[key])
    flat.load_state(small)
    assert torch.equal(flat.priorities.leaves, tree.priorities.leaves)
    assert flat.max_priority.item() == tree.max_priority.item()
    _, w_flat = flat.sample(8, 40)
    _, w_tree = tree.sample(8, 40)
    assert w_flat.max().item() <= 1 and w_tree.max().item() <= 1
    # And back: the tree rebuilt from the leaves is the tree it was, node for node.
    again = PrioritizedSampler(64, index="sum_tree", impl="torch")
    small, bulk = flat.state()
    for key, target in again.state_targets(small).items():
        target.copy_(bulk[key])
    again.load_state(small)
    assert torch.equal(again.priorities.sum_tree, tree.priorities.sum_tree)
    assert torch.equal(again.priorities.min_tree, tree.priorities.min_tree)


def test_the_rule_takes_the_flat_index_on_cuda_and_for_small_cpu_replays():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert choose_index("auto", FLAT_MAX_SIZE_CPU, cpu) == "flat"
    assert choose_index("auto", FLAT_MAX_SIZE_CPU + 1, cpu) == "sum_tree"
    assert choose_index("auto", 0, cuda) == "flat" and choose_index("auto", 2**23, cuda) == "flat"
    assert choose_index("flat", 2**23, cuda) == "flat" and choose_index("sum_tree", 8, cpu) == "sum_tree"
    assert PrioritizedSampler(2**20).index == "flat"  # a CPU replay starts empty


def test_a_growing_replay_moves_to_the_tree_once_and_a_resume_moves_with_it(monkeypatch):
    """Under "auto", the draw among more than FLAT_MAX_SIZE_CPU items is the tree's, with the
    leaves carried over; a sampler saved on either side of the move resumes on the same index and
    draws what the uninterrupted one draws."""
    monkeypatch.setattr(pql.replay.prioritized, "FLAT_MAX_SIZE_CPU", 32)
    gen = torch.Generator().manual_seed(6)
    sampler = PrioritizedSampler(64)
    for seed, size in enumerate((16, 32, 40, 64)):
        sampler.on_add(torch.arange(size - 16 if size > 16 else 0, size))
        small, bulk = sampler.state()
        resumed = PrioritizedSampler(64)
        for key, target in resumed.state_targets(small).items():
            target.copy_(bulk[key])
        resumed.load_state(small)
        assert resumed.index == sampler.index
        leaves = sampler.priorities.leaves.clone()
        idx, weights = sampler.sample(8, size, torch.Generator().manual_seed(seed))
        again, again_weights = resumed.sample(8, size, torch.Generator().manual_seed(seed))
        assert sampler.index == resumed.index == ("flat" if size <= 32 else "sum_tree")
        assert torch.equal(sampler.priorities.leaves, leaves)  # the move keeps every priority
        assert torch.equal(idx, again) and torch.equal(weights, again_weights)
        sampler.update(idx, torch.rand(8, generator=gen))


def test_unvalidated_draws_and_writes_make_the_host_wait_for_nothing():
    """What a CUDA graph could capture: proportional draws, write-backs (duplicates included) and
    new items on the flat index, unvalidated, call no op that reads the device from the host.
    The check itself would: a validated write reads whether any input was bad."""
    sampler = PrioritizedSampler(256, validate=False, index="flat")
    sampler.on_add(torch.arange(200))
    gen = torch.Generator().manual_seed(0)
    with HostSyncs() as syncs:
        for _ in range(3):
            idx, weights = sampler.sample(64, 200, gen)
            sampler.update(idx, torch.rand(64, generator=gen))
            sampler.on_add(torch.arange(200, 216))
    assert syncs.calls == []
    checked = PrioritizedSampler(256, index="flat")
    checked.on_add(torch.arange(8))
    with HostSyncs() as syncs:
        checked.update(torch.arange(8), torch.rand(8))
    assert syncs.calls
