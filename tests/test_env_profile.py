"""bench/env_throughput.py --profile on CPU: the parts of one env step (physics, restart, pql's own
work) are each measured and together make up the whole step. No speed is asserted."""

import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import env_throughput  # noqa: E402

import tasks  # noqa: E402

NUM_ENVS = 16


@pytest.mark.parametrize("backend", ["mujoco", "mjwarp"])
def test_the_parts_of_a_step_are_positive_and_sum_to_the_whole(backend):
    env = tasks.make("Ant", num_envs=NUM_ENVS, device="cpu", seed=0, backend=backend)
    env.reset()
    step = env_throughput.random_steps(env)
    for _ in range(env_throughput.WARMUP_STEPS):
        step()
    profile = env_throughput.profile_step(env, step, seconds=0.5)
    try:
        parts = {part: profile.ms[part] for part in ("physics", "restart", "rest")}
        assert all(ms > 0 for ms in parts.values()), parts
        assert sum(parts.values()) == pytest.approx(profile.ms["step"])
        # Against the window's own wall clock per call, which also draws the actions: the spans
        # cover the step, and nothing outside it.
        assert 0.5 * profile.wall_ms < profile.ms["step"] <= profile.wall_ms
        assert sum(profile.share(part) for part in parts) == pytest.approx(1.0)
        # The wrappers are gone: the env steps through its own methods again.
        assert "step" not in vars(env) and not {"step", "reset", "_check_overflow"} & set(vars(env.physics))
        env.step(env.action_low.expand(NUM_ENVS, -1).clone())
    finally:
        env.close()


def test_the_spans_are_recorded_when_the_call_raises():
    spans = env_throughput.Spans(torch.device("cpu"))

    def fails():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        spans.around(fails)()
    assert len(spans.pairs) == 1 and spans.total_ms() >= 0
