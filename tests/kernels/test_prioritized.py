"""PrioritizedSampler on either index (the sum-tree's kernels, the flat prefix sum): sampling law
(chi-square), importance weights, beta annealing, new-item priority, state round trip, argument
checks; sequence_priority."""

import pytest
import torch
from impl_cases import CASES
from scipy import stats

from pql.kernels.sumtree import SumTree
from pql.replay.prioritized import PrioritizedSampler, sequence_priority

MODES = ["proportional", "rank"]
# (impl, device, index): the sum-tree in each of the kernel cases, and the flat index on the CPU
# and on a GPU.
TREE_CASES = [pytest.param((*c.values[0], "sum_tree"), id=c.id, marks=c.marks) for c in CASES]
SAMPLER_CASES = [
    *TREE_CASES,
    pytest.param(("torch", "cpu", "flat"), id="flat-cpu"),
    pytest.param(
        ("torch", "cuda", "flat"),
        id="flat-cuda",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")],
    ),
]


def filled(case, mode, capacity=50, size=40, seed=0, **kwargs):
    """A sampler with `size` items added, then given random |TD errors|: (sampler, td_abs [size])."""
    impl, device, index = case
    sampler = PrioritizedSampler(capacity, device, mode=mode, impl=impl, index=index, **kwargs)
    sampler.on_add(torch.arange(size, device=device))
    td = torch.rand(size, generator=torch.Generator().manual_seed(seed)) * 3
    sampler.update(torch.arange(size, device=device), td.to(device))
    return sampler, td


def expected_probabilities(mode, td, alpha, eps):
    """P(i) = p_i^alpha / sum_k p_k^alpha, p = |delta| + eps or 1 / rank, in float64."""
    td = td.double()
    if mode == "proportional":
        p = td + eps
    else:
        ranks = torch.empty_like(td)
        ranks[torch.sort(td, descending=True, stable=True).indices] = torch.arange(1, td.numel() + 1).double()
        p = 1 / ranks
    return p**alpha / (p**alpha).sum()


@pytest.mark.parametrize("case", SAMPLER_CASES)
@pytest.mark.parametrize("mode", MODES)
def test_frequencies_match_the_priorities(case, mode):
    sampler, td = filled(case, mode, alpha=0.7)
    gen = torch.Generator(sampler.device).manual_seed(1)
    counts = torch.zeros(50, dtype=torch.int64)
    for _ in range(30):
        idx, _ = sampler.sample(1000, 40, gen)
        counts += torch.bincount(idx.cpu(), minlength=50)
    assert counts[40:].sum() == 0  # never a slot past `size`
    expected = expected_probabilities(mode, td, 0.7, sampler.eps) * counts.sum()
    # Stratified draws spread less than multinomial ones: a fair sampler's statistic is at most
    # chi-square distributed, a biased one's grows with the number of draws.
    assert stats.chisquare(counts[:40].double().numpy(), expected.numpy()).pvalue > 1e-3


@pytest.mark.parametrize("case", SAMPLER_CASES)
@pytest.mark.parametrize("mode", MODES)
def test_weights_follow_the_formula(case, mode):
    sampler, td = filled(case, mode, alpha=0.6, beta0=0.4, beta_anneal_updates=4)
    gen = torch.Generator(sampler.device).manual_seed(2)
    probs = expected_probabilities(mode, td, 0.6, sampler.eps)
    for beta in (0.4, 0.55, 0.7, 0.85, 1.0, 1.0):
        idx, weights = sampler.sample(256, 40, gen)
        idx, weights = idx.cpu(), weights.cpu()
        # w_i = (N P(i))^-beta / max_j (N P(j))^-beta, N = size.
        w = (40 * probs) ** -beta
        assert weights.dtype == torch.float32
        torch.testing.assert_close(weights.double(), w[idx] / w.max(), rtol=2e-5, atol=1e-6)
    assert sampler.beta == 1.0


@pytest.mark.parametrize("index", ["sum_tree", "flat"])
def test_beta_anneals_linearly_then_stays_at_one(index):
    sampler = PrioritizedSampler(8, beta0=0.2, beta_anneal_updates=4, impl="torch", index=index)
    sampler.on_add(torch.arange(8))
    betas = []
    for _ in range(6):
        betas.append(sampler.beta)
        sampler.sample(4, 8)
    assert betas == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0, 1.0])


@pytest.mark.parametrize("case", SAMPLER_CASES)
def test_new_items_enter_at_the_running_max_priority(case):
    impl, device, index = case
    sampler = PrioritizedSampler(8, device, alpha=0.5, eps=1e-6, impl=impl, index=index)
    sampler.on_add(torch.arange(4, device=device))
    assert sampler.priorities.leaves[:4].tolist() == [1.0] * 4  # nothing seen yet: priority 1
    sampler.update(torch.tensor([0, 1], device=device), torch.tensor([8.0, 0.5], device=device))
    sampler.update(torch.tensor([0], device=device), torch.tensor([0.1], device=device))
    sampler.on_add(torch.tensor([5], device=device))
    # The max ever written, (8 + eps)^0.5, though slot 0 has since dropped to 0.1.
    assert sampler.priorities.leaves[5].item() == pytest.approx((8 + 1e-6) ** 0.5)


@pytest.mark.parametrize("case", SAMPLER_CASES)
def test_new_items_can_bring_their_own_priorities(case):
    """Ape-X: priorities computed where the data is made replace the max priority."""
    impl, device, index = case
    sampler = PrioritizedSampler(8, device, alpha=0.5, eps=1e-6, impl=impl, index=index)
    sampler.on_add(torch.arange(3, device=device), torch.tensor([4.0, 0.0, 1.0], device=device))
    torch.testing.assert_close(sampler.priorities.leaves[:3].cpu(), torch.tensor([4.0, 0.0, 1.0]).add(1e-6).sqrt())
    sampler.on_add(torch.tensor([3], device=device))  # and raise the running max new items get
    assert sampler.priorities.leaves[3].item() == pytest.approx((4 + 1e-6) ** 0.5)


@pytest.mark.parametrize("case", SAMPLER_CASES)
@pytest.mark.parametrize("mode", MODES)
def test_duplicate_updates_keep_the_last(case, mode):
    sampler, td = filled(case, mode, capacity=8, size=8)
    dev = sampler.device
    sampler.update(torch.tensor([2, 5, 2], device=dev), torch.tensor([7.0, 0.0, 0.25], device=dev))
    td[2], td[5] = 0.25, 0.0
    sampler.sample(1, 8)  # rank mode re-ranks here
    probs = expected_probabilities(mode, td, sampler.alpha, sampler.eps)
    shares = (sampler.priorities.leaves / sampler.priorities.total()).double().cpu()
    torch.testing.assert_close(shares, probs, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("index", ["sum_tree", "flat"])
def test_rank_mode_reranks_when_the_buffer_grows(index):
    sampler = PrioritizedSampler(6, mode="rank", alpha=1.0, impl="torch", index=index)
    sampler.on_add(torch.arange(2))
    sampler.update(torch.arange(2), torch.tensor([1.0, 2.0]))
    sampler.sample(2, 2)
    assert sampler.priorities.leaves.tolist() == [0.5, 1.0, 0, 0, 0, 0]
    sampler.on_add(torch.tensor([2]))  # at the running max |delta| = 2: ties rank by slot
    sampler.sample(2, 3)
    assert sampler.priorities.leaves.tolist() == pytest.approx([1 / 3, 1.0, 0.5, 0, 0, 0])


@pytest.mark.parametrize("index", ["sum_tree", "flat"])
def test_rank_mode_sorts_at_most_once_per_rerank_every_samples(monkeypatch, index):
    """The cap itself: with updates between all sample calls, a sort every call uncapped."""
    sorts = []
    real_sort = torch.sort
    monkeypatch.setattr(torch, "sort", lambda *a, **k: sorts.append(1) or real_sort(*a, **k))
    gen = torch.Generator().manual_seed(0)
    for rerank_every, batch_size, expected in [(1, 64, 12), (5, 64, 3), (None, 64, 12), (None, 16, 3)]:
        sorts.clear()
        sampler = PrioritizedSampler(64, mode="rank", impl="torch", rerank_every=rerank_every, index=index)
        sampler.on_add(torch.arange(64))
        for _ in range(12):
            idx, _ = sampler.sample(batch_size, 64, gen)
            sampler.update(idx, torch.rand(batch_size, generator=gen))
        # None: ceil(size / batch_size) calls per ranking, exact when the buffer fits in a batch.
        assert len(sorts) == expected, (rerank_every, batch_size)


@pytest.mark.parametrize("index", ["sum_tree", "flat"])
def test_rank_estimates_between_reranks_follow_the_documented_rule(index):
    sampler = PrioritizedSampler(8, mode="rank", alpha=1.0, impl="torch", rerank_every=3, index=index)
    sampler.on_add(torch.arange(4), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    sampler.sample(2, 4)  # ranks 4, 3, 2, 1
    assert sampler.priorities.leaves.tolist() == pytest.approx([1 / 4, 1 / 3, 1 / 2, 1, 0, 0, 0, 0])
    # rank = 1 + #{ranked |delta| >= the new |delta|}: 2.5 -> 3, 4 -> 2 (after its tie), 10 -> 1
    sampler.update(torch.tensor([0, 1, 2]), torch.tensor([2.5, 4.0, 10.0]))
    # New items at the max (10): after the ranked ones at 10 (none), then in order of arrival.
    sampler.on_add(torch.tensor([4, 5]))
    sampler.sample(2, 6)
    sampler.on_add(torch.tensor([6]))
    assert sampler.priorities.leaves.tolist() == pytest.approx([1 / 3, 1 / 2, 1, 1, 1, 1 / 2, 1 / 3, 0])
    sampler.sample(2, 7)  # the third call of this ranking: no re-rank yet
    assert sampler.priorities.leaves[6].item() == pytest.approx(1 / 3)
    sampler.sample(2, 7)  # exact again: 10 (slots 2, 4, 5, 6), 4 (slots 1, 3), 2.5 (slot 0)
    assert sampler.priorities.leaves.tolist() == pytest.approx([1 / 7, 1 / 5, 1, 1 / 6, 1 / 2, 1 / 3, 1 / 4, 0])


@pytest.mark.parametrize("case", TREE_CASES)
def test_rerank_of_a_few_items_in_a_large_tree_equals_a_rebuild(case, monkeypatch):
    impl, device, _ = case
    sampler, td = filled(case, "rank", capacity=4096, size=100, alpha=0.7)
    rebuilds = []
    monkeypatch.setattr(sampler.priorities, "reset", rebuilds.append)
    sampler.sample(8, 100)
    assert rebuilds == []  # 100 * log2(4096) < 4096 nodes: the ranked leaves are updated in place
    order = torch.sort(td.to(device), descending=True, stable=True).indices
    leaves = torch.zeros(4096, device=device).index_copy_(
        0, order, torch.arange(1, 101, dtype=torch.float32, device=device).pow(-0.7)
    )
    rebuilt = SumTree(4096, device, impl=impl)
    rebuilt.reset(leaves)
    assert torch.equal(sampler.priorities.sum_tree, rebuilt.sum_tree)
    assert torch.equal(sampler.priorities.min_tree, rebuilt.min_tree)


@pytest.mark.parametrize("case", SAMPLER_CASES)
def test_rank_mode_between_reranks_samples_and_weighs_by_the_index(case):
    """Estimated leaves: frequencies proportional to the leaves, weights (leaf / min leaf)^-beta
    in (0, 1], new items drawn in the next batch; exact ranks again after the re-rank."""
    impl, device, _ = case
    sampler, td = filled(case, "rank", capacity=300, size=256, alpha=0.6, beta0=0.5, rerank_every=30)
    gen = torch.Generator(device).manual_seed(4)
    sampler.sample(256, 256, gen)  # the ranking's first call ranks exactly
    for round_ in range(5):
        idx, _ = sampler.sample(32, 256, gen)
        # One value per slot, so a slot drawn twice gets the same |delta| either way.
        new_td = torch.rand(256, generator=torch.Generator().manual_seed(10 + round_)) * 3
        sampler.update(idx, new_td.to(device)[idx])
        td[idx.cpu()] = new_td[idx.cpu()]
    new = torch.arange(256, 266, device=device)
    sampler.on_add(new)
    td = torch.cat([td, sampler.max_priority.cpu().expand(10)])
    leaves = sampler.priorities.leaves.cpu().double()
    exact = expected_probabilities("rank", td, 0.6, sampler.eps)
    assert not torch.allclose(leaves[:266] / leaves.sum(), exact, rtol=1e-3)  # estimates, not ranks
    # A new item's leaf spans two strata of a 512 batch, so the next batch draws every one.
    assert (leaves[256:266] >= 2 * leaves.sum() / 512).all()
    assert set(new.tolist()) <= set(sampler.sample(512, 266, gen)[0].tolist())
    counts = torch.zeros(300, dtype=torch.int64)
    for _ in range(20):
        beta = sampler.beta
        idx, weights = sampler.sample(1000, 266, gen)
        idx, weights = idx.cpu(), weights.cpu()
        assert ((weights > 0) & (weights <= 1)).all()
        # Normalised by the least leaf of the index sampled: weight 1 there.
        torch.testing.assert_close(weights.double(), (leaves[idx] / leaves[:266].min()) ** -beta, rtol=2e-5, atol=1e-7)
        counts += torch.bincount(idx, minlength=300)
    assert torch.equal(sampler.priorities.leaves.cpu().double(), leaves)  # 27 calls: the same ranking
    assert counts[266:].sum() == 0
    expected = leaves[:266] / leaves.sum() * counts.sum()
    assert stats.chisquare(counts[:266].double().numpy(), expected.numpy()).pvalue > 1e-3
    for _ in range(3):
        sampler.sample(1, 266)  # the ranking's 28th to 30th calls
    assert torch.equal(sampler.priorities.leaves.cpu().double(), leaves)
    sampler.sample(1, 266)
    torch.testing.assert_close(
        (sampler.priorities.leaves[:266] / sampler.priorities.total()).double().cpu(), exact, rtol=1e-5, atol=1e-7
    )


@pytest.mark.parametrize("case", SAMPLER_CASES)
def test_empty_batch(case):
    sampler, _ = filled(case, "proportional")
    dev = sampler.device
    sampler.update(torch.empty(0, dtype=torch.int64, device=dev), torch.empty(0, device=dev))
    sampler.on_add(torch.empty(0, dtype=torch.int64, device=dev))
    idx, weights = sampler.sample(0, 40)
    assert idx.shape == weights.shape == (0,)


def test_bad_arguments_are_rejected():
    for kwargs, message in [
        (dict(mode="sorted"), "mode='sorted' is not allowed; expected one of proportional, rank"),
        (dict(alpha=-0.1), "alpha=-0.1 is not allowed"),
        (dict(beta0=1.5), "beta0=1.5 is not allowed"),
        (dict(beta_anneal_updates=0), "beta_anneal_updates=0 is not allowed"),
        (dict(eps=0.0), "eps=0.0 is not allowed"),
        (dict(rerank_every=0), "rerank_every=0 is not allowed; expected an integer >= 1"),
        (dict(index="heap"), "index='heap' is not allowed; expected one of auto, sum_tree, flat"),
    ]:
        with pytest.raises(ValueError, match=message):
            PrioritizedSampler(10, **kwargs)
    sampler = PrioritizedSampler(10, impl="torch")
    sampler.on_add(torch.arange(4))
    for size in (0, 11):
        with pytest.raises(ValueError, match=f"size={size} is not allowed"):
            sampler.sample(2, size)
    for td in (float("nan"), -1.0, float("inf")):
        with pytest.raises(ValueError, match=r"td_abs\[1\]=.* td_abs must be finite and >= 0"):
            sampler.update(torch.tensor([0, 1]), torch.tensor([1.0, td]))
    with pytest.raises(ValueError, match="one per index"):
        sampler.update(torch.tensor([0, 1]), torch.ones(3))
    with pytest.raises(IndexError, match="out of range"):
        sampler.update(torch.tensor([10]), torch.ones(1))
    with pytest.raises(IndexError, match="out of range"):
        PrioritizedSampler(10, mode="rank").on_add(torch.tensor([12]))


def test_sequence_priority():
    td = torch.tensor([[1.0, 3.0, 2.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(sequence_priority(td), torch.tensor([0.9 * 3 + 0.1 * 2, 0.0]))
    torch.testing.assert_close(sequence_priority(td, eta=0.0), td.mean(1))
    with pytest.raises(ValueError, match="eta=1.5 is not allowed"):
        sequence_priority(td, eta=1.5)
    with pytest.raises(ValueError, match=r"\[B, T\] float"):
        sequence_priority(td[0])
    with pytest.raises(ValueError, match="T=0"):
        sequence_priority(torch.zeros(2, 0))


def test_sequence_priority_over_windows_of_different_lengths():
    """Each row counts its first lengths[b] steps only (a window cut short by an episode end)."""
    gen = torch.Generator().manual_seed(0)
    td = torch.rand(6, 4, generator=gen)
    lengths = torch.tensor([1, 2, 3, 4, 4, 2])
    got = sequence_priority(td, eta=0.7, lengths=lengths)
    for b in range(6):
        window = td[b, : int(lengths[b])].tolist()
        assert got[b].item() == pytest.approx(0.7 * max(window) + 0.3 * sum(window) / len(window), rel=1e-6)
