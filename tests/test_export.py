"""pql.export: the exported TorchScript and ONNX policies act as pql's evaluation acts, for every
algorithm and network kind; their metadata; and an ONNX policy driven by a program that imports
neither pql nor torch."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys

import gymnasium
import imageio.v3 as iio
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from conftest import ROOT, compose_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import pql
import tasks
from pql.checkpoint import FILE_NAME, load_checkpoint, save_checkpoint, software
from pql.config import VIDEO_SECONDS, ConfigError, load_config, to_dict
from pql.envs import build_env
from pql.evaluate import evaluate
from pql.export import EXPORT_DIR, ONNX_FILE, TORCHSCRIPT_FILE, checkpoint_policy, export_checkpoint
from pql.logging.keys import EVAL_VIDEO, VIDEOS_DIR
from pql.play import play
from pql.runtime import train
from pql.runtime.settings import load_runner

TASK = "Hopper"  # 11 observations, 3 actions; a random policy falls within a few dozen steps
# Each algorithm's policy class, and each network kind of the off-policy policies, at least once.
CASES = [
    ("pql", "mlp"),
    ("pql", "batchnorm"),
    ("pql_d", "hyperspherical"),
    ("sac", "mlp"),
    ("sac", "hyperspherical"),
    ("sac", "batchnorm"),
    ("ppo", None),
    ("impala", None),
]


def trained_looking_checkpoint(directory, algo: str, kind: str | None, task: str = TASK, kwargs=()) -> str:
    """A checkpoint file of `algo` on `task` whose policy and normaliser hold random weights and
    statistics, as a run's would (batch norms' running statistics included)."""
    overrides = [f"task={task}", f"algo={algo}", *kwargs] + (
        [f"algo.net.kind={kind}", "algo.net.actor_hidden=[64,64]"] if kind else []
    )
    cfg = compose_config(overrides, directory)
    env = build_env(cfg.task, 1, "cpu", 0)
    obs_dim, act_dim = env.policy_obs_dim, env.act_dim
    env.close()
    torch.manual_seed(1)
    policy = load_runner(algo).make_policy(cfg.algo, obs_dim, act_dim)
    weights = {
        name: (value + 0.3 * torch.rand_like(value) if "running" in name else value)
        if value.is_floating_point()
        else value
        for name, value in policy.state_dict().items()
    }
    normalizer = {"mean": torch.randn(obs_dim), "var": torch.rand(obs_dim) + 0.5, "count": torch.tensor(100.0)}
    state = {
        "algo": algo,
        "task": task,
        "config": to_dict(cfg),
        "software": software(),
        "policy": weights,
        "normalizer": normalizer,
    }
    path = os.path.join(directory, FILE_NAME)
    save_checkpoint(path, state)
    return path


def evaluation_steps(path: str) -> tuple[np.ndarray, np.ndarray]:
    """The observations pql's evaluation gave the checkpoint's policy and the actions it sent the
    env, on 4 Hopper envs until each finished an episode."""
    state = load_checkpoint(path)
    cfg = load_config(dict(state["config"]))
    env = tasks.make(cfg.task.name, 4, "cpu", seed=3)
    policy, normalizer = checkpoint_policy(
        load_runner(cfg.algo.name), cfg.algo, state, env.policy_obs_dim, env.act_dim, "cpu"
    )
    seen, sent, latest = [], [], []
    reset, step = env.reset, env.step

    def recording_reset():
        latest[:] = [reset()]
        return latest[0]

    def recording_step(actions):
        seen.append(latest[0].clone())
        sent.append(actions.clone())
        result = step(actions)
        latest[:] = [result[0]]
        return result

    env.reset, env.step = recording_reset, recording_step
    evaluate(env, policy, normalizer)
    env.close()
    return torch.cat(seen).numpy(), torch.cat(sent).numpy()


@pytest.mark.parametrize("algo, kind", CASES)
def test_the_exported_policies_act_as_the_evaluation_does(tmp_path, algo, kind):
    path = trained_looking_checkpoint(tmp_path, algo, kind)
    files = export_checkpoint(str(tmp_path))
    assert files.torchscript == os.path.join(tmp_path, EXPORT_DIR, TORCHSCRIPT_FILE)
    assert files.onnx == os.path.join(tmp_path, EXPORT_DIR, ONNX_FILE)
    obs, actions = evaluation_steps(path)
    assert len(obs) >= 8
    scripted = torch.jit.load(files.torchscript)
    np.testing.assert_allclose(scripted(torch.from_numpy(obs)).detach().numpy(), actions, atol=1e-5)
    session = ort.InferenceSession(files.onnx)
    np.testing.assert_allclose(session.run(None, {"obs": obs})[0], actions, atol=1e-5)
    np.testing.assert_allclose(session.run(None, {"obs": obs[:1]})[0], actions[:1], atol=1e-5)  # any batch size


def test_the_files_say_what_the_policy_reads_and_writes(tmp_path):
    trained_looking_checkpoint(tmp_path, "pql", None, task="Anymal")
    files = export_checkpoint(str(tmp_path))
    meta = {p.key: p.value for p in onnx.load(files.onnx).metadata_props}
    extra = {"metadata.json": ""}
    torch.jit.load(files.torchscript, _extra_files=extra)
    assert json.loads(extra["metadata.json"]) == meta
    values = {
        key: value if key in ("task", "algo", "input", "output", "commit", "pql_version") else json.loads(value)
        for key, value in meta.items()
    }
    assert (values["task"], values["algo"], values["obs_dim"], values["act_dim"]) == ("Anymal", "pql", 48, 12)
    assert values["action_low"] == [-1.0] * 12 and values["action_high"] == [1.0] * 12
    assert [name for name, _ in values["obs_parts"]][:2] == ["base_lin_vel*2", "base_ang_vel*0.25"]
    assert sum(width for _, width in values["obs_parts"]) == 48
    assert values["joint_names"][:3] == ["LF_HAA", "LF_HFE", "LF_KFE"] and len(values["joint_names"]) == 12
    assert values["default_joint_pos"][:3] == pytest.approx([0.03, 0.4, -0.8])
    assert values["action_scale"] == 0.5
    assert values["pql_version"] == pql.__version__ and values["commit"] == software()["commit"]


def test_a_privileged_critics_policy_reads_the_policys_group_alone(tmp_path):
    path = trained_looking_checkpoint(
        tmp_path, "sac", None, task="examples.own_env:make_env", kwargs=["task.kwargs.privileged=true"]
    )
    files = export_checkpoint(path)
    env = tasks.make("examples.own_env:make_env", 1, "cpu", seed=0, kwargs={"privileged": True})
    assert 0 < env.policy_obs_dim < env.obs_dim
    session = ort.InferenceSession(files.onnx)
    assert session.get_inputs()[0].shape[1] == env.policy_obs_dim
    obs = env.reset()[:, : env.policy_obs_dim].numpy()
    assert session.run(None, {"obs": obs})[0].shape == (1, env.act_dim)


def deploy_program() -> str:
    """docs/deploy.md's program that runs an exported policy without pql."""
    with open(os.path.join(ROOT, "docs", "deploy.md"), encoding="utf-8") as f:
        text = f.read()
    return text.split("<!-- deploy-program -->\n```python\n", 1)[1].split("```", 1)[0]


def test_docs_program_runs_an_exported_policy_without_pql_or_torch(tmp_path):
    """The program as docs/deploy.md gives it, in a Python where importing torch or pql fails, on
    Gymnasium's Hopper-v5 (pql's Hopper follows it): the returns the TorchScript policy makes in
    the same episodes."""
    trained_looking_checkpoint(tmp_path, "pql", None)
    files = export_checkpoint(str(tmp_path))
    blocked = "import sys\nsys.modules.update(torch=None, pql=None, tasks=None)\n"
    result = subprocess.run(
        [sys.executable, "-c", blocked + deploy_program(), files.onnx, "Hopper-v5", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    printed = [float(line.rsplit(" ", 1)[1]) for line in result.stdout.splitlines()]
    policy, env = torch.jit.load(files.torchscript), gymnasium.make("Hopper-v5")
    for episode, ret in enumerate(printed):
        obs, _ = env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            action = policy(torch.as_tensor(obs, dtype=torch.float32)[None])[0].detach().numpy()
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + reward, terminated or truncated
        assert ret == pytest.approx(total, abs=0.1)
    assert len(printed) == 2


def test_play_prints_each_episode_and_writes_its_video(tmp_path, capsys):
    trained_looking_checkpoint(tmp_path, "pql", None)
    video = tmp_path / "hopper.mp4"
    results = play(str(tmp_path), episodes=2, video=str(video))
    out = capsys.readouterr().out
    assert len(results) == 2 and all(length > 0 for _, length in results)
    for i, (ret, length) in enumerate(results, 1):
        assert f"pql.play: episode {i}: return {ret:.2f}, length {length}" in out
    frames = iio.imread(video)
    assert frames.shape == (1 + sum(length for _, length in results), 240, 320, 3)
    assert frames.std() > 10  # a scene, not a blank image
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_play_and_export_refuse_in_one_line(tmp_path):
    run = lambda *args: subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    missing = run("pql.export", str(tmp_path))
    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0
    assert "no checkpoint there" in missing.stderr
    trained_looking_checkpoint(tmp_path, "pql", None, task="examples.own_env:make_env")
    unrendered = run("pql.play", str(tmp_path), "--video", str(tmp_path / "v.mp4"))
    assert unrendered.returncode == 2, unrendered.stderr[-2000:]
    assert (
        unrendered.stderr.strip().splitlines()[-1]
        == "pql.play: PointMass cannot render: it offers no images of its scene"
    )
    assert not (tmp_path / "v.mp4").exists()


def test_a_finished_run_exports_its_policy_and_records_its_videos(tmp_path):
    """runtime.export and runtime.video_every on a short run: the exported files beside the
    checkpoint, and a video at every second evaluation, as an MP4 in videos/ and a GIF in
    TensorBoard's eval/video."""
    run_dir = tmp_path / "run"
    overrides = [
        "task=InvertedPendulum",
        "task.num_envs=8",
        "task.eval_envs=2",
        "algo.batch_size=64",
        "algo.net.actor_hidden=[32]",
        "algo.net.critic_hidden=[32]",
        "algo.warmup_steps=4",
        "runtime.mode=sequential",
        "runtime.max_env_steps=400",
        "runtime.eval_every=100",
        "runtime.eval_max_share=1",
        "runtime.video_every=2",
        "runtime.export=true",  # the tests' runs leave it out (conftest.NO_EXPORT)
    ]
    train(compose_config(overrides, run_dir))
    exported = run_dir / EXPORT_DIR
    assert sorted(os.listdir(exported)) == [ONNX_FILE, TORCHSCRIPT_FILE]
    evaluated = [int(float(row["eval/env_steps"])) for row in read_rows(run_dir / "metrics.csv") if row["eval/return"]]
    assert len(evaluated) >= 4
    videos = sorted(os.listdir(run_dir / VIDEOS_DIR))
    assert videos == sorted(f"eval_{steps}.mp4" for steps in evaluated[1::2])
    longest = math.ceil(VIDEO_SECONDS / tasks.make("InvertedPendulum", 1, "cpu").dt) + 1
    assert all(1 < len(iio.imread(run_dir / VIDEOS_DIR / name)) <= longest for name in videos)
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0})
    events.Reload()
    gifs = events.Images(EVAL_VIDEO)
    assert len(gifs) == len(videos) and all(g.encoded_image_string[:4] == b"GIF8" for g in gifs)


def read_rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_videos_of_an_env_that_cannot_render_are_refused_before_the_run_starts(tmp_path):
    overrides = [
        "task=examples.own_env:make_env",
        "task.num_envs=4",
        "runtime.mode=sequential",
        "runtime.video_every=1",
    ]
    with pytest.raises(ConfigError) as refused:
        train(compose_config(overrides, tmp_path / "run"))
    assert str(refused.value) == (
        "config error: runtime.video_every=1 is not allowed; expected 0 here: PointMass cannot render: "
        "it offers no images of its scene"
    )
