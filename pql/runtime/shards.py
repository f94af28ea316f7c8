"""A checkpoint of several replicas: one set of files that a resume reads whole or not at all.

Each replica's state differs from the others' in what a resume needs (its replay, its envs where
they stand, its n-step window, its generators), so every replica writes its own: rank 0 its
`checkpoint.pt` as one replica does, each other rank r a shard `checkpoint.rank<r>-<id>.pt`
(the same layout, written the same atomic way) beside it, with its replay's bulk files
(`replay-<learner>.rank<r>-<id>.bulk`). A set is taken at one step of every replica (the
runner's `checkpoint_ready`) and committed in three moves:

1. every rank > 0 writes its shard and its bulk files, then reads the shard back for its size and
   CRC-32 (`write_shard`);
2. rank 0 gathers those descriptions and, only if every rank has one, writes `checkpoint.pt`
   naming them ("shards"): the rename of that one file is the commit, so a crash at any moment
   leaves the previous whole set;
3. rank 0 tells every rank whether the set is in place, and each removes its own files that the
   committed set does not name (a set that failed leaves the previous one's).

A resume checks that the header names a shard for every rank and that each is whole (size and
CRC-32) before anything is built, then gives every rank its own (`replica_state`).
"""

from __future__ import annotations

import os
import uuid

from pql.bulk import BulkError, check_bulk, descriptions, file_crc32, owned_by, remove_unreferenced
from pql.checkpoint import CheckpointError, CheckpointWriteError, load_checkpoint, save_checkpoint
from pql.runtime.distributed import Replicas, from_lead, gather_at_lead

HEADER_KEYS = ("algo", "task", "config", "replicas")  # what rank 0's file holds for every rank


def shard_name(rank: int) -> str:
    return f"checkpoint.rank{rank}-{uuid.uuid4().hex[:8]}.pt"


def write_shard(directory: str, rank: int, state: dict) -> dict:
    """Write rank `rank`'s state as a new shard in `directory`. -> its description {"file",
    "bytes", "crc32"}, read back from the file written. Raises CheckpointWriteError."""
    name = shard_name(rank)
    path = os.path.join(directory, name)
    save_checkpoint(path, state)
    try:
        return {"file": name, "bytes": os.path.getsize(path), "crc32": file_crc32(path)}
    except OSError as e:
        raise CheckpointWriteError(f"could not read back the shard {path}: {e.strerror}") from e


def commit(replicas: Replicas, path: str, header: dict, state: dict) -> None:
    """Write this replica's part of a checkpoint set at `path` (rank 0: the header's file) and,
    on rank 0, commit the set (the module's three moves; every replica calls it at the same
    checkpoint). Raises CheckpointWriteError on every rank if the set could not be written; the
    previous set is then untouched and whole."""
    directory = os.path.dirname(os.path.abspath(path))
    shard: dict | None = None
    error: str | None = None
    if not replicas.lead:
        try:
            shard = write_shard(directory, replicas.rank, state)
        except CheckpointWriteError as e:
            error = f"rank {replicas.rank} could not write its shard ({e.__cause__ or e})"
    gathered = gather_at_lead(replicas, (shard, error))
    outcome: object = None  # None: committed; else why not
    if gathered is not None:  # rank 0
        failed = [why for _, why in gathered if why is not None]
        if failed:
            outcome = "; ".join(failed)
        else:
            shards = [s for s, _ in gathered[1:]]
            try:
                save_checkpoint(path, {**header, **state, "shards": shards})
            except CheckpointWriteError as e:
                outcome = str(e)
    outcome = from_lead(replicas, outcome)
    if outcome is not None:  # the previous set stays; the next one that commits removes this one's files
        raise CheckpointWriteError(
            str(outcome)
            if replicas.world == 1
            else f"the checkpoint set was not written: {outcome}; the previous set is kept"
        )
    keep = {d["file"] for d in descriptions(state)} | ({shard["file"]} if shard else set())
    remove_unreferenced(directory, keep, replicas.rank)
    _remove_shards(directory, keep, replicas.rank)


def _remove_shards(directory: str, keep: set[str], rank: int) -> None:
    """Delete rank `rank`'s shards in `directory` that are not in `keep` (rank 0 has none)."""
    for name in os.listdir(directory):
        if rank > 0 and name.startswith("checkpoint.rank") and name not in keep and owned_by(name, rank):
            os.remove(os.path.join(directory, name))


def check_shards(state: dict, checkpoint: str, replicas: int) -> None:
    """Raise CheckpointError unless the checkpoint `state` (rank 0's file, at `checkpoint`) names a
    whole shard for each of the `replicas` - 1 other ranks."""
    shards = state.get("shards")
    if replicas == 1:
        return
    if not isinstance(shards, list) or len(shards) != replicas - 1:
        raise CheckpointError(
            f"{checkpoint} holds rank 0's state alone, not a shard of each of its {replicas} replicas "
            "(written by a pql that kept only rank 0's replay and envs): it cannot be resumed on several replicas"
        )
    directory = os.path.dirname(os.path.abspath(checkpoint))
    for rank, shard in enumerate(shards, start=1):
        try:
            check_bulk(os.path.join(directory, shard["file"]), shard, f"rank {rank}'s shard of the checkpoint")
        except BulkError as e:
            raise CheckpointError(f"{checkpoint} cannot be resumed: {e}") from e


def replica_state(state: dict, checkpoint: str, rank: int) -> dict:
    """Rank `rank`'s state of the checkpoint set whose header is `state` (read from `checkpoint`):
    rank 0's own, or its shard's with the header's keys; every shard is checked first."""
    check_shards(state, checkpoint, state.get("replicas", 1))
    if rank == 0:
        return state
    name = state["shards"][rank - 1]["file"]
    shard = load_checkpoint(os.path.join(os.path.dirname(os.path.abspath(checkpoint)), name))
    return {**shard, **{k: state[k] for k in HEADER_KEYS}}
