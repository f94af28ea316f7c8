"""algo.return_scaling: the return's running statistics and scale, the actor's discounted returns
feeding them, and the V-learner dividing the rewards it learns from by the actor's latest scale."""

import numpy as np
import pytest
import torch

from pql.algos.off_policy import OffPolicyAlgorithm
from pql.checkpoint import load_checkpoint
from pql.logging import METRICS_CSV, read_metrics
from pql.nets import ReturnScale
from pql.runtime.off_policy.learners import VLearner
from pql.runtime.run import train


def test_the_statistics_are_the_stream_s_and_the_scale_their_larger_term():
    g = torch.Generator().manual_seed(0)
    scale = ReturnScale(-5.0, 5.0)
    assert float(scale.scale()) == pytest.approx(1.0)  # before any data
    seen = []
    for n in (7, 1, 30, 12):
        batch = torch.randn(n, generator=g) * 3 + 2
        scale.update(batch)
        seen.append(batch)
    everything = torch.cat(seen).double().numpy()
    assert float(scale.count) == len(everything)
    assert float(scale.mean) == pytest.approx(everything.mean(), rel=1e-5)
    assert float(scale.var) == pytest.approx(everything.var(), rel=1e-4)
    assert float(scale.max_return) == pytest.approx(everything.max())
    assert float(scale.min_return) == pytest.approx(everything.min())
    want = max(np.sqrt(everything.var()), np.abs(everything).max() / 5.0)
    assert float(scale.scale()) == pytest.approx(want, rel=1e-4)
    assert torch.allclose(scale(torch.tensor([2.0, -4.0])), torch.tensor([2.0, -4.0]) / want, rtol=1e-4)
    # A return far beyond the spread: the bound's term takes over, so |G| / scale <= bound.
    scale.update(torch.tensor([400.0]))
    assert float(scale.scale()) == pytest.approx(80.0)
    scale.update(torch.tensor([-600.0]))
    assert float(scale.scale()) == pytest.approx(120.0)


@pytest.mark.parametrize(
    "low, high, want",
    [
        (0.0, 5.0, 400.0 / 5),  # the negative returns beyond the support's 0 are left to be clipped
        (-5.0, 0.0, 900.0 / 5),  # and the positive ones beyond a support that ends at 0
        (-2.0, 8.0, max(400.0 / 8, 900.0 / 2)),
        (-5.0, 5.0, 900.0 / 5),  # ±bound: FlashSAC's max|G| / bound
    ],
)
def test_a_support_s_ends_each_bound_the_returns_of_their_sign(low, high, want):
    scale = ReturnScale(low, high)
    scale.update(torch.cat([torch.tensor([400.0, -900.0]), torch.zeros(998)]))
    assert float(scale.var.sqrt()) < 32.0 < want  # σ_G: below every term wanted here
    assert float(scale.scale()) == pytest.approx(want)
    scaled = scale(torch.tensor([400.0, -900.0]))  # on the support, but where their sign's end is 0
    assert low - 1e-6 <= float(scaled[0]) <= high + 1e-6 or high == 0.0
    assert low - 1e-6 <= float(scaled[1]) <= high + 1e-6 or low == 0.0


@pytest.mark.parametrize("low, high", [(1.0, 5.0), (-5.0, -1.0), (0.0, 0.0)])
def test_a_support_without_zero_inside_is_refused(low, high):
    with pytest.raises(ValueError, match=rf"must hold 0 and not be one point, got \[{low}, {high}\]"):
        ReturnScale(low, high)


SCALED = [
    "task=InvertedPendulum",
    "task.num_envs=4",
    "task.backend=mujoco",
    "task.eval_envs=2",
    "algo.batch_size=32",
    "algo.net.actor_hidden=[16,16]",
    "algo.net.critic_hidden=[16,16]",
    "algo.warmup_steps=4",
    "algo.return_scaling=true",
    "algo.value=categorical",
    "runtime.mode=sequential",
    "runtime.device=cpu",
    "runtime.max_env_steps=400",
    "runtime.eval_every=200",
    "runtime.log_every_s=0.1",
]


def test_a_run_scales_the_critic_s_rewards_by_the_actor_s_returns(make_config, tmp_path, monkeypatch):
    """InvertedPendulum pays 1 a step, so G_t = Σ γ^k over the episode so far: the actor folds in
    every env's G at every step, the V-learner divides each sampled reward by the published scale,
    and the categorical support is ±return_bound (the task's values may be negative)."""
    seen = []
    sample, update = VLearner._sample, OffPolicyAlgorithm.update_critic

    def sampling(self, batch_size):
        batch, indices, weights = sample(self, batch_size)
        seen.append([batch["reward"].clone(), self])
        return batch, indices, weights

    def updating(self, batch, weights):
        v_learner = seen[-1][1]
        seen[-1][1] = float(v_learner.return_scale.scale())  # its copy as the update reads it
        seen[-1].append(batch["reward"].clone())
        return update(self, batch, weights)

    monkeypatch.setattr(VLearner, "_sample", sampling)
    monkeypatch.setattr(OffPolicyAlgorithm, "update_critic", updating)
    cfg = make_config(SCALED, run_dir=tmp_path)
    assert (cfg.algo.v_min, cfg.algo.v_max) == (-5.0, 5.0)  # task.value_min < 0: either sign
    train(cfg)
    assert len(seen) > 20
    for raw, scale, given in seen:
        assert torch.allclose(given, raw / scale, rtol=1e-6)
    assert seen[-1][1] > 1.0, "the returns grew past the first steps' spread"
    state = load_checkpoint(tmp_path / "checkpoint.pt")
    actor = state["roles"]["actor"]
    env_steps = state["counters"]["env_steps"]
    assert int(actor["return_scale"]["count"]) == env_steps
    assert 1.0 < float(actor["return_scale"]["max_return"]) <= 100.0  # 1/(1 − γ) bounds Σ γ^k
    assert float(actor["return_scale"]["min_return"]) == 0.0  # the only G <= 0: an episode's start
    returns = actor["envs"]["returns"]
    assert returns.shape == (4,) and (returns >= 0).all() and (returns < 100).all()
    copy = state["roles"]["v_learner"]["copies"]["return_scale"]["weights"]  # a publication or so behind
    assert 0 < int(copy["count"]) <= env_steps
    logged = read_metrics(str(tmp_path / METRICS_CSV))["critic/return_scale"]
    assert np.isfinite(logged).any() and np.nanmax(logged) > 1.0
