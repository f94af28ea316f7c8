"""Atomic checkpoints, clear load errors, and RNG state round trips, on real files."""

import os
import random
import signal

import numpy as np
import pytest
import torch

from pql.checkpoint import (
    CheckpointError,
    CheckpointWriteError,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)


def _state(value: float) -> dict:
    return {
        "critic": {"w": torch.full((3, 2), value)},
        "env_steps": 1000,
        "config": {"task": "Ant", "hidden": (256, 256)},
    }


def test_module_and_optimizer_state_dicts_round_trip(tmp_path):
    net = torch.nn.Linear(3, 2)
    optim = torch.optim.Adam(net.parameters(), lr=1e-3)
    net(torch.ones(1, 3)).sum().backward()
    optim.step()
    save_checkpoint(tmp_path / "ckpt.pt", {"net": net.state_dict(), "optim": optim.state_dict()})
    state = load_checkpoint(tmp_path / "ckpt.pt")
    fresh_net = torch.nn.Linear(3, 2)
    fresh_net.load_state_dict(state["net"])
    torch.optim.Adam(fresh_net.parameters()).load_state_dict(state["optim"])
    assert torch.equal(fresh_net.weight, net.weight)


def test_round_trip(tmp_path):
    path = tmp_path / "sub" / "ckpt.pt"  # the directory is created
    save_checkpoint(path, _state(1.5))
    state = load_checkpoint(path)
    assert torch.equal(state["critic"]["w"], torch.full((3, 2), 1.5))
    assert state["env_steps"] == 1000 and state["config"] == {"task": "Ant", "hidden": (256, 256)}
    assert os.listdir(path.parent) == ["ckpt.pt"]


@pytest.mark.parametrize("has_previous", [True, False])
def test_crash_mid_write_keeps_previous_and_leaves_no_temp(tmp_path, monkeypatch, has_previous):
    path = tmp_path / "ckpt.pt"
    if has_previous:
        save_checkpoint(path, _state(1.0))
    real_save = torch.save

    def crashing_save(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a zip file")  # bytes reach the disk before the crash
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch, "save", crashing_save)
    kept = "the previous checkpoint there is kept" if has_previous else "there is no earlier one"
    with pytest.raises(CheckpointWriteError, match=f"could not write checkpoint {path}: disk full; {kept}"):
        save_checkpoint(path, _state(2.0))
    monkeypatch.setattr(torch, "save", real_save)
    assert os.listdir(tmp_path) == (["ckpt.pt"] if has_previous else [])
    if has_previous:
        assert torch.equal(load_checkpoint(path)["critic"]["w"], torch.full((3, 2), 1.0))


def test_load_missing_names_the_path(tmp_path):
    path = tmp_path / "nope.pt"
    with pytest.raises(CheckpointError, match="checkpoint not found: .*nope.pt"):
        load_checkpoint(path)


def test_load_rejects_other_files(tmp_path):
    plain = tmp_path / "plain.pt"
    torch.save({"critic": torch.zeros(2)}, plain)
    with pytest.raises(CheckpointError, match=r"plain\.pt is not a pql checkpoint"):
        load_checkpoint(plain)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match=r"garbage\.pt is not a readable pql checkpoint"):
        load_checkpoint(garbage)
    newer = tmp_path / "newer.pt"
    torch.save({"format": "pql-checkpoint", "version": 99, "state": {}}, newer)
    with pytest.raises(CheckpointError, match=r"newer\.pt .* version 99"):
        load_checkpoint(newer)


def test_save_refuses_what_a_safe_load_would_refuse(tmp_path):
    with pytest.raises(TypeError, match=r"state\['optim'\]\['lr'\] is a numpy.float64"):
        save_checkpoint(tmp_path / "ckpt.pt", {"optim": {"lr": np.float64(3e-4)}})
    assert os.listdir(tmp_path) == []


def _draws():
    return random.random(), np.random.rand(3).tolist(), np.random.randn(), torch.rand(3).tolist()


def test_rng_state_round_trip_through_a_checkpoint(tmp_path):
    np.random.randn()  # leave a cached Gaussian in NumPy's state, which must be restored too
    save_checkpoint(tmp_path / "rng.pt", {"rng": rng_state()})
    expected = _draws()
    _draws()
    set_rng_state(load_checkpoint(tmp_path / "rng.pt")["rng"])
    assert _draws() == expected


def test_a_stop_signal_during_the_write_waits_for_a_whole_checkpoint(tmp_path, monkeypatch):
    """SIGTERM in the middle of torch.save (the chaos test caught one) is delivered once the file
    is whole and in place, not inside the write."""

    class Stopped(Exception):
        pass

    def stop(signum, frame):
        raise Stopped()

    real_save = torch.save

    def save_with_a_signal(obj, f):
        os.kill(os.getpid(), signal.SIGTERM)
        real_save(obj, f)

    previous = signal.signal(signal.SIGTERM, stop)
    monkeypatch.setattr(torch, "save", save_with_a_signal)
    try:
        with pytest.raises(Stopped):
            save_checkpoint(tmp_path / "ckpt.pt", {"x": torch.arange(100_000)})
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert torch.equal(load_checkpoint(tmp_path / "ckpt.pt")["x"], torch.arange(100_000))
    assert os.listdir(tmp_path) == ["ckpt.pt"]
