"""The primary-key index rebuilt by Spark tasks, as shards, never by the driver reading
the table.

Two stages, one Spark job:

1. **One task per group of data files** (``files_per_task``, default: two tasks per
   core). Each reads its files' key columns (``store.live_keys``: the rows the
   file's deletion vector leaves live), encodes and hashes the keys, and emits one
   ``ShardPiece`` per (file, shard): the keys and their positions. Only keys leave the
   task, never rows.
2. **Tasks by shard** (``partitionBy``: shard ``s`` goes to task ``s % tasks``, two
   tasks per core by default). For each of its shards a task concatenates the pieces,
   sorts them by hash and writes the shard's file (``commit.index.shards.write_shard``);
   an empty shard gets an empty file, so a manifest always names every shard.

The driver reads only manifests (the live files and their DVs' locations), then writes
the shard manifest naming what the tasks returned. Messages between driver and tasks
are frozen dataclasses pickled by Spark (one encoder, one decoder).

``rebuild_sharded`` returns the manifest; ``commit.index.shards.load_sharded`` merges
its shards into a driver index.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from calving.commit.errors import CalvingError
from calving.commit.index.keys import DEFAULT_HASHER, KeyCodec, Keys, concat_keys
from calving.commit.index.pk_index import PrimaryKeyIndex
from calving.commit.index.shards import (
    ShardFile,
    ShardHeader,
    ShardManifest,
    check_shard_count,
    load_sharded,
    shard_of,
    write_manifest,
    write_shard,
)
from calving.commit.index.store import build_from_table, key_spec, live_keys
from calving.commit.io import FileIO
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.properties import TableProperties
from calving.commit.spec.types import PrimitiveType
from calving.commit.table import scan
from calving.commit.table.summary import live_rows
from calving.ingest.sink.worker_gc import at_task_end

log = logging.getLogger(__name__)


class IndexRebuildError(CalvingError):
    """The Spark job rebuilding the index failed (its message names the cause)."""


@dataclass(frozen=True)
class RebuildJob:
    """What every task of one rebuild needs (``only``: the shards to write, all when
    empty)."""

    table_location: str
    table_uuid: str
    snapshot_id: int | None
    key_field_ids: tuple[int, ...]
    key_types: tuple[PrimitiveType, ...]
    shard_count: int
    io_properties: Mapping[str, str]
    only: frozenset[int] = frozenset()

    def wants(self, shard: int) -> bool:
        return not self.only or shard in self.only


@dataclass(frozen=True)
class FileTask:
    """One live data file and its deletion vector, if any."""

    data_file: DataFile
    dv: DataFile | None


@dataclass(frozen=True)
class ShardPiece:
    """The live keys of one data file that fall in one shard, with their positions."""

    path: str
    row_count: int
    keys: Keys
    positions: np.ndarray  # uint32


def keys_by_shard(job: RebuildJob, tasks: Iterable[FileTask]) -> Iterator[tuple[int, ShardPiece]]:
    """Stage 1 (executor): (shard, piece) for each file's live keys, per shard."""
    io = FileIO(dict(job.io_properties))
    codec = KeyCodec(job.key_types, job.key_field_ids)
    for task in tasks:
        found = live_keys(io, task.data_file, task.dv, job.key_field_ids)
        keys = codec.encode(found.keys)
        # uint16 (shard counts fit): numpy sorts it by radix, in linear time.
        shards = shard_of(DEFAULT_HASHER.hash(keys), job.shard_count).astype(np.uint16)
        order = np.argsort(shards, kind="stable")
        bounds = np.searchsorted(shards[order], np.arange(job.shard_count + 1))
        positions = found.positions.astype(np.uint32)
        for s in np.flatnonzero(np.diff(bounds)):
            if not job.wants(int(s)):
                continue
            rows = order[bounds[s] : bounds[s + 1]]
            yield int(s), ShardPiece(found.path, found.row_count, keys.take(rows), positions[rows])


def write_shards(
    job: RebuildJob, tasks: int, partition: int, pieces: Iterable[tuple[int, ShardPiece]]
) -> Iterator[ShardFile]:
    """Stage 2 (executor): the files of shards ``partition``, ``partition + tasks``, ...
    from their pieces (an empty shard gets an empty file)."""
    by_shard: dict[int, list[ShardPiece]] = {
        s: [] for s in range(partition, job.shard_count, tasks) if job.wants(s)
    }
    for shard, piece in pieces:
        if shard not in by_shard:
            raise IndexRebuildError(f"a piece of shard {shard} reached task {partition}")
        by_shard[shard].append(piece)
    io = FileIO(dict(job.io_properties))
    for shard, got in by_shard.items():
        yield _write_shard(io, job, shard, got)


def _write_shard(io: FileIO, job: RebuildJob, shard: int, got: list[ShardPiece]) -> ShardFile:
    files = sorted({(p.path, p.row_count) for p in got})
    ids = {path: i for i, (path, _) in enumerate(files)}
    keys = concat_keys([p.keys for p in got], _int_mode(job))
    file_index = np.concatenate(
        [np.full(len(p.positions), ids[p.path], np.uint32) for p in got] or [np.empty(0, np.uint32)]
    )
    positions = np.concatenate([p.positions for p in got] or [np.empty(0, np.uint32)])
    header = ShardHeader(
        job.table_uuid, job.snapshot_id, job.key_field_ids, job.key_types, shard, job.shard_count
    )
    return write_shard(io, job.table_location, header, keys, file_index, positions, files)


def _int_mode(job: RebuildJob) -> bool:
    return KeyCodec(job.key_types, job.key_field_ids).int_mode


@dataclass(frozen=True)
class _TaskOfShard:
    """Shard ``s`` goes to stage-2 task ``s % tasks``."""

    tasks: int

    def __call__(self, shard: int) -> int:
        return shard % self.tasks


def rebuild_sharded(
    spark: Any,
    io: FileIO,
    metadata: TableMetadata,
    shard_count: int,
    io_properties: Mapping[str, str],
    *,
    key_field_ids: Sequence[int] | None = None,
    files_per_task: int = 0,
    shard_tasks: int = 0,
) -> tuple[str, ShardManifest]:
    """Rebuild the index of ``metadata``'s current snapshot as ``shard_count`` shards on
    ``spark``'s executors; returns the shard manifest's location and the manifest.

    ``files_per_task``: data files a stage-1 task reads (default: spread over two tasks
    per core); ``shard_tasks``: stage-2 tasks (default: two per core, at most one per
    shard). A task costs tens of milliseconds of scheduling and IPC however little it
    does, so the shard count (a storage layout) does not set the task count."""
    ids, types = key_spec(metadata, key_field_ids)
    live = scan.live_files(io, metadata, metadata.current_snapshot)
    written = rebuild_shards(
        spark,
        io,
        metadata,
        metadata.current_snapshot_id,
        shard_count,
        io_properties,
        key_field_ids=key_field_ids,
        files_per_task=files_per_task,
        shard_tasks=shard_tasks,
    )
    manifest = ShardManifest(
        metadata.table_uuid,
        metadata.current_snapshot_id,
        ids,
        types,
        shard_count,
        tuple((p, live.data[p].data_file.record_count) for p in sorted(live.data)),
        tuple(written),
    )
    return write_manifest(io, manifest, metadata.location), manifest


def rebuild_shards(
    spark: Any,
    io: FileIO,
    metadata: TableMetadata,
    snapshot_id: int | None,
    shard_count: int,
    io_properties: Mapping[str, str],
    *,
    only: Sequence[int] = (),
    key_field_ids: Sequence[int] | None = None,
    files_per_task: int = 0,
    shard_tasks: int = 0,
) -> list[ShardFile]:
    """The base files of shards ``only`` (all when empty) of snapshot ``snapshot_id``
    of the table, written by Spark tasks from its data files; in shard order."""
    check_shard_count(shard_count, "shard_count")
    ids, types = key_spec(metadata, key_field_ids)
    snapshot = None if snapshot_id is None else metadata.snapshot_by_id(snapshot_id)
    if snapshot_id is not None and snapshot is None:
        raise IndexRebuildError(f"snapshot {snapshot_id} is not in the table's history")
    live = scan.live_files(io, metadata, snapshot)
    paths = sorted(live.data)
    tasks = [
        FileTask(live.data[p].data_file, dv.data_file if (dv := live.dvs.get(p)) else None)
        for p in paths
    ]
    job = RebuildJob(
        metadata.location,
        metadata.table_uuid,
        snapshot_id,
        ids,
        types,
        shard_count,
        dict(io_properties),
        frozenset(int(s) for s in only),
    )
    wanted = sorted(job.only) if job.only else list(range(shard_count))
    sc = spark.sparkContext
    cores = max(1, int(sc.defaultParallelism))
    if files_per_task > 0:
        slices = max(1, -(-len(tasks) // files_per_task))
    else:
        slices = max(1, min(len(tasks), 2 * cores))
    reducers = min(shard_count, shard_tasks if shard_tasks > 0 else 2 * cores)
    # No job group of its own: inside foreachBatch the job stays in the streaming
    # query's group, so stopping the query cancels it.
    described = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription(f"calving index rebuild: {len(tasks)} file(s), {len(wanted)} shard(s)")
    try:
        written: list[ShardFile] = (
            sc.parallelize(tasks, slices)
            .mapPartitions(at_task_end(partial(keys_by_shard, job)))
            .partitionBy(reducers, _TaskOfShard(reducers))
            .mapPartitionsWithIndex(at_task_end(partial(write_shards, job, reducers)))
            .collect()
        )
    except Exception as err:  # noqa: BLE001 -- py4j wraps every Spark job failure
        text = " ".join(str(err).split())[:300] or type(err).__name__
        raise IndexRebuildError(f"index rebuild job failed: {text}") from None
    finally:
        sc.setLocalProperty("spark.job.description", described)
    written.sort(key=lambda s: s.shard)
    if [s.shard for s in written] != wanted:
        raise IndexRebuildError(
            f"index rebuild returned shards {[s.shard for s in written]}, wanted {wanted}"
        )
    return written


# ---------------------------------------------------------------- the driver index


#: Rows per shard the executors' rebuild aims at (a shard is one task's sort).
ROWS_PER_SHARD = 2_000_000


def shards_for(rows: int, cores: int) -> int:
    """A power of two: at least two shards per core, at most ``ROWS_PER_SHARD`` rows
    each."""
    want = max(2 * cores, -(-rows // ROWS_PER_SHARD), 1)
    return 1 << (want - 1).bit_length()


class _Counter:
    executor_rebuilds = 0


def executor_rebuilds() -> int:
    """Rebuilds of a driver index that ran on the executors in this process."""
    return _Counter.executor_rebuilds


@dataclass
class ExecutorRebuild:
    """A ``store.Rebuild`` for the driver-resident index: on the executors of ``spark``
    when the snapshot holds at least ``calving.index.executor-rebuild-rows`` live rows
    (the shards are merged on the driver, then deleted), else ``build_from_table`` on
    the driver (a Spark job costs seconds a small table does not need). A failed
    Spark job falls back to the driver, logged as one warning."""

    spark: Any
    io_properties: Mapping[str, str]

    def __call__(
        self, io: FileIO, metadata: TableMetadata, key_field_ids: Sequence[int] | None
    ) -> PrimaryKeyIndex:
        rows = live_rows(metadata.current_snapshot) or 0
        if rows < TableProperties(metadata.properties).index_executor_rebuild_rows:
            return build_from_table(io, metadata, key_field_ids)
        cores = max(1, int(self.spark.sparkContext.defaultParallelism))
        shards = shards_for(rows, cores)
        started = time.monotonic()
        try:
            location, manifest = rebuild_sharded(
                self.spark, io, metadata, shards, self.io_properties, key_field_ids=key_field_ids
            )
            index = load_sharded(io, location, metadata, key_field_ids)
        except CalvingError as err:
            log.warning("index rebuild on the executors failed, rebuilding on the driver: %s", err)
            return build_from_table(io, metadata, key_field_ids)
        for shard in manifest.shards:
            _delete_quietly(io, shard.location)
        _delete_quietly(io, location)
        _Counter.executor_rebuilds += 1
        log.info(
            "primary-key index rebuilt on the executors: %d keys in %d shards, %.1fs",
            manifest.entries,
            shards,
            time.monotonic() - started,
        )
        return index


def _delete_quietly(io: FileIO, location: str) -> None:
    try:
        io.delete(location)
    except (CalvingError, OSError) as err:  # an orphan for maintenance, not a failure
        log.info("could not delete %s: %s", location, err)
