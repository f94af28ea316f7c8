"""Sum-tree kernels against their PyTorch reference, a full rebuild, and the sampling law.

The Triton cases run on CPU under TRITON_INTERPRET=1 (set before pql.kernels is imported) and
compiled on a GPU; otherwise they skip with a reason.
"""

import math
import os
import subprocess
import sys

import pytest
import torch
from impl_cases import CASES
from scipy import stats

from pql.kernels import SumTree
from pql.kernels.sumtree import UPDATE_BLOCK_MAX, sample_from_uniforms


def trees(capacity, case):
    """(tree under test, reference tree), both empty."""
    impl, device = case
    return SumTree(capacity, device, impl=impl), SumTree(capacity, device, impl="torch")


def assert_consistent(tree):
    """Every internal node equals the full rebuild from the leaves, bit for bit."""
    rebuilt = SumTree(tree.capacity, tree.device, impl="torch")
    rebuilt.reset(tree.leaves.clone())
    assert torch.equal(tree.sum_tree, rebuilt.sum_tree)
    assert torch.equal(tree.min_tree, rebuilt.min_tree)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("capacity", [1, 5, 1000, 1024])
def test_update_matches_reference_and_rebuild(case, capacity):
    gen = torch.Generator().manual_seed(capacity)
    tree, ref = trees(capacity, case)
    dev = tree.device
    expected = torch.zeros(capacity)
    batch = 8192 if dev.type == "cuda" else 300
    for _ in range(4):
        # Drawn with replacement: many duplicates (for small capacities); a quarter of zeros.
        idx = torch.randint(0, capacity, (batch,), generator=gen)
        prio = torch.rand(batch, generator=gen) * (torch.rand(batch, generator=gen) > 0.25)
        for i, p in zip(idx.tolist(), prio.tolist()):
            expected[i] = p
        tree.update(idx.to(dev), prio.to(dev))
        ref.update(idx.to(dev), prio.to(dev))
        assert torch.equal(tree.leaves.cpu(), expected)
        assert torch.equal(tree.sum_tree, ref.sum_tree)
        assert torch.equal(tree.min_tree, ref.min_tree)
        assert_consistent(tree)
    positive = expected[expected > 0]
    assert tree.min().item() == (positive.min().item() if positive.numel() else math.inf)
    assert tree.total().item() == pytest.approx(expected.double().sum().item(), rel=1e-5)


@pytest.mark.parametrize("case", CASES)
def test_duplicates_last_write_wins_across_launches(case):
    tree, ref = trees(16, case)
    # Longer than one kernel launch, every slot repeated: slots 0-9 last appear in the second
    # launch, slots 10-15 in the first.
    n = UPDATE_BLOCK_MAX + 10
    idx = torch.arange(n) % 16
    prio = torch.arange(n, dtype=torch.float32)
    for t in (tree, ref):
        t.update(idx.to(t.device), prio.to(t.device))
    last = {i: p for i, p in zip(idx.tolist(), prio.tolist())}
    assert tree.leaves.cpu().tolist() == [last[i] for i in range(16)]
    assert last[9] >= UPDATE_BLOCK_MAX > last[10]
    assert torch.equal(tree.sum_tree, ref.sum_tree)
    assert_consistent(tree)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("capacity", [1023, 1024, 1025])
def test_capacity_boundaries_duplicates_and_zeros_in_one_batch(case, capacity):
    """Around a power of two (1025 slots pad to 2048 leaves): one batch writes the first and the
    last slot three times each and a slot between them twice, zeros among the writes. The last
    write of each wins, the tree is its reference's node for node, and draws land on the two
    slots left positive, never on a zero or the padding."""
    tree, ref = trees(capacity, case)
    dev = tree.device
    last = capacity - 1
    idx = torch.tensor([0, last, 5, last, 0, last, 5, 0], device=dev)
    prio = torch.tensor([9.0, 1.0, 3.0, 0.0, 0.0, 2.0, 0.0, 0.25], device=dev)
    for t in (tree, ref):
        t.update(idx, prio)
    assert tree.leaves[[0, 5, last]].tolist() == [0.25, 0.0, 2.0]
    assert torch.equal(tree.sum_tree, ref.sum_tree) and torch.equal(tree.min_tree, ref.min_tree)
    assert_consistent(tree)
    assert tree.min().item() == 0.25 and tree.total().item() == 2.25
    drawn = tree.sample(64, torch.Generator(dev).manual_seed(0))
    assert torch.equal(drawn, ref.sample(64, torch.Generator(dev).manual_seed(0)))
    assert set(drawn.tolist()) == {0, last}


@pytest.mark.parametrize("case", CASES)
def test_min_excludes_zero_and_padding(case):
    tree = trees(5, case)[0]
    dev = tree.device
    assert tree.min().item() == math.inf and tree.total().item() == 0
    tree.update(torch.arange(5, device=dev), torch.tensor([0.0, 3.0, 0.0, 2.0, 0.0], device=dev))
    assert tree.min().item() == 2.0 and tree.total().item() == 5.0
    tree.update(torch.tensor([1, 3], device=dev), torch.zeros(2, device=dev))
    assert tree.min().item() == math.inf and tree.total().item() == 0


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("capacity,batch", [(1, 7), (5, 1), (6, 300), (1000, 300), (1024, 0)])
def test_sample_matches_reference(case, capacity, batch):
    gen = torch.Generator().manual_seed(1)
    tree, ref = trees(capacity, case)
    dev = tree.device
    prio = torch.rand(capacity, generator=gen) * (torch.rand(capacity, generator=gen) > 0.3)
    prio[capacity // 2] = 0.5  # at least one positive
    for t in (tree, ref):
        t.update(torch.arange(capacity, device=dev), prio.to(dev))
    a = tree.sample(batch, torch.Generator(dev).manual_seed(2))
    b = ref.sample(batch, torch.Generator(dev).manual_seed(2))
    assert a.dtype == torch.int64 and a.shape == (batch,)
    assert torch.equal(a, b)
    assert (prio[a.cpu()] > 0).all()


@pytest.mark.parametrize("case", CASES)
def test_sample_is_the_inverse_cdf_of_each_stratum(case):
    gen = torch.Generator().manual_seed(3)
    capacity, batch = 300, 500
    tree = trees(capacity, case)[0]
    prio = torch.rand(capacity, generator=gen) ** 3 * (torch.rand(capacity, generator=gen) > 0.2)
    tree.update(torch.arange(capacity, device=tree.device), prio.to(tree.device))
    u = torch.rand(batch, generator=gen)
    idx = sample_from_uniforms(tree.sum_tree, u.to(tree.device), capacity, tree.impl).cpu()
    cum = torch.cumsum(prio.double(), 0)
    target = (torch.arange(batch) + u.double()) * cum[-1] / batch
    lower = torch.where(idx > 0, cum[(idx - 1).clamp(min=0)], 0.0)
    tol = 1e-5 * cum[-1]  # float32 prefix sums along the tree path
    assert ((lower - tol <= target) & (target <= cum[idx] + tol)).all()
    assert (prio[idx] > 0).all()


@pytest.mark.parametrize("case", CASES)
def test_sample_right_edge_never_returns_empty_or_padding(case):
    gen = torch.Generator().manual_seed(4)
    for capacity in (3, 5, 77, 1000):
        for _ in range(5):
            tree, ref = trees(capacity, case)
            dev = tree.device
            # Mixed magnitudes make the float32 sums round; a zero tail sits right of the mass.
            scale = 10.0 ** torch.randint(-4, 4, (capacity,), generator=gen)
            prio = torch.rand(capacity, generator=gen) * scale
            prio[capacity // 2 + 1 :] = 0.0
            for t in (tree, ref):
                t.update(torch.arange(capacity, device=dev), prio.to(dev))
            # The largest float32 below 1, and 0: both ends of every stratum.
            for value in (1.0 - 2.0**-24, 0.0):
                u = torch.full((64,), value, device=dev)
                a = sample_from_uniforms(tree.sum_tree, u, capacity, tree.impl)
                assert torch.equal(a, sample_from_uniforms(ref.sum_tree, u, capacity, "torch"))
                a = a.cpu()
                assert (a >= 0).all() and (a < capacity).all() and (prio[a] > 0).all()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("capacity", [8, 6])
def test_all_equal_priorities_give_one_slot_per_stratum(case, capacity):
    tree = trees(capacity, case)[0]
    dev = tree.device
    tree.update(torch.arange(capacity, device=dev), torch.full((capacity,), 0.25, device=dev))
    drawn = tree.sample(capacity, torch.Generator(dev).manual_seed(0))
    assert torch.equal(drawn.cpu(), torch.arange(capacity))


@pytest.mark.parametrize("case", CASES)
def test_sampling_frequencies_chi_square(case):
    gen = torch.Generator().manual_seed(5)
    capacity = 37
    prio = 0.1 + 2 * torch.rand(capacity, generator=gen)
    prio[[3, 17, 36]] = 0.0
    tree = trees(capacity, case)[0]
    dev = tree.device
    tree.update(torch.arange(capacity, device=dev), prio.to(dev))
    counts = torch.zeros(capacity, dtype=torch.int64)
    draws = torch.Generator(dev).manual_seed(6)
    for _ in range(40):
        counts += torch.bincount(tree.sample(997, draws).cpu(), minlength=capacity)
    assert counts[[3, 17, 36]].sum() == 0
    keep = prio > 0
    expected = prio[keep].double() / prio[keep].double().sum() * counts.sum()
    # Stratified draws are less spread than multinomial ones, so under a correct sampler the
    # statistic is at most chi-square distributed: a bias still shows, a fair sampler passes.
    assert stats.chisquare(counts[keep].double().numpy(), expected.numpy()).pvalue > 1e-3


@pytest.mark.parametrize("case", CASES)
def test_empty_batch(case):
    tree = trees(4, case)[0]
    dev = tree.device
    tree.update(torch.empty(0, dtype=torch.int64, device=dev), torch.empty(0, device=dev))
    assert tree.total().item() == 0
    tree.update(torch.tensor([2], device=dev), torch.tensor([1.0], device=dev))
    assert tree.sample(0).shape == (0,)
    assert tree.get(torch.empty(0, dtype=torch.int64, device=dev)).shape == (0,)


def test_bad_input_is_rejected():
    tree = SumTree(10, impl="torch")
    with pytest.raises(IndexError, match=r"indices\[1\]=10 is out of range"):
        tree.update(torch.tensor([0, 10]), torch.ones(2))
    with pytest.raises(IndexError, match="-1 is out of range"):
        tree.get(torch.tensor([-1]))
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match=r"priorities\[1\]=.* expected a finite number >= 0"):
            tree.update(torch.tensor([0, 1]), torch.tensor([1.0, bad]))
    with pytest.raises(ValueError, match="int64"):
        tree.update(torch.tensor([0.0]), torch.ones(1))
    with pytest.raises(ValueError, match="one per index"):
        tree.update(torch.tensor([0, 1]), torch.ones(3))
    with pytest.raises(ValueError, match="all zero"):
        tree.sample(4)
    with pytest.raises(ValueError, match="batch_size=-1"):
        tree.sample(-1)
    for capacity in (0, -3, 2.5, 2**30 + 1):
        with pytest.raises(ValueError, match="capacity="):
            SumTree(capacity)
    with pytest.raises(ValueError, match="impl='cuda'"):
        SumTree(4, impl="cuda")
    assert tree.total().item() == 0  # nothing above reached the tree


def test_forcing_triton_on_cpu_without_the_interpreter_raises():
    # In a process of its own without TRITON_INTERPRET: the variable only counts at import.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = "from pql.kernels import SumTree\ntry:\n    SumTree(4, impl='triton')\nexcept ValueError as e:\n    print(e)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "impl='triton' cannot run on cpu tensors" in out.stdout and "TRITON_INTERPRET=1" in out.stdout, out
