"""The three-role runtime: exact ratios, determinism, supervision, checkpoints and resume."""
import contextlib
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from pql.checkpoint import load_checkpoint
from pql.runtime.control import C
from pql.runtime import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["task=InvertedPendulum", "task.num_envs=8", "algo.batch_size=64", "algo.net.actor_hidden=[32,32]",
         "algo.net.critic_hidden=[32,32]", "runtime.eval_every=1000000000", "runtime.log_every_s=5",
         "task.eval_envs=2", "algo.warmup_steps=4"]


def measured_ratios(counters: torch.Tensor) -> tuple[float, float]:
    actor_steps = int(counters[C.ACTOR_STEPS] - counters[C.A0] - counters[C.WARMUP])
    critic = int(counters[C.CRITIC_UPDATES] - counters[C.V0])
    policy = int(counters[C.POLICY_UPDATES] - counters[C.P0])
    return critic / actor_steps, critic / policy


@pytest.mark.slow
def test_process_mode_holds_the_configured_ratios(make_config):
    cfg = make_config(SMALL + ["runtime.mode=process", "runtime.max_env_steps=6000", "algo.beta_av=4", "algo.beta_pv=3"])
    train(cfg)
    beta_av, beta_pv = measured_ratios(load_checkpoint(os.path.join(cfg.run_dir, "checkpoint.pt"))["counters"])
    assert abs(beta_av - 4) / 4 < 0.05, beta_av
    assert abs(beta_pv - 3) / 3 < 0.05, beta_pv


def test_sequential_mode_is_deterministic(make_config, tmp_path):
    """Bit for bit on the CPU with MuJoCo's C engine. Not on CUDA: MuJoCo Warp's contact and
    constraint kernels and torch's atomic-add kernels (index_add, scatter in the replay) sum in
    whatever order the threads run, so runs there agree only statistically."""
    finals = []
    for run in ("a", "b"):
        cfg = make_config(SMALL + ["runtime.mode=sequential", "runtime.max_env_steps=800", "runtime.device=cpu",
                                   "task.backend=mujoco"], run_dir=tmp_path / run)
        train(cfg)
        finals.append(load_checkpoint(tmp_path / run / "checkpoint.pt"))
    for k, v in finals[0]["p_learner"]["policy"].items():
        assert torch.equal(v, finals[1]["p_learner"]["policy"][k]), k
    assert torch.equal(finals[0]["counters"], finals[1]["counters"])
    beta_av, beta_pv = measured_ratios(finals[0]["counters"])
    assert beta_av == pytest.approx(8, rel=0.05) and beta_pv == pytest.approx(2, rel=0.05)


@pytest.mark.parametrize("mode", ["sequential", "process"])
def test_resume_continues_counters_and_training(make_config, tmp_path, mode):
    first = make_config(SMALL + [f"runtime.mode={mode}", "runtime.max_env_steps=600"], run_dir=tmp_path / "first")
    train(first)
    saved = load_checkpoint(tmp_path / "first" / "checkpoint.pt")
    assert int(saved["counters"][C.ENV_STEPS]) >= 600
    second = make_config(SMALL + [f"runtime.mode={mode}", "runtime.max_env_steps=1200",
                                  f"checkpoint={tmp_path / 'first' / 'checkpoint.pt'}"], run_dir=tmp_path / "second")
    train(second)
    resumed = load_checkpoint(tmp_path / "second" / "checkpoint.pt")
    for slot in (C.ENV_STEPS, C.ACTOR_STEPS, C.CRITIC_UPDATES, C.POLICY_UPDATES):
        assert resumed["counters"][slot] > saved["counters"][slot], slot.name
    assert int(resumed["counters"][C.ENV_STEPS]) >= 1200
    changed = any(not torch.equal(v, resumed["p_learner"]["policy"][k]) for k, v in saved["p_learner"]["policy"].items())
    assert changed, "the resumed run did not train the policy"
    assert not [f for f in os.listdir(tmp_path / "second") if f.endswith(".tmp")]


def test_actor_priorities_reach_the_replay(make_config, tmp_path):
    """replay.actor_priorities: new items enter at the priorities the actor computed, so the
    tree's leaves differ from one another (at the max priority they would start out equal)."""
    cfg = make_config(SMALL + ["runtime.mode=sequential", "runtime.max_env_steps=400", "replay.kind=prioritized",
                               "replay.actor_priorities=true", "replay.capacity=4096"])
    train(cfg)
    leaves = load_checkpoint(tmp_path / "checkpoint.pt")["v_learner"]["sampler"]["tree"]["priorities"]
    filled = leaves[leaves > 0]
    assert filled.numel() > 200 and filled.unique().numel() > filled.numel() // 2


def test_test_mode_evaluates_a_checkpoint(make_config, tmp_path, capsys):
    cfg = make_config(SMALL + ["runtime.mode=sequential", "runtime.max_env_steps=300"], run_dir=tmp_path / "run")
    train(cfg)
    ckpt = tmp_path / "run" / "checkpoint.pt"
    result = train(make_config(SMALL + ["test=true", f"checkpoint={ckpt}"], run_dir=tmp_path / "eval"))
    assert result["eval/length"] >= 1 and "mean return" in capsys.readouterr().out


@contextlib.contextmanager
def running(cmd: list[str]):
    """train.py in a process group of its own, killed with every role it started however the
    test ends (a failed assertion must not leave a run behind eating the CPU of later tests)."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("victim", ["actor", "v_learner", "p_learner"])
def test_killed_role_stops_the_run_promptly(tmp_path, victim):
    cmd = [sys.executable, "train.py", *SMALL, "runtime.mode=process", "runtime.max_env_steps=100000000",
           f"hydra.run.dir={tmp_path}"]
    with running(cmd) as proc:
        pids = {}
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            match = re.search(r"roles started: (.*)", line)
            if match:
                pids = {k: int(v) for k, v in (kv.split("=") for kv in match.group(1).split())}
                break
            assert time.monotonic() < deadline
        assert set(pids) == {"actor", "v_learner", "p_learner"}
        time.sleep(3)  # let the roles get going
        os.kill(pids[victim], signal.SIGKILL)
        killed = time.monotonic()
        out, err = proc.communicate(timeout=30)
    assert time.monotonic() - killed < 10
    assert proc.returncode != 0
    assert f"role {victim} died (killed by SIGKILL)" in err, err
    assert "Traceback" not in err
    time.sleep(0.5)
    assert not [n for n, p in pids.items() if alive(p)]


@pytest.mark.parametrize("mode", ["sequential", "process"])
def test_ctrl_c_writes_a_checkpoint_and_stops_every_role(tmp_path, mode):
    cmd = [sys.executable, "train.py", *SMALL, f"runtime.mode={mode}", "runtime.max_env_steps=100000000",
           "runtime.checkpoint_every=1000000000", f"hydra.run.dir={tmp_path}"]
    with running(cmd) as proc:
        pids = {}
        for line in proc.stdout:
            match = re.search(r"roles started: (.*)", line)
            if match:
                pids = {k: int(v) for k, v in (kv.split("=") for kv in match.group(1).split())}
            if re.match(r"[1-9]\S*/\S+ steps", line):  # a progress line with env steps done: it trains
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "pql: interrupted" in err and "Traceback" not in err, err
    saved = load_checkpoint(tmp_path / "checkpoint.pt")
    assert int(saved["counters"][C.ENV_STEPS]) > 0
    assert not [n for n, p in pids.items() if alive(p)]


def test_raising_role_reports_its_traceback(make_config, tmp_path):
    """A role that raises (here: the V-learner resuming a critic of another size) ends the run
    with that role's traceback, exit code 1 and no surviving child."""
    train(make_config(SMALL + ["runtime.mode=sequential", "runtime.max_env_steps=200"], run_dir=tmp_path / "run"))
    cmd = [sys.executable, "train.py", *SMALL, "runtime.mode=process", "runtime.max_env_steps=100000000",
           "algo.net.critic_hidden=[16,16]", f"checkpoint={tmp_path / 'run' / 'checkpoint.pt'}",
           f"hydra.run.dir={tmp_path / 'resumed'}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "role v_learner failed" in proc.stderr and "Traceback" in proc.stderr and "size mismatch" in proc.stderr
