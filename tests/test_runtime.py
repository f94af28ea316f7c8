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
from pql.config import ConfigError
from pql.envs import build_env
from pql.evaluate import evaluate
from pql.nets import ObsNormalizer
from pql.runtime import train
from pql.runtime.run import EVAL_SEED_OFFSET
from pql.runtime.off_policy.roles import build_role, make_ratios, make_rules, make_shared

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["task=InvertedPendulum", "task.num_envs=8", "algo.batch_size=64", "algo.net.actor_hidden=[32,32]",
         "algo.net.critic_hidden=[32,32]", "runtime.eval_every=1000000000", "runtime.log_every_s=5",
         "task.eval_envs=2", "algo.warmup_steps=4"]


def measured_ratios(counters: dict, warmup_steps: int = 4) -> tuple[float, float]:
    """(β_a:v, β_p:v) of a run that started from scratch (SMALL's warm-up is not counted)."""
    critic = counters["critic_updates"]
    return critic / (counters["actor_steps"] - warmup_steps), critic / counters["policy_updates"]


@pytest.mark.slow
def test_process_mode_holds_the_configured_ratios(make_config):
    cfg = make_config(SMALL + ["runtime.mode=process", "runtime.max_env_steps=6000", "algo.beta_av=4", "algo.beta_pv=3",
                               "runtime.actor_device=cpu", "runtime.v_learner_device=cpu", "runtime.p_learner_device=cpu"])
    train(cfg)
    beta_av, beta_pv = measured_ratios(load_checkpoint(os.path.join(cfg.run_dir, "checkpoint.pt"))["counters"])
    assert abs(beta_av - 4) / 4 < 0.05, beta_av
    assert abs(beta_pv - 3) / 3 < 0.05, beta_pv


def test_placement_on_a_machine_without_those_gpus_is_one_line(tmp_path):
    cmd = [sys.executable, "train.py", *SMALL, "runtime.actor_device=cuda:0", "runtime.v_learner_device=cuda:1",
           "runtime.p_learner_device=cuda:1", f"hydra.run.dir={tmp_path}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("pql: config error: runtime.actor_device='cuda:0' is not allowed; expected cpu or "
                                   "auto: no CUDA device is available")


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
    for k, v in finals[0]["policy"].items():
        assert torch.equal(v, finals[1]["policy"][k]), k
    assert finals[0]["counters"] == finals[1]["counters"]
    beta_av, beta_pv = measured_ratios(finals[0]["counters"])
    assert beta_av == pytest.approx(8, rel=0.05) and beta_pv == pytest.approx(2, rel=0.05)


def tensors(state, prefix=""):
    """{path: tensor} of every tensor in a nested state (a checkpoint or a part of one)."""
    if isinstance(state, torch.Tensor):
        return {prefix: state}
    items = state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, (list, tuple)) else ()
    return {path: t for k, v in items for path, t in tensors(v, f"{prefix}/{k}").items()}


@pytest.mark.parametrize("mode", ["sequential", "process"])
def test_resume_continues_counters_and_training(make_config, tmp_path, mode):
    first = make_config(SMALL + [f"runtime.mode={mode}", "runtime.max_env_steps=600"], run_dir=tmp_path / "first")
    train(first)
    saved = load_checkpoint(tmp_path / "first" / "checkpoint.pt")
    assert saved["counters"]["env_steps"] >= 600
    second = make_config(SMALL + [f"runtime.mode={mode}", "runtime.max_env_steps=1200",
                                  f"checkpoint={tmp_path / 'first' / 'checkpoint.pt'}"], run_dir=tmp_path / "second")
    train(second)
    resumed = load_checkpoint(tmp_path / "second" / "checkpoint.pt")
    for name in ("env_steps", "actor_steps", "critic_updates", "policy_updates", "episodes"):
        assert resumed["counters"][name] > saved["counters"][name], name
    assert resumed["counters"]["env_steps"] >= 1200
    changed = any(not torch.equal(v, resumed["policy"][k]) for k, v in saved["policy"].items())
    assert changed, "the resumed run did not train the policy"
    assert not [f for f in os.listdir(tmp_path / "second") if f.endswith(".tmp")]


RESUMABLE = [("pql", "sequential"), ("pql", "process"), ("sac", "sequential"), ("ppo", "sequential"),
             ("impala", "sequential"), ("impala", "process")]


@pytest.mark.parametrize("algo,mode", RESUMABLE)
def test_resume_restores_every_saved_tensor_and_counter(make_config, tmp_path, algo, mode):
    """A resume with no env steps left to make writes back exactly what it loaded: weights, target
    networks, optimiser states, normaliser, generators and counters. (A resume that loaded nothing,
    or only part, writes freshly initialised tensors instead.)"""
    small = SMALL if algo not in ("ppo", "impala") else [o for o in SMALL if "batch_size" not in o and "warmup" not in o]
    first = make_config(small + [f"algo={algo}", f"runtime.mode={mode}", "runtime.max_env_steps=600"],
                        run_dir=tmp_path / "first")
    train(first)
    saved = load_checkpoint(tmp_path / "first" / "checkpoint.pt")
    again = make_config(small + [f"algo={algo}", f"runtime.mode={mode}",
                                 f"runtime.max_env_steps={saved['counters']['env_steps']}",
                                 f"checkpoint={tmp_path / 'first' / 'checkpoint.pt'}"], run_dir=tmp_path / "again")
    train(again)
    rewritten = load_checkpoint(tmp_path / "again" / "checkpoint.pt")
    assert rewritten["counters"] == saved["counters"]
    before, after = tensors({k: saved[k] for k in ("policy", "normalizer", "roles")}), \
        tensors({k: rewritten[k] for k in ("policy", "normalizer", "roles")})
    assert before.keys() == after.keys() and len(before) > 10
    assert [k for k in before if not torch.equal(before[k], after[k])] == []


@pytest.mark.parametrize("key,value", [("algo", "sac"), ("task", "Hopper")])
def test_resume_with_another_algo_or_task_is_a_config_error(make_config, tmp_path, key, value):
    train(make_config(SMALL + ["runtime.mode=sequential", "runtime.max_env_steps=100"], run_dir=tmp_path / "run"))
    ckpt = tmp_path / "run" / "checkpoint.pt"
    with pytest.raises(ConfigError, match=f"{key}='{value}' is not allowed; expected .*written by algo=pql task=InvertedPendulum"):
        train(make_config(SMALL + [f"{key}={value}", f"checkpoint={ckpt}"], run_dir=tmp_path / "resumed"))
    cmd = [sys.executable, "train.py", *SMALL, f"{key}={value}", f"checkpoint={ckpt}", f"hydra.run.dir={tmp_path / 'cli'}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_warmup_can_be_zero(make_config, tmp_path):
    """algo.warmup_steps=0: the actor acts with its policy from the first step, and the ratios
    count every actor step."""
    cfg = make_config(SMALL + ["runtime.mode=sequential", "runtime.max_env_steps=400", "algo.warmup_steps=0"])
    assert cfg.algo.warmup_steps == 0
    train(cfg)
    counters = load_checkpoint(tmp_path / "checkpoint.pt")["counters"]
    beta_av, _ = measured_ratios(counters, warmup_steps=0)
    assert beta_av == pytest.approx(8, rel=0.1)


def test_actor_priorities_reach_the_replay(make_config):
    """replay.actor_priorities: new items enter at the priorities the actor computed, so the
    tree's leaves differ from one another (at the max priority they would start out equal)."""
    cfg = make_config(SMALL + ["runtime.mode=sequential", "replay.kind=prioritized", "replay.actor_priorities=true",
                               "replay.capacity=4096", "algo.nstep=1"])
    from pql.config import apply_device_defaults

    device = apply_device_defaults(cfg)
    algo = make_rules(cfg, 4, 1)
    shared = make_shared(cfg, algo, 4, 1)
    roles = {name: build_role(name, cfg, shared, algo, device, make_ratios(cfg, shared), 4, 1, fresh_start=True)
             for name in ("actor", "v_learner")}
    for _ in range(shared.ring_slots):
        roles["actor"].step()
    roles["v_learner"].ingest()
    leaves = roles["v_learner"].replay.sampler.tree.leaves
    filled = leaves[leaves > 0]
    assert filled.numel() == shared.ring_slots * cfg.task.num_envs
    assert filled.unique().numel() > filled.numel() // 2


def test_test_mode_evaluates_a_checkpoint(make_config, tmp_path, capsys):
    """test=true evaluates the checkpoint's policy with its observation statistics: the same
    numbers as evaluating them by hand on envs seeded as the run's evaluation envs."""
    cfg = make_config(SMALL + ["runtime.mode=sequential", "runtime.max_env_steps=300"], run_dir=tmp_path / "run")
    train(cfg)
    ckpt = tmp_path / "run" / "checkpoint.pt"
    result = train(make_config(SMALL + ["test=true", f"checkpoint={ckpt}"], run_dir=tmp_path / "eval"))
    assert "mean return" in capsys.readouterr().out
    state = load_checkpoint(ckpt)
    policy = make_rules(cfg, 4, 1).make_policy()
    policy.load_state_dict(state["policy"])
    normalizer = ObsNormalizer(4)
    normalizer.load_state_dict(state["normalizer"])
    env = build_env(cfg.task, cfg.task.eval_envs, "cpu", cfg.runtime.seed + EVAL_SEED_OFFSET)
    assert (result["eval/return"], result["eval/length"]) == evaluate(env, policy, normalizer)


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
    assert saved["counters"]["env_steps"] > 0
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
