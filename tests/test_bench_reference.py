"""bench/reference_policies.py: the same episodes for every policy, scored as evaluations score them."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.reference_policies import score


def test_every_policy_meets_the_same_episodes_and_its_terms_add_up_to_its_return():
    zero = lambda obs, env: torch.zeros(obs.shape[0], env.act_dim)
    first, again = score("Hopper", zero, 4, 7), score("Hopper", zero, 4, 7)
    assert first == again
    assert 0 < first["length"] < 1000 and first["ended early"] == 1.0  # a still Hopper falls
    terms = sum(value for key, value in first.items() if key.startswith("reward_"))
    assert terms == pytest.approx(first["return"], rel=1e-4)
