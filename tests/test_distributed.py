"""Data-parallel replicas under torchrun on the CPU (gloo): collectives, identical networks,
ratios, learning, a killed role, and the config and checkpoint checks."""

import contextlib
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import JOB_MARKER, assert_stopped_at_an_agreed_step, job_pids, role_pids, worker_pids

from pql.checkpoint import load_checkpoint, save_checkpoint
from pql.config import ConfigError, resolve
from pql.nets import ObsNormalizer
from pql.runtime.distributed import CAUSE_WAIT_S
from pql.runtime.run import load_resume
from pql.runtime.settings import resume_settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "tests", "replica_probe.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
TASK = ["task=InvertedPendulum", "task.num_envs=8", "runtime.eval_every=1000000000", "task.eval_envs=2"]
SMALL = TASK + [
    "algo.batch_size=64",
    "algo.beta_av=8",
    "algo.net.actor_hidden=[32,32]",
    "algo.net.critic_hidden=[32,32]",
]


def probe(tmp_path, *args, timeout: int = 300) -> list[dict]:
    """Run tests/replica_probe.py under torchrun with two replicas -> each rank's state."""
    cmd = [*TORCHRUN, PROBE, *args[:1], str(tmp_path), *args[1:]]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]


def flat(state, prefix=""):
    """{path: tensor} of every tensor in a nested state."""
    if isinstance(state, torch.Tensor):
        return {prefix: state}
    if isinstance(state, dict):
        return {k: v for key, value in state.items() for k, v in flat(value, f"{prefix}/{key}").items()}
    if isinstance(state, (list, tuple)):
        return {k: v for i, value in enumerate(state) for k, v in flat(value, f"{prefix}/{i}").items()}
    return {}


@pytest.mark.slow
def test_collectives_merge_statistics_and_average_gradients(tmp_path):
    ranks = probe(tmp_path, "collectives", timeout=120)
    # One normaliser fed each step's observations of both replicas together.
    expected = ObsNormalizer(4)
    for b0, b1 in zip(ranks[0]["batches"], ranks[1]["batches"]):
        expected.update(torch.cat([b0, b1]))
    for r in ranks:
        for key, value in expected.state_dict().items():
            torch.testing.assert_close(r["normalizer"][key], value, rtol=1e-5, atol=1e-5)
    # Both start from rank 0's weights; each gets the mean of the two ranks' gradients.
    assert all(torch.equal(ranks[1]["start"][k], v) for k, v in ranks[0]["start"].items())
    net = torch.nn.Linear(4, 2)
    net.load_state_dict(ranks[0]["start"])
    grads = []
    for r in ranks:
        net.zero_grad()
        net(r["x"]).pow(2).sum().backward()
        grads.append([p.grad.clone() for p in net.parameters()])
    for i, (g0, g1) in enumerate(zip(*grads)):
        for r in ranks:
            torch.testing.assert_close(r["grads"][i], (g0 + g1) / 2)
    # Every replica learns the largest stop code any asked for (rank 1's SIGTERM over rank 0's FINISH).
    assert [r["agreed_rank1"] for r in ranks] == [143, 143] and [r["agreed_none"] for r in ranks] == [0, 0]
    assert [r["spread"] for r in ranks] == [(0, 10), (0, 10)]  # how the replicas check they start alike


ALGO_RUN = {
    "pql": SMALL + ["algo.warmup_steps=4"],
    "ppo": TASK + ["algo=ppo", "algo.horizon=16", "algo.minibatches=2"],
    "impala": TASK + ["algo=impala", "algo.unroll=16"],
}


# PQL in process mode only: its replicas in sequential mode are the resumed pair's below and
# the last launch of tests/test_chaos.py's torchrun test, which solves the task.
@pytest.mark.slow
@pytest.mark.parametrize("algo,mode", [("pql", "process"), ("ppo", "sequential"), ("impala", "process")])
def test_replicas_hold_identical_networks(tmp_path, algo, mode):
    """After the run every network, target, optimiser state and normaliser is the same on both
    ranks. (That each rank's gradient is the mean of both ranks' is the collectives test's.)"""
    steps = 800 if algo == "pql" else 2400  # PQL's: 50 actor steps and 368 critic updates per replica
    overrides = ALGO_RUN[algo] + [f"runtime.max_env_steps={steps}", f"runtime.mode={mode}"]
    rank0, rank1 = probe(tmp_path, "train", *overrides)
    same = {k for k in rank0["counters"] if k != "episodes"}  # each replica's envs end their own episodes
    assert {k: rank0["counters"][k] for k in same} == {k: rank1["counters"][k] for k in same}

    # Each replica's own: its streams, and its envs where they stand. In process mode a role's
    # copy of another's network is whichever version it pulled last, which timing decides within
    # the ratio window on each replica: not a replica invariant (the networks' owners' are).
    def own(k: str) -> bool:
        timed = mode == "process" and (k.startswith("/actor/policy/") or "/copies/" in k)
        return (
            "generator" in k
            or k.startswith(("/actor/envs/", "/actor/rng/", "/v_learner/rng/", "/p_learner/rng/"))
            or timed
        )

    learnt = {k: v for k, v in flat(rank0["roles"]).items() if not own(k)}
    other = flat(rank1["roles"])
    assert learnt and all(torch.equal(v, other[k]) for k, v in learnt.items()), [
        k for k, v in learnt.items() if not torch.equal(v, other[k])
    ]
    assert all(torch.equal(v, flat(rank1["normalizer"])[k]) for k, v in flat(rank0["normalizer"]).items())
    if algo == "pql":
        # The budget counts both replicas' env steps; each ends exactly at the ratios.
        for r in (rank0, rank1):
            c = r["counters"]
            assert c["env_steps"] == steps // 2
            a = c["actor_steps"] - 4
            assert c["critic_updates"] == 8 * a and c["policy_updates"] == c["critic_updates"] // 2


@contextlib.contextmanager
def job(run_dir, *overrides: str):
    """train.py on SMALL in process mode under torchrun, two replicas writing to run_dir, once both
    train; its processes are marked (JOB_MARKER), and killed however the test ends."""
    cmd = TORCHRUN + [
        "train.py",
        *SMALL,
        "runtime.mode=process",
        "runtime.max_env_steps=100000000",
        "runtime.log_every_s=2",
        *overrides,
        f"hydra.run.dir={run_dir}",
    ]
    env = {**os.environ, JOB_MARKER: str(run_dir)}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        for line in proc.stdout:  # rank 0's progress lines: both replicas train
            if re.match(r"[1-9]\S*(/\S+)? steps", line):
                break
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for pid in job_pids(run_dir):  # the replicas run in sessions of their own
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_killed_role_of_rank_1_stops_the_whole_job(tmp_path):
    with job(tmp_path) as proc:
        # Rank 1's actor may step while its V-learner is still starting (spawn, imports): wait for its name.
        deadline = time.monotonic() + 30
        while len(victims := role_pids("v_learner", 1, tmp_path)) != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(victims) == 1, f"exit code {proc.poll()}"
        os.kill(victims[0], signal.SIGKILL)
        killed = time.monotonic()
        out, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - killed
    print(f"the job stopped {elapsed:.1f} s after the kill, exit code {proc.returncode}")
    # Under CAUSE_WAIT_S: a replica that waited for the other's cause, and the other for its, would take longer.
    assert elapsed < CAUSE_WAIT_S and proc.returncode != 0, err[-3000:]
    failed = [line for line in err.splitlines() if line.startswith("pql: run failed")]
    print("\n".join(failed))
    # Rank 0 lost rank 1 in a collective; whichever replica reports, it reports rank 1's cause.
    assert failed and set(failed) == {"pql: run failed: rank 1: role v_learner died (killed by SIGKILL)"}, err[-3000:]
    time.sleep(1)
    assert job_pids(tmp_path) == []


@pytest.mark.slow
def test_sigterm_to_one_replica_stops_every_replica_at_an_agreed_step(tmp_path):
    """SIGTERM to rank 1's main process alone: the actors of both replicas agree on it and finish
    at the same step, the learners catch up to the same counts (a replica that made one collective
    more than the other would fail, exit code 1), rank 0 writes the one checkpoint, and both
    replicas exit 143, rank 0 too, which received no signal."""
    with job(tmp_path, "runtime.checkpoint_every=1000000000", "algo.warmup_steps=4") as proc:
        os.kill(worker_pids(proc.pid)[1], signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, err[-3000:]
    assert "pql: rank 0: terminated (SIGTERM)" in err and "pql: rank 1: terminated (SIGTERM)" in err, err[-3000:]
    assert "pql: run failed" not in err, err[-3000:]
    stopping = "pql: stopping (SIGTERM): the replicas finish at an agreed step, then rank 0 writes"
    assert stopping in out and out.count("pql: wrote") == 1, out
    saved = load_checkpoint(tmp_path / "checkpoint.pt")
    assert saved["replicas"] == 2
    assert_stopped_at_an_agreed_step(saved, num_envs=8)
    time.sleep(1)
    assert job_pids(tmp_path) == []


def test_role_devices_and_explicit_gpus_are_refused_under_torchrun(make_config):
    with pytest.raises(ConfigError, match=r"runtime.actor_device='cpu' is not allowed; expected null under torchrun"):
        resolve(make_config(["runtime.actor_device=cpu"]), local_rank=0)
    with pytest.raises(
        ConfigError, match=r"runtime.device='cuda:1' is not allowed; expected auto, cuda or cpu under torchrun"
    ):
        resolve(make_config(["runtime.device=cuda:1"]), local_rank=1)
    assert str(resolve(make_config(["runtime.device=cpu"]), local_rank=1).devices.main) == "cpu"


def test_a_checkpoint_resumes_on_as_many_replicas(make_config, tmp_path):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"algo": "pql", "task": "InvertedPendulum", "replicas": 2})
    cfg = make_config(["task=InvertedPendulum", f"checkpoint={path}"])
    assert load_resume(resume_settings(cfg), 2)["replicas"] == 2
    with pytest.raises(ConfigError, match="written by 2; resume it with as many"):
        load_resume(resume_settings(cfg), 1)


@pytest.mark.slow
def test_a_resumed_pair_of_replicas_ends_at_the_ratios_final_counts(tmp_path):
    """A resume hands every replica rank 0's state, and rank 0 alone its envs where they stood.
    Both replicas must still stage as many batches by the agreed end: their V-learners pair
    every update in a gradient all-reduce, so a replica ahead by a restored n-step window would
    wait at the end for updates the other never makes (the stall limit here: 60 s)."""
    run = TORCHRUN + [
        "train.py",
        *SMALL,
        "runtime.mode=sequential",
        "runtime.stall_timeout_s=60",
        "checkpoint=auto",
        f"hydra.run.dir={tmp_path}",
    ]
    first = subprocess.run([*run, "runtime.max_env_steps=600"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-4000:]
    saved = load_checkpoint(tmp_path / "checkpoint.pt")
    assert saved["roles"]["actor"]["envs"]["window"], "the n-step window held steps when the first launch ended"
    again = subprocess.run([*run, "runtime.max_env_steps=1200"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-4000:]
    resumed = load_checkpoint(tmp_path / "checkpoint.pt")
    c = resumed["counters"]
    assert resumed["launch"] == saved["launch"]  # one launch: the resume kept the replay
    a = c["actor_steps"] - saved["launch"]["warmup_steps"]
    assert c["env_steps"] == 1200 // 2 and c["critic_updates"] == 8 * a and c["policy_updates"] == 8 * a // 2, c
