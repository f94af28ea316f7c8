"""Learning tests: seeded, on CPU, under a minute each. InvertedPendulum's return is capped at
1000 (one per step alive); a random policy falls within a few steps (return < 20). The long
learning checks (Ant walks 30 m, InvertedDoublePendulum solved, SAC's InvertedPendulum at 900, and
README's 15-minute results) are `python bench/learning.py`, run by hand, never in CI. PQL with its
roles in processes learns in tests/test_chaos.py, whose last launch resumes a killed run and solves."""

import pytest

from bench.learning import OFF_POLICY, PENDULUM, STEP_BUDGET  # one copy, shared with the benchmark
from pql.runtime import train

# A budget of env steps rather than wall time where the run is sequential: a seed then learns the
# same curve however fast the machine, as the InvertedDoublePendulum test below found, and one
# thread, so that other work on the CPU cannot slow the updates. Seeds 0, 1 and 2 on this project's
# 2-core VM first scored >= 900 at 8k, 8k, 8k env steps (pql), 8k, 10k, 10k (pql_d), 12k, 8k, 10k
# (proportional priorities), 10k, 18k, 8k (rank-based) and 88k, 31k, 111k (SAC, whose seed 0 took
# 161 s there: CI's 170-s wall budget failed it on a slower day).


def solve_pendulum(make_config, overrides, max_env_steps=None):
    """Train until an evaluation reaches 900 (of 1000): within max_env_steps in sequential mode,
    else within 170 s; -> the final scalars."""
    algo = next((o.split("=", 1)[1] for o in overrides if o.startswith("algo=")), "pql")
    budget = [] if max_env_steps is None else [*STEP_BUDGET, f"runtime.max_env_steps={max_env_steps}"]
    cfg = make_config([*PENDULUM, *(OFF_POLICY if algo in ("pql", "pql_d", "sac") else ()), *budget, *overrides])
    final = train(cfg)
    assert final["eval/return"] >= 900, final
    return final


@pytest.mark.slow
def test_pql_solves_inverted_pendulum(make_config):
    solve_pendulum(make_config, [], max_env_steps=40_000)


# Proportional priorities, the default mode; rank mode's sampling is checked against references
# (tests/kernels/test_prioritized.py) and its resume bit for bit (tests/test_resume.py). Seed 1,
# which now first scores >= 900 at 10k env steps where seed 0 takes 12k, as SAC's test takes its
# quicker seed.
@pytest.mark.slow
def test_pql_with_prioritized_replay_solves_inverted_pendulum(make_config):
    prioritized = ["replay.kind=prioritized", "replay.priority_mode=proportional", "runtime.seed=1"]
    solve_pendulum(make_config, prioritized, max_env_steps=40_000)
