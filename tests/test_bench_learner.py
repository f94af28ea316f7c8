"""bench/learner.py's together run is measured over its steady state, never over the learners'
compilation (on an H100 with cold caches a 30-s window read 15% of the bound, docs/gpu.md), and
records the together run's runtime.mps."""

import csv
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import learner  # noqa: E402

NUM_ENVS = 4096


def row(t: float, env: float, critic: float, policy: float) -> dict:
    # The run's cumulative ratio columns, far from the targets after a long start, must not be used.
    return {
        "wall_time_s": str(t),
        learner.ENV_RATE: str(env),
        learner.CRITIC_RATE: str(critic),
        learner.POLICY_RATE: str(policy),
        "ratio/beta_av": "2.7",
        "ratio/beta_pv": "0.57",
    }


def test_the_rates_and_ratios_come_from_the_intervals_after_both_learners_started():
    start = [row(2, 0, 0, 0), row(4, 90_000, 0, 0), row(6, 80_000, 30, 0), row(8, 70_000, 40, 10)]
    steady = [row(10, 102_400, 400, 200), row(12, 98_304, 384, 192), row(14, 106_496, 416, 208)]
    rates = learner.steady_rates(start + steady + [row(16, 5_000, 20, 10)], NUM_ENVS, 16)
    assert rates[learner.ENV_RATE] == pytest.approx(102_400)
    assert rates[learner.CRITIC_RATE] == pytest.approx(400) and rates[learner.POLICY_RATE] == pytest.approx(200)
    assert rates["ratio/beta_av"] == pytest.approx(16) and rates["ratio/beta_pv"] == pytest.approx(2)
    assert rates["steady_from_s"] == 10


def test_rows_without_a_timing_are_left_out():
    rows = (
        [row(2, 100, 1, 1)]
        + [{"wall_time_s": "3", learner.ENV_RATE: ""}]
        + [row(t, 4096, 16, 8) for t in (4, 6, 8, 10)]
    )
    assert learner.steady_rates(rows, NUM_ENVS, 10)["ratio/beta_av"] == pytest.approx(16)


@pytest.mark.parametrize(
    "rows, says",
    [
        ([row(t, 90_000, 0, 0) for t in (2, 4, 6, 8)], "the learners never updated"),
        ([row(2, 90_000, 0, 0)] + [row(t, 4096, 16, 8) for t in (4, 6, 8, 10)], "from 4 s on; 2 steady"),
    ],
)
def test_a_run_too_short_for_a_steady_state_asks_for_more_seconds(rows, says):
    with pytest.raises(RuntimeError, match=f"no steady state in 30 s .*{says}.*--together-seconds"):
        learner.steady_rates(rows, NUM_ENVS, 30)


def test_the_together_runs_line_about_mps_is_found():
    output = (
        "pql 0.2.0: task=Ant algo=pql device=cuda:0 ...\n"
        "pql: MPS: a daemon of this run's own (/tmp/pql-mps-x/pipe) lets the roles share the GPU; it stops "
        "with the run\nstep 1 ...\n"
    )
    assert learner.mps_line(output).startswith("pql: MPS: a daemon of this run's own")
    assert learner.mps_line("pql 0.2.0: task=Ant algo=pql device=cpu\n") is None


def test_the_csv_records_the_together_runs_mps_mode(tmp_path):
    path = tmp_path / "learner.csv"
    done = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "bench", "learner.py"),
            "--device",
            "cpu",
            "--num-envs",
            "4",
            "--batch-size",
            "16",
            "--seconds",
            "0.1",
            "--together-seconds",
            "0",
            "--mps",
            "off",
            "--csv",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["quantity"] for r in rows] == [
        "critic_updates_per_s_alone",
        "policy_updates_per_s_alone",
        "actor_env_steps_per_s_alone",
        "bound_env_steps_per_s",
    ]
    assert {r["mps"] for r in rows} == {"off"}
