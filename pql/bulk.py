"""The bulk of a checkpoint (a learner's replay and its priorities) in a file of its own, beside
the checkpoint, which holds only the file's description (`BulkFile`'s dict).

A bulk file is the raw bytes of its tensors one after another, behind an 8-byte marker. It is
written and read a chunk at a time through a host buffer of CHUNK_BYTES, so saving a replay of
several GB on a GPU or a CPU never holds a second copy of it, and torch.save's pickling is not
needed (a loader reads bytes into tensors it made, so nothing in the file can run code). Like a
checkpoint it is written under a temporary name, fsynced and renamed into place; its size and
CRC-32 in the description let a resume refuse a truncated or damaged file before anything is
loaded.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
import zlib

import torch

MARKER = b"PQLBULK1"
CHUNK_BYTES = 64 << 20


class BulkError(ValueError):
    """A bulk file that is missing, truncated, damaged, or not the layout its checkpoint says."""


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """A flat uint8 view of a contiguous tensor (a copy only where it is not contiguous)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def nbytes(tensors: dict[str, torch.Tensor]) -> int:
    return len(MARKER) + sum(t.numel() * t.element_size() for t in tensors.values())


def write_bulk(directory: str, stem: str, tensors: dict[str, torch.Tensor]) -> dict:
    """Write `tensors` (any devices) to a new file `<stem>-<random>.bulk` in `directory`.
    -> its description: {"file": name, "bytes", "crc32", "tensors": {key: {"dtype", "shape"}}},
    plain data for the checkpoint. Raises OSError if the file system refuses (nothing is left)."""
    os.makedirs(directory, exist_ok=True)
    name = f"{stem}-{uuid.uuid4().hex[:8]}.bulk"
    path = os.path.join(directory, name)
    tmp = os.path.join(directory, f".{name}.tmp")
    crc, written = zlib.crc32(MARKER), len(MARKER)
    try:
        with open(tmp, "xb") as f:
            f.write(MARKER)
            for t in tensors.values():
                flat = _bytes_of(t)
                for start in range(0, flat.numel(), CHUNK_BYTES):
                    chunk = flat[start : start + CHUNK_BYTES].cpu().numpy()
                    f.write(chunk.data)
                    crc = zlib.crc32(chunk.data, crc)
                    written += chunk.size
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return {
        "file": name,
        "bytes": written,
        "crc32": crc,
        "tensors": {
            k: {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)} for k, t in tensors.items()
        },
    }


def fits_disk(directory: str, size: int) -> bool:
    """Whether `directory`'s file system has room for `size` more bytes and as many to spare (the
    previous checkpoint's bulk stays until the new checkpoint is in place)."""
    os.makedirs(directory, exist_ok=True)
    return shutil.disk_usage(directory).free >= 2 * size


def check_bulk(path: str, description: dict, what: str = "the checkpoint's replay") -> None:
    """Raise BulkError unless the file at `path` (`what` it holds, for the message) is whole:
    its size and CRC-32 as described."""
    if not os.path.isfile(path):
        raise BulkError(f"{path} is missing ({what}: keep it beside the checkpoint)")
    size = os.path.getsize(path)
    if size != description["bytes"]:
        raise BulkError(f"{path} holds {size:,} bytes where its checkpoint wrote {description['bytes']:,}: truncated")
    if file_crc32(path) != description["crc32"]:
        raise BulkError(f"{path} is damaged (its CRC-32 is not the one its checkpoint recorded)")


def file_crc32(path: str) -> int:
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(CHUNK_BYTES):
            crc = zlib.crc32(block, crc)
    return crc


def read_bulk(path: str, description: dict, into: dict[str, torch.Tensor]) -> None:
    """Fill the tensors `into` (any devices; same keys, dtypes and shapes as described, else
    BulkError before anything is read) from the bulk file at `path`, a chunk at a time."""
    layout = {k: {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)} for k, t in into.items()}
    if layout != description["tensors"]:
        raise BulkError(f"{path} holds {description['tensors']}, not the {layout} asked for")
    with open(path, "rb") as f:
        if f.read(len(MARKER)) != MARKER:
            raise BulkError(f"{path} is not a pql bulk file")
        for t in into.values():
            assert t.is_contiguous(), "a tensor read into is contiguous (one the reader made)"
            flat = t.view(-1).view(torch.uint8)
            for start in range(0, flat.numel(), CHUNK_BYTES):
                want = min(CHUNK_BYTES, flat.numel() - start)
                block = f.read(want)
                if len(block) != want:
                    raise BulkError(f"{path} ends early: truncated")
                flat[start : start + want].copy_(torch.frombuffer(bytearray(block), dtype=torch.uint8))


def stem_of(stem: str, rank: int) -> str:
    """The stem of rank `rank`'s bulk files: replicas share the run directory, and each removes
    only its own files (`remove_unreferenced`)."""
    return stem if rank == 0 else f"{stem}.rank{rank}"


def owned_by(name: str, rank: int) -> bool:
    """Whether the file `name` (a bulk file, or a shard: pql/runtime/shards.py) was written by rank `rank`."""
    marks = re.findall(r"\.rank(\d+)-", name)
    return (int(marks[-1]) if marks else 0) == rank


def remove_unreferenced(directory: str, keep: set[str], rank: int = 0) -> None:
    """Delete the bulk files of rank `rank` in `directory` that are not in `keep` (those of older
    checkpoints, or of one whose write failed)."""
    for name in os.listdir(directory):
        if name.endswith(".bulk") and name not in keep and owned_by(name, rank):
            os.remove(os.path.join(directory, name))


def disk_size(size: int) -> str:
    return f"{size / 1e9:.2f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB"


def descriptions(state) -> list[dict]:
    """Every bulk file's description in a checkpoint's state (found wherever a part put one)."""
    if isinstance(state, dict):
        if isinstance(state.get("file"), str) and state["file"].endswith(".bulk") and "crc32" in state:
            return [state]
        return [d for value in state.values() for d in descriptions(value)]
    if isinstance(state, (list, tuple)):
        return [d for value in state for d in descriptions(value)]
    return []


def locate(state: dict, checkpoint: str) -> None:
    """Check every bulk file that a checkpoint's `state` describes, beside the file `checkpoint`
    (BulkError if one is not whole), and name each in its description by its path, for the part
    that reads it (in any process)."""
    for description in descriptions(state):
        path = os.path.join(os.path.dirname(os.path.abspath(checkpoint)), description["file"])
        check_bulk(path, description)
        description["file"] = path
