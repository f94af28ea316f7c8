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
from conftest import (
    DEAD_PEER_S,
    JOB_MARKER,
    NO_EXPORT,
    alive,
    assert_stopped_at_an_agreed_step,
    job_pids,
    role_pids,
    worker_pids,
)

from pql.bulk import descriptions, locate
from pql.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from pql.config import ROLE_NAMES, ConfigError, resolve
from pql.nets import ObsNormalizer, ReturnScale
from pql.runtime.control import RatioController, RatioCounters
from pql.runtime.distributed import CAUSE_WAIT_S
from pql.runtime.off_policy.roles import CutPart
from pql.runtime.run import load_resume
from pql.runtime.settings import resume_settings
from pql.runtime.shards import replica_state, write_shard

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "tests", "replica_probe.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
TASK = ["task=InvertedPendulum", "task.num_envs=8", "runtime.eval_every=1000000000", "task.eval_envs=2", NO_EXPORT]
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
    # So is the return's scale: counts, moments and both extremes, one rank's each.
    expected = ReturnScale(-5.0, 5.0)
    for g0, g1 in zip(ranks[0]["returns"], ranks[1]["returns"]):
        expected.update(torch.cat([g0, g1]))
    assert (float(expected.max_return), float(expected.min_return)) == (40.0, -30.0)
    for r in ranks:
        for key, value in expected.state_dict().items():
            torch.testing.assert_close(r["return_scale"][key], value, rtol=1e-5, atol=1e-5)
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
    # PQL's: 50 actor steps and 368 critic updates per replica; PPO's and IMPALA's: 4 rollouts of
    # 16 steps of 8 envs per replica.
    steps = 800 if algo == "pql" else 1200
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
@pytest.mark.serial
def test_killed_role_of_rank_1_stops_the_whole_job(tmp_path):
    with job(tmp_path) as proc:
        # Rank 1's actor may step while its V-learner is still starting (spawn, imports): wait for its name.
        deadline = time.monotonic() + 30
        while len(victims := role_pids("v_learner", 1, tmp_path)) != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(victims) == 1, f"exit code {proc.poll()}"
        replicas = [p for p in job_pids(tmp_path) if p != proc.pid]
        os.kill(victims[0], signal.SIGKILL)
        killed = time.monotonic()
        while [p for p in replicas if alive(p)] and time.monotonic() - killed < 30:
            time.sleep(0.02)
        ended = time.monotonic() - killed
        out, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - killed
    print(f"the replicas ended {ended:.2f} s after the kill, torchrun {elapsed:.2f} s (exit code {proc.returncode})")
    assert ended <= DEAD_PEER_S, f"the replicas ended {ended:.2f} s after the kill"
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
    stopping = "pql: stopping (SIGTERM): the replicas finish at an agreed step, then each writes its part of"
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


def test_a_checkpoint_resumes_on_as_many_replicas_each_from_its_own_shard(make_config, tmp_path):
    """A two-replica checkpoint is rank 0's file naming rank 1's shard: each rank resumes its own
    state, and a set with a shard missing, damaged or not named is refused in one line."""
    path = tmp_path / "checkpoint.pt"
    header = {"algo": "pql", "task": "InvertedPendulum", "config": {"seed": 3}, "replicas": 2}
    shard = write_shard(str(tmp_path), 1, {"counters": {"env_steps": 8}, "rng": torch.arange(3)})
    save_checkpoint(path, {**header, "counters": {"env_steps": 8}, "rng": torch.arange(4), "shards": [shard]})
    cfg = make_config(["task=InvertedPendulum", f"checkpoint={path}"])
    rank0, rank1 = (load_resume(resume_settings(cfg), 2, rank) for rank in (0, 1))
    assert rank0["rng"].tolist() == [0, 1, 2, 3] and rank1["rng"].tolist() == [0, 1, 2]
    assert {k: rank1[k] for k in header} == header and "shards" not in rank1
    with pytest.raises(ConfigError, match="written by 2; resume it with as many"):
        load_resume(resume_settings(cfg), 1)

    shard_path = tmp_path / shard["file"]
    data = shard_path.read_bytes()
    shard_path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(CheckpointError, match=r"rank 1's shard .* is damaged|is damaged"):
        load_resume(resume_settings(cfg), 2, 0)  # every rank refuses a set with any shard not whole
    shard_path.unlink()
    with pytest.raises(CheckpointError, match="is missing .rank 1's shard of the checkpoint"):
        load_resume(resume_settings(cfg), 2, 0)
    save_checkpoint(path, {**header, "counters": {"env_steps": 8}})  # no shards: rank 0's state alone
    with pytest.raises(CheckpointError, match="holds rank 0's state alone"):
        load_resume(resume_settings(cfg), 2, 1)


def plain(state):
    """A nested state with each tensor as None: what is not a tensor, to compare with ==."""
    if isinstance(state, torch.Tensor):
        return None
    if isinstance(state, dict):
        return {k: plain(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return [plain(v) for v in state]
    return state


def replica_states(run_dir) -> list[dict]:
    """Each rank's state in the checkpoint set of run_dir, with its replays' bytes ("bulk")."""
    path = str(run_dir / "checkpoint.pt")
    header = load_checkpoint(path)
    states = []
    for rank in range(header["replicas"]):
        state = dict(replica_state(header, path, rank))
        state.pop("shards", None)
        state.pop("config")  # its run_dir differs
        locate(state, path)
        for description in descriptions(state):
            with open(description.pop("file"), "rb") as f:
                description["bytes_read"] = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        states.append(state)
    return states


@pytest.mark.slow
def test_a_pair_of_replicas_stopped_and_resumed_ends_as_the_pair_never_stopped(tmp_path):
    """Two replicas in sequential mode, one launch stopped by SIGTERM to rank 1 (both stop at an
    agreed step and each writes its own part of the set) and resumed with checkpoint=auto, end
    with every network, optimiser, replay byte, generator, env and counter of both ranks as a
    launch never stopped does. The periodic checkpoints on the way are sets too."""
    run = TORCHRUN + [
        "train.py",
        *SMALL,
        "runtime.mode=sequential",
        "runtime.stall_timeout_s=60",
        "runtime.log_every_s=0.5",
        "runtime.checkpoint_every=400",
        "runtime.max_env_steps=1200",
        "checkpoint=auto",
    ]
    whole = subprocess.run([*run, f"hydra.run.dir={tmp_path / 'whole'}"], cwd=ROOT, capture_output=True, text=True)
    assert whole.returncode == 0, whole.stderr[-4000:]

    cut = tmp_path / "cut"
    env = {**os.environ, JOB_MARKER: str(cut)}
    proc = subprocess.Popen(
        [*run, f"hydra.run.dir={cut}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    for line in proc.stdout:  # rank 0's first progress line: both replicas train
        if re.match(r"[1-9]\S*(/\S+)? steps", line):
            break
    os.kill(worker_pids(proc.pid)[1], signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert "pql: rank 0: terminated (SIGTERM)" in err and "pql: rank 1: terminated (SIGTERM)" in err, err[-3000:]
    stopped = replica_states(cut)
    steps = [{k: v for k, v in part["counters"].items() if k != "episodes"} for part in stopped]
    assert steps[0] == steps[1], "both ranks' parts are of one agreed step"  # their envs end their own episodes
    assert 0 < stopped[0]["counters"]["env_steps"] < 600, stopped[0]["counters"]
    assert stopped[1]["roles"]["actor"]["envs"]["window"], "rank 1's n-step window held steps at the stop"
    again = subprocess.run([*run, f"hydra.run.dir={cut}"], cwd=ROOT, capture_output=True, text=True)
    assert again.returncode == 0 and "resuming from" in again.stdout, again.stderr[-4000:]

    for rank, (never, resumed) in enumerate(zip(replica_states(tmp_path / "whole"), replica_states(cut))):
        never_flat, resumed_flat = flat(never), flat(resumed)
        assert never_flat.keys() == resumed_flat.keys()
        differ = [k for k, v in never_flat.items() if not torch.equal(v, resumed_flat[k])]
        assert not differ, f"rank {rank}: {differ}"
        assert plain(never) == plain(resumed), f"rank {rank}"  # counters, positions, Python's RNG, ...
    assert sorted(p.name for p in cut.glob("*.bulk")) != [] and len(list(cut.glob("checkpoint.rank1-*.pt"))) == 1


def test_a_cut_stands_at_the_ratios_counts_for_its_actor_step():
    """A process-mode checkpoint of several replicas is a cut at an agreed actor step: the actor
    hands in there, each learner when its count reaches the ratios' for that step (β_a:v 1:8 after
    a warm-up of 4 steps, β_p:v 1:2), and each marks the cut seen at once (the actor steps on only
    once both have)."""
    counters = RatioCounters()
    ratios = RatioController(counters, beta_av=8, beta_pv=2, max_lag=4)
    counters.load({"launch_actor_steps": 10, "launch_critic_updates": 40, "launch_policy_updates": 20})
    counters.warmup_steps = 4
    counters.cut_actor_steps, counters.cuts_made = 10 + 4 + 5, 1  # cut 1 at the launch's 5th counted step
    assert ratios.counts_at_cut() == (40 + 8 * 5, 20 + 8 * 5 // 2)
    wakes = []
    actor, v, p = (CutPart(name, counters, ratios, lambda: wakes.append(1)) for name in ROLE_NAMES)
    assert actor.due() and actor.tag() == "cut 1"
    counters.critic_updates, counters.policy_updates = 40 + 39, 20 + 19
    assert not v.due() and not p.due() and (counters.cuts_seen_v, counters.cuts_seen_p) == (1, 1) and wakes
    counters.critic_updates, counters.policy_updates = 40 + 40, 20 + 20
    assert v.due() and p.due()
    v.served = p.served = actor.served = 1
    assert not (actor.due() or v.due() or p.due())
    counters.cut_actor_steps = 12  # a cut in the warm-up: no update yet
    counters.cuts_made = 2
    assert ratios.counts_at_cut() == (40, 20)
