"""RunLogger on real files: TensorBoard events, metrics.csv with late keys, the PNG, wandb offline."""

import csv
import glob
import json
import os
import sys
from types import SimpleNamespace

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from pql.logging import EVAL_RETURN, RunLogger, WandbSettings
from pql.logging.console import format_progress
from pql.runtime.episodes import EpisodeStats, latest_episode_scalars
from pql.runtime.shared import RunCounters, RunStats

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _rows(run_dir):
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
        return list(csv.DictReader(f))


def test_csv_tensorboard_and_learning_curve(tmp_path):
    run_dir = tmp_path / "run"
    logger = RunLogger(run_dir, {"task": {"name": "Ant"}, "hidden": (256, 256)}, total_env_steps=3000)
    logger.log(1000, {"loss/critic": 0.5})
    logger.log(2000, {"loss/critic": 0.25, EVAL_RETURN: 10.0})  # a key that first appears late
    logger.log(3000, {EVAL_RETURN: 20.0})
    # Rows are on disk before close: a crash now loses nothing.
    rows = _rows(run_dir)
    assert list(rows[0]) == ["env_steps", "wall_time_s", "loss/critic", EVAL_RETURN]
    assert [(r["env_steps"], r["loss/critic"], r[EVAL_RETURN]) for r in rows] == [
        ("1000", "0.5", ""),
        ("2000", "0.25", "10.0"),
        ("3000", "", "20.0"),
    ]
    assert all(float(r["wall_time_s"]) >= 0 for r in rows)
    logger.close()
    logger.close()  # idempotent: a `finally` may close again

    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars(EVAL_RETURN)] == [(2000, 10.0), (3000, 20.0)]
    assert json.loads((run_dir / "config.json").read_text())["hidden"] == [256, 256]
    png = (run_dir / "learning_curve.png").read_bytes()
    assert png.startswith(PNG_SIGNATURE) and len(png) > 1000


def test_the_training_return_is_left_empty_until_an_episode_has_finished(tmp_path):
    # A 0 there would read as a return the policy earned; the cells stay empty instead.
    shared = SimpleNamespace(stats=RunStats(), counters=RunCounters())
    episodes = EpisodeStats(num_envs=2, device="cpu")
    logger = RunLogger(tmp_path / "run", {}, total_env_steps=4)
    for step, done in enumerate(([False, False], [True, False])):
        episodes.track(torch.tensor([1.0, 2.0]), torch.tensor(done), {})
        episodes.report(shared)
        episode_counts = {"train/episodes": float(shared.counters.episodes)}
        logger.log(2 * (step + 1), {**latest_episode_scalars(shared.stats), **episode_counts})
    logger.close()
    rows = _rows(tmp_path / "run")
    assert [(r["train/episodes"], r["train/return"], r["train/length"]) for r in rows] == [
        ("0.0", "", ""),
        ("1.0", "2.0", "2.0"),
    ]


def test_resume_appends_and_continues_wall_time(tmp_path):
    with RunLogger(tmp_path, {}, total_env_steps=100) as logger:
        logger.log(10, {"loss/critic": 1.0})
    with RunLogger(tmp_path, {}, total_env_steps=100, start_env_steps=10) as logger:
        logger.log(20, {"loss/actor": 2.0})
    rows = _rows(tmp_path)
    assert [r["env_steps"] for r in rows] == ["10", "20"]
    assert float(rows[1]["wall_time_s"]) >= float(rows[0]["wall_time_s"])
    assert rows[0]["loss/actor"] == "" and rows[1]["loss/actor"] == "2.0"


def test_a_resume_drops_the_rows_logged_after_its_checkpoint(tmp_path, capsys):
    """A launch that went on past its last checkpoint (at 20) and then stopped: its rows after 20
    go, so the resumed run's rows follow on with no env step logged twice."""
    with RunLogger(tmp_path, {}, total_env_steps=100) as logger:
        for steps in (10, 20, 30, 40):
            logger.log(steps, {"loss/critic": float(steps)})
    with RunLogger(tmp_path, {}, total_env_steps=100, start_env_steps=20) as logger:
        logger.log(30, {"loss/critic": -30.0})
    rows = _rows(tmp_path)
    assert [(r["env_steps"], r["loss/critic"]) for r in rows] == [("10", "10.0"), ("20", "20.0"), ("30", "-30.0")]
    assert "dropped 2 rows logged after env step 20" in capsys.readouterr().out


def test_bad_scalars_are_named(tmp_path):
    with RunLogger(tmp_path, {}, total_env_steps=100) as logger:
        with pytest.raises(TypeError, match="'loss/critic'"):
            logger.log(1, {"loss/critic": "high"})
        with pytest.raises(ValueError, match="reserved"):
            logger.log(1, {"env_steps": 1})


def test_progress_is_throttled_and_remembers_the_last_eval(tmp_path, capsys):
    with RunLogger(tmp_path, {}, total_env_steps=1000, progress_every_s=3600) as logger:
        logger.log(100, {EVAL_RETURN: 42.0})
        logger.progress(100, {"loss/critic": 0.5})
        logger.progress(200, {"loss/critic": 0.4})  # within the interval: not printed
    lines = [line for line in capsys.readouterr().out.splitlines() if "steps/s" in line]
    assert len(lines) == 1
    assert "100/1.00k steps 10.0%" in lines[0] and "return 42.0" in lines[0] and "loss critic 0.5" in lines[0]


def test_progress_line():
    line = format_progress(
        1_200_000,
        2_000_000,
        40_000.0,
        30.0,
        {
            "updates_per_s/v_learner": 5200.0,
            "updates_per_s/p_learner": 2600.0,
            "ratio/beta_av": 8.0,
            "ratio/beta_pv": 2.004,
            EVAL_RETURN: 3512.44,
            "loss/critic": 0.41234,
            "loss/actor": -61.3,
            "other/ignored": 1.0,
        },
    )
    assert line == (
        "1.20M/2.00M steps 60.0% | 40.0k steps/s | upd/s v_learner 5.20k p_learner 2.60k | "
        "ratio beta_av 8.00 beta_pv 2.00 | return 3512.4 | loss critic 0.412 actor -61.3 | "
        "0:00:30 elapsed, 0:00:20 left"
    )


def test_time_left_is_the_sooner_of_step_budget_and_wall_time_limit():
    by_steps = format_progress(100, 1_000_000_000, 400.0, 60.0, {}, max_time_s=360.0)
    assert by_steps.endswith("0:01:00 elapsed, 0:05:00 left")  # not the ~700 h the step budget would take
    assert by_steps.startswith("100 steps 16.7% of 0:06:00 |")  # the limit that ends the run, not 0.0% of 1G
    by_time = format_progress(1_200_000, 2_000_000, 40_000.0, 30.0, {}, max_time_s=3600.0)
    assert by_time.endswith("0:00:30 elapsed, 0:00:20 left")
    assert format_progress(0, 100, None, 5.0, {}).endswith("0:00:05 elapsed, ? left")


def test_wandb_settings_are_checked():
    with pytest.raises(ValueError, match="wandb.mode='cloud'"):
        WandbSettings(activate=True, mode="cloud")


def test_wandb_is_imported_only_when_activated(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # makes `import wandb` fail, as if not installed
    with RunLogger(tmp_path / "off", {}, total_env_steps=100, wandb=WandbSettings(activate=False)) as logger:
        logger.log(1, {EVAL_RETURN: 1.0})
    with pytest.raises(RuntimeError, match="wandb is not installed"):
        RunLogger(tmp_path / "on", {}, total_env_steps=100, wandb=WandbSettings(activate=True))


def test_wandb_offline_writes_a_run(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is not installed (pip install wandb)")
    wandb_dir = tmp_path / "wandb_dir"
    wandb_dir.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(wandb_dir))
    monkeypatch.setenv("WANDB_SILENT", "true")
    settings = WandbSettings(activate=True, project="pql-test", mode="offline", group="g", name="n")
    with RunLogger(tmp_path / "run", {"task": "Ant"}, total_env_steps=100, wandb=settings) as logger:
        logger.log(50, {EVAL_RETURN: 1.0})
    run_files = glob.glob(str(wandb_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(run_files) == 1
    record = open(run_files[0], "rb").read()
    assert b"eval/return" in record and b"env_steps" in record
