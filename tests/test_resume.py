"""Exact resumes: the replay's bulk file, the replay's and its samplers' state, and runs stopped at
random updates and resumed, byte-identical to runs never stopped (sequential mode, CPU)."""

import io
import os
import random
import signal

import pytest
import torch
from conftest import NO_EXPORT
from test_runtime import ONE_BLOCK

from pql import bulk
from pql.checkpoint import load_checkpoint
from pql.replay import PrioritizedSampler, ReplayBuffer
from pql.runtime.off_policy.learners import VLearner
from pql.runtime.run import train

SPEC = {"obs": ((3,), torch.float32), "reward": ((), torch.float32), "done": ((), torch.bool)}


def test_a_bulk_file_reads_back_what_was_written(tmp_path, monkeypatch):
    monkeypatch.setattr(bulk, "CHUNK_BYTES", 40)  # several chunks per tensor
    tensors = {
        "a": torch.randn(17, 3),
        "b": torch.arange(9, dtype=torch.int64),
        "c": torch.rand(5) > 0.5,
        "empty": torch.zeros(0, 4),
        "view": torch.randn(6, 4)[:, 1],  # not contiguous: written as its values
    }
    description = bulk.write_bulk(str(tmp_path), "replay-x", tensors)
    path = os.path.join(tmp_path, description["file"])
    assert os.path.getsize(path) == description["bytes"] == bulk.nbytes(tensors)
    bulk.check_bulk(path, description)
    into = {k: torch.empty_like(t).contiguous() for k, t in tensors.items()}
    bulk.read_bulk(path, description, into)
    assert all(torch.equal(into[k], t) for k, t in tensors.items())
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_a_truncated_damaged_or_missing_bulk_file_is_refused(tmp_path):
    description = bulk.write_bulk(str(tmp_path), "replay-x", {"a": torch.randn(100)})
    path = os.path.join(tmp_path, description["file"])
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:-7])
    with pytest.raises(bulk.BulkError, match="truncated"):
        bulk.check_bulk(path, description)
    with open(path, "wb") as f:
        f.write(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(bulk.BulkError, match="damaged"):
        bulk.check_bulk(path, description)
    os.remove(path)
    with pytest.raises(bulk.BulkError, match="missing"):
        bulk.check_bulk(path, description)


def test_old_bulk_files_go_and_the_referenced_ones_stay(tmp_path):
    names = [bulk.write_bulk(str(tmp_path), "replay-x", {"a": torch.ones(2)})["file"] for _ in range(3)]
    # Another replica's, in the same run directory: its own to remove.
    other = bulk.write_bulk(str(tmp_path), bulk.stem_of("replay-x", 1), {"a": torch.ones(2)})["file"]
    assert ".rank1-" in other and bulk.owned_by(other, 1) and not bulk.owned_by(other, 0)
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    bulk.remove_unreferenced(str(tmp_path), {names[-1]})
    assert sorted(os.listdir(tmp_path)) == sorted(["checkpoint.pt", names[-1], other])
    bulk.remove_unreferenced(str(tmp_path), set(), rank=1)
    assert sorted(os.listdir(tmp_path)) == sorted(["checkpoint.pt", names[-1]])
    assert bulk.descriptions({"roles": {"v": {"replay": {"bulk": {"file": names[-1], "crc32": 1}}}}}) == [
        {"file": names[-1], "crc32": 1}
    ]


def _sampler(kind: str):
    if kind == "uniform":
        return None
    return PrioritizedSampler(64, "cpu", mode=kind, rerank_every=3, beta_anneal_updates=50)


def _filled(kind: str, seed: int = 0) -> ReplayBuffer:
    g = torch.Generator().manual_seed(seed)
    replay = ReplayBuffer(64, SPEC, "cpu", _sampler(kind), torch.Generator().manual_seed(1))
    for _ in range(10):  # 80 items into 64 slots: the ring has wrapped
        replay.add(
            {
                "obs": torch.randn(8, 3, generator=g),
                "reward": torch.randn(8, generator=g),
                "done": torch.rand(8, generator=g) > 0.5,
            }
        )
        _, indices, _ = replay.sample(16)
        replay.update_priorities(indices, torch.rand(16, generator=g))
    return replay


def _draws(replay: ReplayBuffer, seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(6):
        replay.add(
            {
                "obs": torch.randn(8, 3, generator=g),
                "reward": torch.randn(8, generator=g),
                "done": torch.ones(8, dtype=torch.bool),
            }
        )
        batch, indices, weights = replay.sample(16)
        replay.update_priorities(indices, torch.rand(16, generator=g))
        out.append((batch, indices, weights))
    return out


@pytest.mark.parametrize("kind", ["uniform", "proportional", "rank"])
def test_a_restored_replay_samples_and_updates_as_the_saved_one(tmp_path, kind):
    saved = _filled(kind)
    small, tensors = saved.state()
    description = bulk.write_bulk(str(tmp_path), "replay", tensors)
    small = torch.load(_round_trip(small), weights_only=True)  # as a checkpoint holds it
    restored = ReplayBuffer(64, SPEC, "cpu", _sampler(kind), torch.Generator().manual_seed(1))
    restored.generator.set_state(saved.generator.get_state())
    bulk.read_bulk(os.path.join(tmp_path, description["file"]), description, restored.load_targets(small))
    restored.load_state(small)
    for (b1, i1, w1), (b2, i2, w2) in zip(_draws(saved, 5), _draws(restored, 5), strict=True):
        assert torch.equal(i1, i2) and torch.equal(w1, w2)
        assert all(torch.equal(b1[k], b2[k]) for k in b1)


def test_a_replay_of_another_layout_is_refused():
    small, _ = _filled("uniform").state()
    other = ReplayBuffer(32, SPEC, "cpu")
    with pytest.raises(ValueError, match="layout"):
        other.load_targets(small)
    prioritized = ReplayBuffer(64, SPEC, "cpu", _sampler("proportional"))
    with pytest.raises(ValueError, match="layout"):
        prioritized.load_targets(small)


def _round_trip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


EXACT = [
    NO_EXPORT,
    "task=InvertedPendulum",
    "task.num_envs=8",
    "task.backend=mujoco",
    "task.eval_envs=2",
    "algo.batch_size=64",
    "algo.net.actor_hidden=[32,32]",
    "algo.net.critic_hidden=[32,32]",
    "algo.warmup_steps=4",
    "runtime.mode=sequential",
    "runtime.device=cpu",
    "runtime.max_env_steps=400",
    "runtime.checkpoint_every=200",  # periodic checkpoints on the way: reading the state changes nothing
    "runtime.eval_every=300",
    "runtime.log_every_s=5",
]


def _tensors(state, prefix=""):
    if isinstance(state, torch.Tensor):
        return {prefix: state}
    items = state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, (list, tuple)) else ()
    return {path: t for k, v in items for path, t in _tensors(v, f"{prefix}/{k}").items()}


def _replays(run_dir, state) -> dict:
    """{learner: its replay's bulk bytes} of a checkpoint."""
    return {
        name: open(os.path.join(run_dir, role["replay"]["bulk"]["file"]), "rb").read()
        for name, role in state["roles"].items()
        if role.get("replay")
    }


def _stop_at_update(monkeypatch, update: int) -> None:
    """SIGTERM to this process right after the V-learner's `update`-th update of the launch."""
    step, calls = VLearner.step, []

    def stepping(self):
        step(self)
        calls.append(1)
        if len(calls) == update:
            signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(VLearner, "step", stepping)


@pytest.mark.slow
@pytest.mark.parametrize(
    "algo,extra",
    [
        ("pql", []),
        ("sac", []),
        ("pql_d", []),
        ("pql", ["replay.kind=prioritized", "replay.priority_mode=rank"]),
        # The normalized learner: batch-norm statistics, the return's statistics, held noise (one
        # residual block: its statistics are saved as two blocks' would be, and it trains faster).
        (
            "sac",
            [
                "algo.net.kind=batchnorm",
                *ONE_BLOCK,
                "algo.value=categorical",
                "algo.return_scaling=true",
                "algo.noise_hold=16",
                "algo.target_entropy_std=0.15",
            ],
        ),
        # A critic reading observations of its own (examples/own_env.py's, which it checkpoints).
        ("sac", ["task=examples.own_env:make_env", "task.kwargs.privileged=true"]),
    ],
    ids=["pql", "sac", "pql_d", "pql-rank", "sac-normalized", "sac-privileged"],
)
def test_a_run_stopped_at_any_update_resumes_exactly(make_config, tmp_path, monkeypatch, algo, extra):
    """Stopped by SIGTERM at two random updates, resumed after each, a run ends with the networks,
    optimiser states, replay (and its priorities), envs, RNG streams and counters of the run never
    stopped, byte for byte."""
    task = [o for o in extra if o.startswith("task=")]  # another task than EXACT's: its settings go
    overrides = [o for o in EXACT if not (task and o.startswith(("task=", "task.backend=")))] + [f"algo={algo}", *extra]
    train(make_config(overrides, run_dir=tmp_path / "whole"))
    whole = load_checkpoint(tmp_path / "whole" / "checkpoint.pt")
    updates, run_dir = whole["counters"]["critic_updates"], tmp_path / "stopped"
    stops = sorted(random.Random(f"{algo}{extra}").sample(range(1, updates // 2), 2))
    for launch, stop in enumerate(stops):  # the second stop is in the first resume
        with monkeypatch.context() as patch:
            _stop_at_update(patch, stop - (stops[0] if launch else 0))
            with pytest.raises(KeyboardInterrupt):
                train(make_config(overrides + (["checkpoint=auto"] if launch else []), run_dir=run_dir))
        assert load_checkpoint(run_dir / "checkpoint.pt")["counters"]["critic_updates"] < updates, stop
    train(make_config(overrides + ["checkpoint=auto"], run_dir=run_dir))
    resumed = load_checkpoint(run_dir / "checkpoint.pt")
    for key in ("counters", "launch"):
        assert resumed[key] == whole[key], key
    parts = ("policy", "normalizer", "roles", "weights", "rng")
    a, b = _tensors({k: whole[k] for k in parts}), _tensors({k: resumed[k] for k in parts})
    assert a.keys() == b.keys() and len(a) > 20
    assert [k for k in a if not torch.equal(a[k], b[k])] == []
    assert resumed["rng"]["python"] == whole["rng"]["python"]
    assert _replays(run_dir, resumed) == _replays(tmp_path / "whole", whole)
    assert sorted(f for f in os.listdir(run_dir) if f.endswith(".bulk")) == sorted(
        role["replay"]["bulk"]["file"] for role in resumed["roles"].values() if role.get("replay")
    ), "the bulk files of earlier checkpoints are gone"


@pytest.mark.slow
def test_a_process_mode_run_stopped_by_a_signal_loses_no_transition(make_config, tmp_path):
    """Process mode is not bitwise reproducible (docs/checkpoints.md), but a stop signal loses
    nothing: every staged batch is in both replays the checkpoint holds, and a resume hands the
    very same replays back."""
    from test_runtime import SMALL, endless_run, signalled_run

    returncode, _, err, *_ = signalled_run(endless_run(tmp_path, "runtime.checkpoint_every=1000000000"), signal.SIGTERM)
    assert returncode == 143, err
    saved = load_checkpoint(tmp_path / "checkpoint.pt")
    counters = saved["counters"]
    for name in ("v_learner", "p_learner"):
        assert saved["roles"][name]["replay"]["size"] == counters["actor_steps"] * 8, name  # SMALL's 8 envs
    replays = _replays(tmp_path, saved)
    again = SMALL + ["runtime.mode=process", f"runtime.max_env_steps={counters['env_steps']}", "checkpoint=auto"]
    train(make_config(again, run_dir=tmp_path))
    resumed = load_checkpoint(tmp_path / "checkpoint.pt")
    assert resumed["counters"] == counters
    assert _replays(tmp_path, resumed) == replays


@pytest.mark.slow
def test_a_checkpoint_cut_in_its_replay_or_of_another_layout_is_refused_in_one_line(make_config, tmp_path):
    """Exit 2 and one line, before anything is built: a replay of another capacity, a critic of
    another size, a replay file cut short."""
    import subprocess
    import sys

    from conftest import ROOT

    train(make_config(EXACT + ["runtime.max_env_steps=200"], run_dir=tmp_path))
    path = tmp_path / "checkpoint.pt"
    replay = next(f for f in os.listdir(tmp_path) if f.startswith("replay-v_learner"))

    def resume(*overrides: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "train.py", *EXACT, *overrides, f"checkpoint={path}", f"hydra.run.dir={tmp_path}/again"]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)

    other = resume("replay.capacity=5000")
    assert other.returncode == 2 and "replay.capacity" not in other.stdout, other.stderr
    assert "capacity 1000000 where this run has 5000" in other.stderr and "Traceback" not in other.stderr
    smaller = resume("algo.net.critic_hidden=[8,8]")
    assert smaller.returncode == 2 and "Traceback" not in smaller.stderr, smaller.stderr
    assert "the checkpoint's critic has" in smaller.stderr and "algo.net" in smaller.stderr, smaller.stderr
    data = (tmp_path / replay).read_bytes()
    (tmp_path / replay).write_bytes(data[: len(data) // 2])
    cut = resume()
    assert cut.returncode == 2 and "Traceback" not in cut.stderr, cut.stderr
    assert cut.stderr.strip().splitlines()[-1].endswith("truncated"), cut.stderr
    assert not (tmp_path / "again" / "checkpoint.pt").exists()
