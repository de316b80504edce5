"""Sharded mode's lookups inside a batch's write tasks, and their merge on the driver.

On the fused and shuffle paths every key of a batch lives in one write task (the
driver checks this on every batch and redoes the batch otherwise). The driver hands
each task a ``ShardJob`` with ``in_task`` set, naming the shard manifest of the
table's current snapshot. After writing its files, a task splits its own keys by shard
(``BatchKeys``), runs one step per shard it touches (``resolve_shards``: load the shard
or take it from the worker's cache, look the keys up, write a delta file holding the
rows it deletes and its new files' keys) and returns ``TaskSteps``: the live rows its
keys were at, and each stepped shard's chain ending in its own delta.

``merge_task_steps`` puts the tasks' steps together on the driver: their matches become
one ``Matches`` over the batch's keys, and each shard's chain is the manifest's with
every task's delta appended in task order. The deltas of one batch commute (other keys,
other rows), which is also why a worker may keep its shard with only its own delta
applied (``ShardCache.take_prefix``). A shard whose chain is long is rebased by a
task that steps it (``ShardJob.rebase``): the task the driver names (by the last
batch's partitions: ``ShardJob.rebase_owners``) writes the manifest's chain as a new
base and its delta on that, the others their deltas on the manifest's chain; the
merged chain is that base with every task's delta. Where no task is named (tasks that
do not know their partition, a chain that stayed long) every task stepping the shard
writes the base, the same rows in each, and the driver keeps the first and deletes
the others (spare). Anything that does not fit (a shard a task could not read, steps
on another manifest or snapshot, keys no step covered) returns None and the driver runs
the separate stage instead; the task's deltas are then named by nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from calving.commit.errors import CalvingError
from calving.commit.index import shard_lookup
from calving.commit.index.matches import Matches
from calving.commit.index.shard_batch import BatchKeys, merge_results
from calving.commit.index.shard_lookup import ShardJob, ShardResult, resolve_shards
from calving.commit.index.shards import ShardFile, ShardManifest
from calving.commit.spec.data_file import DataFile


@dataclass(frozen=True)
class TaskSteps:
    """One write task's shard steps (a commit message's value).

    The task's keys are its files' keys in file order (``file_rows`` of them), then its
    deleted keys (``delete_rows``); match ``j`` is key ``key_rows[j]`` of those at
    ``positions[j]`` of ``paths[file_ids[j]]``."""

    manifest: str  # the location of the manifest the steps ran on
    snapshot_id: int | None
    file_rows: int
    delete_rows: int
    chains: tuple[ShardFile, ...] = ()  # each stepped shard after the task's delta
    added: tuple[tuple[str, ...], ...] = ()  # by chain: the new files recorded
    key_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    paths: tuple[str, ...] = ()
    file_ids: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint32))
    positions: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    cache_hits: int = 0
    #: Why a shard could not be read (the driver then runs the separate stage).
    unreadable: str = ""
    seconds: float = 0.0
    #: The write task's partition (None: unknown), which the next rebase names.
    task: int | None = None
    #: Steps that found their shard as the task's read-ahead left it.
    read_ahead: int = 0


def run_task_steps(
    job: ShardJob,
    files: Sequence[tuple[DataFile, pa.Table | None]],
    deleted: Sequence[pa.Table],
    task: int | None = None,
) -> TaskSteps:
    """The steps of one task's keys: its new ``files`` (with their keys in row order)
    and its ``deleted`` keys; ``task``: its partition (which due bases it writes)."""
    started = time.perf_counter()
    with_keys = [k for _, k in files if k is not None and k.num_rows]
    tables = with_keys + [k for k in deleted if k.num_rows]
    keys = pa.concat_tables(tables, promote_options="default") if tables else None
    file_rows = sum(k.num_rows for k in with_keys)
    delete_rows = (keys.num_rows if keys is not None else 0) - file_rows
    manifest = job.manifest
    out = TaskSteps(job.manifest_location, job.snapshot_id, file_rows, delete_rows, task=task)
    ahead = shard_lookup.CACHE.taken_ahead
    try:
        batch = BatchKeys.of(manifest, keys, files)
        results = resolve_shards(job, batch.requests(manifest, None), task)
    except CalvingError as err:  # the separate stage tries again, and names the failure
        return replace(out, unreadable=f"{type(err).__name__}: {err}")
    bad = next((r for r in results if r.unreadable), None)
    if bad is not None:
        return replace(out, unreadable=f"shard {bad.chain.shard}: {bad.unreadable}")
    matches = merge_results(results, batch.rows_of(manifest, None), batch.count)
    return replace(
        out,
        chains=tuple(r.chain for r in results),
        added=tuple(r.added for r in results),
        key_rows=matches.key_rows,
        paths=tuple(matches.paths),
        file_ids=matches.file_ids,
        positions=matches.positions,
        cache_hits=sum(r.cache_hit for r in results),
        seconds=time.perf_counter() - started,
        read_ahead=shard_lookup.CACHE.taken_ahead - ahead,
    )


# ---------------------------------------------------------------- on the driver


@dataclass(frozen=True)
class PlacedSteps:
    """A task's steps and where its keys sit among the batch's: its files' keys from
    ``file_start`` of the files' keys, its deleted keys from ``delete_start`` of the
    deleted keys (the batch's keys are all files' keys, then all deleted keys)."""

    steps: TaskSteps
    file_start: int
    delete_start: int


@dataclass(frozen=True)
class MergedSteps:
    matches: Matches
    results: tuple[ShardResult, ...]  # one a stepped shard: its chain after the batch
    cache_hits: int
    #: Rebased shards: each kept base, with the manifest's chain whose rows it holds.
    rebased: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: The bases of rebases that were not kept (no chain names them).
    spare: tuple[str, ...] = ()


def merge_task_steps(
    manifest: ShardManifest,
    location: str,
    placed: Sequence[PlacedSteps],
    file_rows: int,
    delete_rows: int,
) -> MergedSteps | str:
    """The tasks' steps as one batch's, or why they do not make one (a string)."""
    why = _misfit(manifest, location, placed, file_rows, delete_rows)
    if why:
        return why
    key_rows, file_ids, positions = [], [], []
    paths: dict[str, int] = {}
    chains: dict[int, list[tuple[ShardFile, tuple[str, ...]]]] = {}
    for p in placed:
        s = p.steps
        local = s.key_rows.astype(np.int64)
        deleted = local >= s.file_rows
        key_rows.append(
            np.where(
                deleted,
                file_rows + p.delete_start + (local - s.file_rows),
                p.file_start + local,
            )
        )
        ids = np.array([paths.setdefault(q, len(paths)) for q in s.paths], np.uint32)
        file_ids.append(ids[s.file_ids] if len(ids) else np.empty(0, np.uint32))
        positions.append(s.positions.astype(np.int64))
        for chain, added in zip(s.chains, s.added):
            chains.setdefault(chain.shard, []).append((chain, added))
    merged = []
    rebased: dict[str, tuple[str, ...]] = {}
    spare: list[str] = []
    for shard, stepped in sorted(chains.items()):
        base = manifest.shards[shard]
        extended = _merge_chain(base, manifest.snapshot_id, [c for c, _ in stepped])
        if extended is None:
            return f"shard {shard}: a task's chain does not extend the manifest's"
        if extended.location != base.location:
            rebased[extended.location] = (base.location, *base.deltas)
            spare += [
                c.location
                for c, _ in stepped
                if c.location not in (base.location, extended.location)
            ]
        added = tuple(a for _, files in stepped for a in files)
        none = np.empty(0, np.int64)
        merged.append(ShardResult(extended, none, (), none, none, False, added))
    count = file_rows + delete_rows
    kr = np.concatenate(key_rows) if key_rows else np.empty(0, np.int64)
    fi = np.concatenate(file_ids) if file_ids else np.empty(0, np.uint32)
    po = np.concatenate(positions) if positions else np.empty(0, np.int64)
    order = np.argsort(kr, kind="stable")
    found = np.zeros(count, bool)
    found[kr] = True
    matches = Matches(found, kr[order], fi[order], po[order], list(paths))
    hits = sum(p.steps.cache_hits for p in placed)
    return MergedSteps(matches, tuple(merged), hits, rebased, tuple(spare))


def _misfit(
    manifest: ShardManifest,
    location: str,
    placed: Sequence[PlacedSteps],
    file_rows: int,
    delete_rows: int,
) -> str:
    for p in placed:
        s = p.steps
        if s.unreadable:
            return s.unreadable
        if (s.manifest, s.snapshot_id) != (location, manifest.snapshot_id):
            return f"steps ran on {s.manifest} at snapshot {s.snapshot_id}"
    if sum(p.steps.file_rows for p in placed) != file_rows or (
        sum(p.steps.delete_rows for p in placed) != delete_rows
    ):
        return "the tasks' steps do not cover the batch's keys"
    return ""


def _merge_chain(
    base: ShardFile, snapshot_id: int | None, chains: Sequence[ShardFile]
) -> ShardFile | None:
    """``base`` with each task's delta appended (a task that changed nothing adds
    none); after a rebase (a task's chain starting at a base of its own, written at
    the manifest's snapshot ``snapshot_id``), the first such base with every task's
    delta. None when a task's chain is neither."""
    location, base_snapshot, deltas = base.location, base.base_snapshot, list(base.deltas)
    entries = base.entries
    for c in chains:
        if c.location == base.location:
            if c.deltas[: len(base.deltas)] != base.deltas:
                return None
            extra = c.deltas[len(base.deltas) :]
        elif c.base_snapshot == snapshot_id:  # rebased: the manifest's chain as a base
            extra = c.deltas
            if location == base.location:
                location, base_snapshot = c.location, c.base_snapshot
                deltas = deltas[len(base.deltas) :]  # this batch's deltas, on the new base
        else:
            return None
        if len(extra) > 1 or (not extra and c.entries != base.entries):
            return None
        deltas += extra
        entries += c.entries - base.entries
    return ShardFile(base.shard, location, entries, base_snapshot, tuple(deltas))


# ---------------------------------------------------------------- the codec


def steps_to_payload(steps: TaskSteps) -> tuple[str, bytes]:
    """``steps`` as a JSON text and an Arrow IPC stream of its matches (a commit
    message's payload and keys columns)."""
    head = {
        "manifest": steps.manifest,
        "snapshot": steps.snapshot_id,
        "file_rows": steps.file_rows,
        "delete_rows": steps.delete_rows,
        "chains": [
            [c.shard, c.location, c.entries, c.base_snapshot, list(c.deltas)] for c in steps.chains
        ],
        "added": [list(a) for a in steps.added],
        "paths": list(steps.paths),
        "cache_hits": steps.cache_hits,
        "unreadable": steps.unreadable,
        "seconds": steps.seconds,
        "task": steps.task,
        "read_ahead": steps.read_ahead,
    }
    # 12 bytes a match: a row position is a uint32 in the index, and so is a key's row
    # among a task's keys (pyarrow refuses a value that does not fit, never wraps it).
    table = pa.table(
        {
            "key_row": pa.array(steps.key_rows, pa.uint32()),
            "file": pa.array(steps.file_ids, pa.uint32()),
            "position": pa.array(steps.positions, pa.uint32()),
        }
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return json.dumps(head, separators=(",", ":")), sink.getvalue().to_pybytes()


def steps_from_payload(payload: str, matches: bytes) -> TaskSteps:
    """``steps_to_payload``'s inverse (``ValueError``/``KeyError`` on a bad payload)."""
    head = json.loads(payload)
    table = pa.ipc.open_stream(matches).read_all()
    paths = tuple(str(p) for p in head["paths"])
    file_ids = table.column("file").to_numpy().astype(np.uint32)
    if len(file_ids) and int(file_ids.max()) >= len(paths):
        raise ValueError("a match names a file the steps do not list")
    chains = tuple(
        ShardFile(int(s), str(loc), int(n), None if b is None else int(b), tuple(d))
        for s, loc, n, b, d in head["chains"]
    )
    added = tuple(tuple(str(p) for p in a) for a in head["added"])
    if len(added) != len(chains):
        raise ValueError("steps list added files for another number of shards")
    return TaskSteps(
        str(head["manifest"]),
        None if head["snapshot"] is None else int(head["snapshot"]),
        int(head["file_rows"]),
        int(head["delete_rows"]),
        chains,
        added,
        table.column("key_row").to_numpy().astype(np.int64),
        paths,
        file_ids,
        table.column("position").to_numpy().astype(np.int64),
        int(head["cache_hits"]),
        str(head["unreadable"]),
        float(head["seconds"]),
        None if head.get("task") is None else int(head["task"]),
        int(head.get("read_ahead", 0)),
    )
