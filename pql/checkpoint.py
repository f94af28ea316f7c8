"""Atomic checkpoints and the RNG state that makes a resumed run continue the same streams.

A checkpoint is `torch.save` of `{"format": "pql-checkpoint", "version": N, "state": state}`.
It is written to a temporary file in the destination's directory, fsynced, then renamed over
the destination: `os.replace` within one file system is atomic, so a crash at any point leaves
either the previous checkpoint or the new one at `path`, never a truncated file.

Loading uses `torch.load(weights_only=True)`: a checkpoint may hold tensors, numbers, strings,
None and lists/tuples/dicts of these (what `state_dict()` returns), and loading one never runs
pickled code.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import signal
import subprocess
import threading
import uuid

import numpy as np
import torch

FORMAT = "pql-checkpoint"
FILE_NAME = "checkpoint.pt"  # a run directory's checkpoint: the run writes it, checkpoint=auto resumes it
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # what stops a run: Ctrl-C; docker stop, SLURM, `timeout`
# 2: one layout for every algorithm; 3: the replay, the envs and every role's whole state;
# 4: a prioritized replay's priorities as its leaves alone (docs/checkpoints.md)
VERSION = 4


def software() -> dict:
    """What wrote a checkpoint, for an exported policy's metadata: {"pql": version, "commit": the
    git commit of pql's source tree, "+" where it had uncommitted changes, or None outside a
    checkout}."""
    from pql import __version__

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {"pql": __version__, "commit": None}
    commit = head.stdout.strip() + ("+" if dirty.stdout.strip() else "") if head.returncode == 0 else None
    return {"pql": __version__, "commit": commit}


class CheckpointError(ValueError):
    """A checkpoint that cannot be read: missing, not a pql checkpoint, or another format version."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, an unwritable directory): str() says which
    file and why; the previous checkpoint at that path, if any, is untouched."""


def save_checkpoint(path: str | os.PathLike, state: dict) -> None:
    """Write `state` to `path` atomically (creating the directory if needed).

    Raises TypeError, before writing anything, if `state` holds an object a weights_only load
    would refuse, so a run learns at its first checkpoint, not at resume, that it cannot resume.
    Raises CheckpointWriteError if the file system refuses the write; the file at `path` is then
    the one that was there before.
    """
    _check_plain(state, "")
    path = os.path.abspath(os.fspath(path))
    directory, name = os.path.split(path)
    os.makedirs(directory, exist_ok=True)
    # A hidden name in the same directory: the rename must not cross file systems, and a glob
    # for checkpoints must not pick up a half-written one.
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        try:
            with _stop_signals_held():
                with open(tmp, "xb") as f:
                    torch.save({"format": FORMAT, "version": VERSION, "state": state}, f)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
        except BaseException:  # KeyboardInterrupt too: never leave the temporary file behind
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        _fsync_directory(directory)
    except (OSError, RuntimeError) as e:  # torch.save reports a failed write as a RuntimeError
        kept = "the previous checkpoint there is kept" if os.path.exists(path) else "there is no earlier one"
        raise CheckpointWriteError(f"could not write checkpoint {path}: {_reason(e)}; {kept}") from e


@contextlib.contextmanager
def _stop_signals_held():
    """Hold SIGINT and SIGTERM back while a checkpoint is written: one that arrives meanwhile is
    raised again once the file is whole and in place (a stop signal raises inside torch.save
    otherwise, and the write is lost with it). Handlers belong to the main thread: elsewhere
    this holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if caught:
            signal.raise_signal(caught[0])


def _reason(error: BaseException) -> str:
    """The innermost cause's words: torch.save wraps the file system's error in its own."""
    while (inner := error.__cause__ or error.__context__) is not None:
        error = inner
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return (str(error).splitlines() or [type(error).__name__])[0]


# Exact types: subclasses (numpy float64, IntEnum, namedtuple, defaultdict) pickle as their own
# class, which the weights_only loader refuses.
_PLAIN_LEAVES = (str, bytes, int, float, complex, bool, type(None))
_TORCH_LEAVES = (torch.Tensor, torch.Size, torch.dtype, torch.device)


def _check_plain(obj, where: str) -> None:
    if type(obj) in _PLAIN_LEAVES or isinstance(obj, _TORCH_LEAVES):
        return
    if type(obj) in (dict, collections.OrderedDict):
        for key, value in obj.items():
            _check_plain(key, f"{where} (a key)")
            _check_plain(value, f"{where}[{key!r}]")
    elif type(obj) in (list, tuple, set):
        for i, value in enumerate(obj):
            _check_plain(value, f"{where}[{i}]")
    else:
        raise TypeError(
            f"checkpoint state{where} is a {type(obj).__module__}.{type(obj).__qualname__}; a checkpoint "
            "holds only tensors, numbers, strings, None and dicts/lists/tuples of these: convert it "
            "(e.g. .item(), .tolist(), dataclasses.asdict())"
        )


def _fsync_directory(directory: str) -> None:
    # The rename is durable across a power loss only once the directory entry is on disk.
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Return the `state` dict saved by `save_checkpoint`, every tensor on the CPU.

    Always the CPU: RNG states must arrive as CPU byte tensors (`torch.Generator.set_state` takes
    nothing else), and each part of a run moves the rest to its own device as it loads it
    (`load_state_dict` copies into tensors that already live there)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path} is not a readable pql checkpoint: {reason}") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a pql checkpoint (no '{FORMAT}' format marker)")
    if data.get("version") != VERSION:
        raise CheckpointError(
            f"{path} is a pql checkpoint of format version {data.get('version')!r}; this pql reads version {VERSION}"
        )
    return data["state"]


def seed_all(seed: int) -> None:
    """Seed this process's streams that `rng_state` saves: Python's `random`, NumPy's global RNG
    (a user's env may draw from either) and torch's. Left unseeded, the first two start from the
    OS's entropy in every process, and a resumed launch would not continue a run's streams."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """The RNG state of this process: Python `random`, NumPy's global RNG, torch CPU and CUDA.

    Only tensors, numbers and tuples, so a checkpoint holding it loads with weights_only=True.
    """
    np_state = np.random.get_state(legacy=False)
    state = {
        "python": random.getstate(),
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["torch_cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what `rng_state` returned (possibly after a save/load round trip)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": np_state["bit_generator"],
            "state": {"key": np_state["key"].cpu().numpy().astype(np.uint32), "pos": np_state["pos"]},
            "has_gauss": np_state["has_gauss"],
            "gauss": np_state["gauss"],
        }
    )
    torch.set_rng_state(state["torch"].cpu())
    # A CUDA run resumed on a machine without CUDA has no CUDA streams to restore; the CPU ones
    # still are. With fewer GPUs than were saved, the first ones are restored.
    if "torch_cuda" in state and torch.cuda.is_available():
        cuda_states = [s.cpu() for s in state["torch_cuda"]][: torch.cuda.device_count()]
        for device, s in enumerate(cuda_states):
            torch.cuda.set_rng_state(s, device)
