"""bench/posture.py: tells a HalfCheetah upright from one on its back, on real MuJoCo, and reads
real checkpoints written by pql's save_checkpoint."""

import csv
import math
import os
import sys

import pytest
import torch

from pql.checkpoint import save_checkpoint
from pql.config import ALGORITHMS, to_dict
from pql.nets.normalizer import ObsNormalizer
from tasks import make

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import posture  # noqa: E402

OBS_DIM, ACT_DIM = 17, 6


@pytest.fixture(scope="module")
def env():
    return make("HalfCheetah", num_envs=4, device="cpu", seed=7, backend="mujoco")


def test_still_cheetah_is_upright(env):
    out = posture.rollout(env, lambda obs: torch.zeros(obs.shape[0], ACT_DIM), skip_steps=200)
    assert out["pitch"].abs().max() < 0.2
    assert [posture.verdict(float(c)) for c in out["cos_pitch"]] == ["upright"] * 4


def test_flailing_cheetah_lands_on_its_back(env):
    # A fixed random linear feedback that flips the cheetah in every episode (found by trying
    # seeds: most such policies roll it over, as early learners do).
    w = torch.randn(OBS_DIM, ACT_DIM, generator=torch.Generator().manual_seed(1)) * 0.3
    out = posture.rollout(env, lambda obs: torch.tanh(obs @ w), skip_steps=200)
    assert [posture.verdict(float(c)) for c in out["cos_pitch"]] == ["on its back"] * 4
    # Past a quarter turn: MuJoCo 4 leaves all four past 2.5 rad, MuJoCo 3.11 one at 2.06.
    assert out["pitch"].abs().min() > math.pi / 2


def write_checkpoint(path, make_config, task: str) -> None:
    cfg = make_config([f"task={task}"])
    obs_dim, act_dim = (OBS_DIM, ACT_DIM) if task == "HalfCheetah" else (27, 8)
    policy = ALGORITHMS[cfg.algo.name].load_runner().make_policy(cfg.algo, obs_dim, act_dim)
    with torch.no_grad():
        for p in policy.parameters():
            p.zero_()  # a policy that holds still
    save_checkpoint(
        path,
        {
            "algo": cfg.algo.name,
            "task": cfg.task.name,
            "config": to_dict(cfg),
            "counters": {"env_steps": 1234},
            "policy": policy.state_dict(),
            "normalizer": ObsNormalizer(obs_dim).state_dict(),
        },
    )


def test_reads_a_run_directory_and_writes_csv(tmp_path, make_config, capsys):
    run_dir = tmp_path / "run"
    write_checkpoint(run_dir / "checkpoint.pt", make_config, "HalfCheetah")
    out_csv = tmp_path / "posture.csv"
    assert posture.main([str(run_dir), "--episodes", "2", "--csv", str(out_csv)]) == 0
    assert "1,234 env steps" in capsys.readouterr().out
    [row] = list(csv.DictReader(open(out_csv)))
    assert row["verdict"] == "upright" and float(row["cos_pitch"]) > 0.9
    assert row["checkpoint"] == str(run_dir / "checkpoint.pt")


def test_other_tasks_and_missing_checkpoints_are_refused(tmp_path, make_config):
    write_checkpoint(tmp_path / "ant.pt", make_config, "Ant")
    with pytest.raises(SystemExit, match="task=Ant checkpoint"):
        posture.main([str(tmp_path / "ant.pt")])
    with pytest.raises(SystemExit, match="not a checkpoint file or a run directory"):
        posture.main([str(tmp_path / "nothing_here")])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error shown on a machine without CUDA")
def test_cuda_without_a_gpu_is_one_line(capsys):
    with pytest.raises(SystemExit):
        posture.main(["some_run", "--device", "cuda"])
    assert "--device cuda: no CUDA device is available here" in capsys.readouterr().err
