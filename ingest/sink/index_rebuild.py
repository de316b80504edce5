"""The primary-key index rebuilt by Spark tasks, as shards, never by the driver reading
the table.

Two Spark jobs, the second reading what the first wrote (no Spark shuffle: a cold
executor's first shuffle cost about a second, the pieces' round trip through it as
pickles more):

1. **Groups of data files** (``files_per_task``, default: two groups a core; Spark
   runs at most one task a core, ``spark_tasks.run_tasks``). Each group's step reads its files' key columns (``store.live_keys``: the rows the
   file's deletion vector leaves live), encodes and hashes the keys, and writes one
   *piece file* a shard: the entries of its files whose keys fall in the shard, in
   the index file format (checksummed), named by this rebuild, beside the shards.
   Only keys leave the task, never rows; it returns ``PieceFile`` values.
2. **Groups of shards** (shard ``s`` goes to group ``s % groups``, two groups a core by
   default). For each of its shards a group's step reads the shard's piece files, sorts their
   entries by hash and writes the shard's file (``commit.index.shards.write_shard``);
   an empty shard gets an empty file, so a manifest always names every shard.

The driver reads only manifests (the live files and their DVs' locations), hands the
piece files to the second job, writes the shard manifest naming what its tasks
returned, and deletes the piece files (after a failure too). Messages between driver
and tasks are frozen dataclasses, pickled by ``spark_tasks`` (one encoder, one decoder).

A table of at most ``ONE_JOB_ROWS`` live rows (4M) in at most ``ONE_JOB_FILES`` data
files (32) is rebuilt by one job instead: shard
``s`` goes to task ``s % cores``, and each task reads every file's key column, keeps
the keys of its shards and writes their files (``shards_from_files``). It reads the
keys once a core rather than once, and saves a job and the piece files: at the start
of a stream, on executors just started, the second job cost more than the reads (a
2M-key rebuild there: a median of 1.9 s in one job, of 3.3 s in two).

``rebuild_sharded`` returns the manifest; ``commit.index.shards.load_sharded`` merges
its shards into a driver index.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from calving.commit.errors import CalvingError
from calving.commit.index.index_file import (
    Compression,
    IndexHeader,
    UnreadableIndexError,
    read_entries,
    read_index_table,
    write_entries,
)
from calving.commit.index.keys import DEFAULT_HASHER, KeyCodec, Keys, concat_keys
from calving.commit.index.pk_index import PrimaryKeyIndex
from calving.commit.index.rebuild_place import driver_rebuild_rows
from calving.commit.index.shard_chain import shard_index
from calving.commit.index.shard_lookup import CACHE
from calving.commit.index.shards import (
    SHARDS_DIRECTORY,
    ShardFile,
    ShardHeader,
    ShardManifest,
    check_shard_count,
    load_sharded,
    shard_metadata,
    shard_of,
    write_manifest,
    write_shard,
)
from calving.commit.index.store import build_from_table, key_spec, live_keys
from calving.commit.io import LOCAL_FSYNC, FileIO
from calving.commit.io_sync import synced_together
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.types import PrimitiveType
from calving.commit.table import scan
from calving.commit.table.summary import live_rows
from calving.ingest.sink import spark_tasks

log = logging.getLogger(__name__)

#: Live rows up to which a rebuild is one Spark job, each task reading every file
#: (``shards_from_files``): a second job and the piece files cost more, on executors
#: just started, than reading a few million keys once a core.
ONE_JOB_ROWS = 4_000_000
#: ... and data files up to which (a task opens every file: many small ones, as a
#: stream leaves before compaction, cost more opened once a core than split).
ONE_JOB_FILES = 32


class IndexRebuildError(CalvingError):
    """The Spark job rebuilding the index failed (its message names the cause)."""


@dataclass(frozen=True)
class RebuildJob:
    """What every task of one rebuild needs (``only``: the shards to write, all when
    empty; ``exchange``: the prefix of its piece files' names)."""

    table_location: str
    table_uuid: str
    snapshot_id: int | None
    key_field_ids: tuple[int, ...]
    key_types: tuple[PrimitiveType, ...]
    shard_count: int
    io_properties: Mapping[str, str]
    only: frozenset[int] = frozenset()
    exchange: str = ""
    #: Sharded mode: each stage-2 task keeps the shards it wrote in its Python worker's
    #: cache (``shard_lookup.CACHE``, up to this many bytes), where the batch's write
    #: tasks, run by the same workers, find them (0: not kept).
    cache_bytes: int = 0

    def wants(self, shard: int) -> bool:
        return not self.only or shard in self.only

    def header(self, shard: int) -> ShardHeader:
        return ShardHeader(
            self.table_uuid,
            self.snapshot_id,
            self.key_field_ids,
            self.key_types,
            shard,
            self.shard_count,
        )


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


@dataclass(frozen=True)
class PieceFile:
    """A stage-1 task's entries of one shard, written to ``location``."""

    shard: int
    location: str
    entries: int


@dataclass(frozen=True)
class _Entries:
    """Entries over a file table: entry ``i`` is key ``keys[i]`` at ``positions[i]``
    of ``files[file_index[i]]``."""

    files: tuple[tuple[str, int], ...]
    keys: Keys
    file_index: np.ndarray  # uint32
    positions: np.ndarray  # uint32

    @staticmethod
    def merged(parts: Sequence[_Entries], int_mode: bool) -> _Entries:
        files = tuple(sorted({f for p in parts for f in p.files}))
        ids = {path: i for i, (path, _) in enumerate(files)}
        remapped = [
            np.array([ids[path] for path, _ in p.files], np.uint32)[p.file_index]
            if len(p.files)
            else np.empty(0, np.uint32)
            for p in parts
        ]
        return _Entries(
            files,
            concat_keys([p.keys for p in parts], int_mode),
            np.concatenate(remapped or [np.empty(0, np.uint32)]),
            np.concatenate([p.positions for p in parts] or [np.empty(0, np.uint32)]),
        )


def _of_pieces(pieces: Sequence[ShardPiece], int_mode: bool) -> _Entries:
    parts = [
        _Entries(
            ((p.path, p.row_count),),
            p.keys,
            np.zeros(len(p.positions), np.uint32),
            np.asarray(p.positions, np.uint32),
        )
        for p in pieces
    ]
    return _Entries.merged(parts, int_mode)


def keys_by_shard(job: RebuildJob, tasks: Iterable[FileTask]) -> Iterator[tuple[int, ShardPiece]]:
    """The live keys of each file of ``tasks``, as (shard, piece) per shard."""
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


def write_pieces(job: RebuildJob, partition: int, tasks: Iterable[FileTask]) -> Iterator[PieceFile]:
    """Stage 1 (executor): one piece file a shard the task's files have keys in.

    Piece files are scratch: stage 2 reads them in the same rebuild, which a crash
    restarts from the data files (its leftovers deleted by the rebuild's name), so a
    local piece is not fsynced (a task wrote one a shard, each with two disk waits)."""
    by_shard: dict[int, list[ShardPiece]] = {}
    for shard, piece in keys_by_shard(job, tasks):
        by_shard.setdefault(shard, []).append(piece)
    io = FileIO({**job.io_properties, LOCAL_FSYNC: "false"})
    int_mode = _int_mode(job)
    for shard, pieces in sorted(by_shard.items()):
        e = _of_pieces(pieces, int_mode)
        location = f"{job.exchange}-s{shard}-t{partition}.calvpiece"
        md = shard_metadata(job.header(shard), e.files)
        write_entries(
            io, location, md, e.keys, e.file_index, e.positions, compression=Compression.TRANSIENT
        )
        yield PieceFile(shard, location, len(e.keys))


def _read_piece(io: FileIO, job: RebuildJob, piece: PieceFile) -> _Entries:
    table = read_index_table(io, piece.location)
    header = IndexHeader.parse(piece.location, table.schema.metadata or {})
    keys, file_index, positions = read_entries(piece.location, table)
    if (header.table_uuid, header.snapshot_id) != (job.table_uuid, job.snapshot_id) or len(
        keys
    ) != piece.entries:
        raise UnreadableIndexError(piece.location, "not the piece file stage 1 wrote")
    return _Entries(tuple(header.files), keys, file_index, positions)


def write_shards(
    job: RebuildJob, groups: Iterable[Sequence[tuple[int, tuple[PieceFile, ...]]]]
) -> list[ShardFile]:
    """Stage 2 (executor): the file of each shard of the task's group, from the
    shard's piece files (an empty shard gets an empty file). The files are made
    durable together, before the list naming them is returned."""
    with synced_together():
        return list(_shard_files(job, groups))


def _shard_files(
    job: RebuildJob, groups: Iterable[Sequence[tuple[int, tuple[PieceFile, ...]]]]
) -> Iterator[ShardFile]:
    io = FileIO(dict(job.io_properties))
    int_mode = _int_mode(job)
    for group in groups:
        for shard, pieces in group:
            e = _Entries.merged([_read_piece(io, job, p) for p in pieces], int_mode)
            yield _write_shard(io, job, shard, e)


def _write_shard(io: FileIO, job: RebuildJob, shard: int, e: _Entries) -> ShardFile:
    """Shard ``shard``'s file of entries ``e``, kept in this worker's cache too when the
    job says so."""
    written = write_shard(
        io, job.table_location, job.header(shard), e.keys, e.file_index, e.positions, e.files
    )
    if job.cache_bytes:
        index = shard_index(job.header(shard), e.keys, e.file_index, e.positions, e.files)
        CACHE.put(written, index, job.cache_bytes)
    return written


def shards_from_files(
    job: RebuildJob, files: Sequence[FileTask], shards: Sequence[int]
) -> list[ShardFile]:
    """A small table's rebuild, in one job (executor): the task reads every live file's
    keys, keeps those that fall in ``shards`` and writes those shards' files, fsynced
    together before the list naming them is returned. No piece files."""
    mine = replace(job, only=frozenset(shards))
    by_shard: dict[int, list[ShardPiece]] = {s: [] for s in shards}
    for shard, piece in keys_by_shard(mine, files):
        by_shard[shard].append(piece)
    io = FileIO(dict(job.io_properties))
    int_mode = _int_mode(job)
    with synced_together():
        return [_write_shard(io, job, s, _of_pieces(by_shard[s], int_mode)) for s in shards]


def _files_group(
    job: RebuildJob, files: Sequence[FileTask], task: int, shards: Sequence[int]
) -> list[ShardFile]:
    return shards_from_files(job, files, shards)


def _write_group(
    job: RebuildJob, task: int, group: Sequence[tuple[int, tuple[PieceFile, ...]]]
) -> list[ShardFile]:
    return write_shards(job, [group])


def _int_mode(job: RebuildJob) -> bool:
    return KeyCodec(job.key_types, job.key_field_ids).int_mode


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
    one_job_rows: int = ONE_JOB_ROWS,
) -> tuple[str, ShardManifest]:
    """Rebuild the index of ``metadata``'s current snapshot as ``shard_count`` shards on
    ``spark``'s executors; returns the shard manifest's location and the manifest.

    ``files_per_task``: data files a stage-1 group reads (default: spread over two
    groups a core); ``shard_tasks``: stage-2 groups (default: two a core, at most one a
    shard); Spark runs the groups in at most one task a core. A task costs tens of milliseconds of scheduling and IPC however little it
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
        one_job_rows=one_job_rows,
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
    cache_bytes: int = 0,
    one_job_rows: int = ONE_JOB_ROWS,
) -> list[ShardFile]:
    """The base files of shards ``only`` (all when empty) of snapshot ``snapshot_id``
    of the table, written by Spark tasks from its data files; in shard order.
    ``cache_bytes``: the tasks keep the shards they wrote cached (``RebuildJob``). A
    table of at most ``one_job_rows`` live rows in at most ``ONE_JOB_FILES`` files is
    rebuilt in one job (``shards_from_files``: each task reads every file), a larger
    one in two."""
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
    exchange = f"{metadata.location.rstrip('/')}/{SHARDS_DIRECTORY}/rebuild-{uuid.uuid4()}"
    job = RebuildJob(
        metadata.location,
        metadata.table_uuid,
        snapshot_id,
        ids,
        types,
        shard_count,
        dict(io_properties),
        frozenset(int(s) for s in only),
        exchange,
        cache_bytes,
    )
    wanted = sorted(job.only) if job.only else list(range(shard_count))
    sc = spark.sparkContext
    cores = max(1, int(sc.defaultParallelism))
    rows = sum(t.data_file.record_count for t in tasks)
    if rows <= one_job_rows and len(tasks) <= ONE_JOB_FILES:
        return _rebuild_in_one_job(spark, job, tasks, wanted, shard_tasks or cores)
    if files_per_task > 0:
        task_count = max(1, -(-len(tasks) // files_per_task))
    else:
        task_count = max(1, min(len(tasks), 2 * cores))
    reducers = min(len(wanted), shard_tasks if shard_tasks > 0 else 2 * cores)
    # No job group of its own: inside foreachBatch the job stays in the streaming
    # query's group, so stopping the query cancels it.
    described = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription(f"calving index rebuild: {len(tasks)} file(s), {len(wanted)} shard(s)")
    pieces: list[PieceFile] = []
    started = time.monotonic()
    try:
        chunks = spark_tasks.slices(tasks, task_count)
        pieces = spark_tasks.run_tasks(spark, partial(write_pieces, job), chunks)
        pieced = time.monotonic()
        groups, where = _by_task(wanted, pieces, reducers, spark_tasks.executors(spark))
        written: list[ShardFile] = spark_tasks.run_tasks(
            spark, partial(_write_group, job), groups, where
        )
        log.info(
            "index rebuild: %d file(s) in %d task(s) %.2fs, %d shard(s) in %d task(s) %.2fs",
            len(tasks),
            len(chunks),
            pieced - started,
            len(wanted),
            len(groups),
            time.monotonic() - pieced,
        )
    except Exception as err:  # noqa: BLE001 -- py4j wraps every Spark job failure
        raise job_failed(err) from None
    finally:
        sc.setLocalProperty("spark.job.description", described)
        delete_piece_files(io, exchange, pieces)
    written.sort(key=lambda s: s.shard)
    if [s.shard for s in written] != wanted:
        raise IndexRebuildError(
            f"index rebuild returned shards {[s.shard for s in written]}, wanted {wanted}"
        )
    return written


def _rebuild_in_one_job(
    spark: Any, job: RebuildJob, tasks: Sequence[FileTask], wanted: Sequence[int], groups: int
) -> list[ShardFile]:
    """``wanted``'s files by one Spark job: shard ``wanted[i]`` in task ``i % groups``,
    each task reading every file (``shards_from_files``)."""
    groups = max(1, min(groups, len(wanted)))
    shard_groups = [list(wanted[i::groups]) for i in range(groups)]
    places = spark_tasks.executors(spark)
    where = None
    if len(places) > 1:  # each shard written, and left cached, on its owner
        owned, where = spark_tasks.pinned_groups(wanted, int, places, groups)
        shard_groups = [g for _, g in owned]
    sc = spark.sparkContext
    described = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription(f"calving index rebuild: {len(tasks)} file(s), {len(wanted)} shard(s)")
    started = time.monotonic()
    try:
        grouped = spark_tasks.run_tasks(
            spark, partial(_files_group, job, tasks), shard_groups, where
        )
    except Exception as err:  # noqa: BLE001 -- py4j wraps every Spark job failure
        raise job_failed(err) from None
    finally:
        sc.setLocalProperty("spark.job.description", described)
    log.info(
        "index rebuild in one job: %d file(s), %d shard(s) in %d task(s) %.2fs",
        len(tasks),
        len(wanted),
        len(shard_groups),
        time.monotonic() - started,
    )
    written: list[ShardFile] = sorted(grouped, key=lambda s: s.shard)
    if [s.shard for s in written] != list(wanted):
        raise IndexRebuildError(
            f"index rebuild returned shards {[s.shard for s in written]}, wanted {wanted}"
        )
    return written


def job_failed(err: Exception, what: str = "index rebuild") -> IndexRebuildError:
    """A failed rebuild (or reshard) job, in one line (py4j's message spans many)."""
    text = " ".join(str(err).split())[:300] or type(err).__name__
    return IndexRebuildError(f"{what} job failed: {text}")


def _by_task(
    wanted: Sequence[int], pieces: Sequence[PieceFile], tasks: int, places: Sequence[str] = ()
) -> tuple[list[list[tuple[int, tuple[PieceFile, ...]]]], list[str] | None]:
    """Stage 2's work: ``wanted[i]`` and its piece files go to task ``i % tasks``, or,
    on two ``places`` or more, to its owner's tasks (``spark_tasks.pinned_groups``:
    each shard written, and left cached, where its steps will run); and the groups'
    places (None: not pinned)."""
    of: dict[int, list[PieceFile]] = {s: [] for s in wanted}
    for piece in pieces:
        if piece.shard not in of:
            raise IndexRebuildError(f"stage 1 wrote a piece of shard {piece.shard}, not wanted")
        of[piece.shard].append(piece)
    work = [(shard, tuple(of[shard])) for shard in wanted]
    if len(places) > 1:
        owned, where = spark_tasks.pinned_groups(work, _first, places, tasks)
        return [g for _, g in owned], where
    groups: list[list[tuple[int, tuple[PieceFile, ...]]]] = [[] for _ in range(max(1, tasks))]
    for i, item in enumerate(work):
        groups[i % len(groups)].append(item)
    return [g for g in groups if g], None


def _first(item: tuple[int, tuple[PieceFile, ...]]) -> int:
    return item[0]


def delete_piece_files(io: FileIO, exchange: str, pieces: Sequence[PieceFile]) -> None:
    """The piece files: those stage 1 returned, or (after a failure) whatever it left."""
    locations = [p.location for p in pieces]
    if not locations:
        try:
            locations = io.list_prefix(exchange + "-")
        except (CalvingError, OSError) as err:
            log.info("could not list %s: %s", exchange, err)
    for location in locations:
        _delete_quietly(io, location)


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
    """A ``store.Rebuild`` for the driver-resident index: ``build_from_table`` on the
    driver for a small snapshot (``rebuild_place.driver_rebuild_rows``), else on the
    executors of ``spark`` (the shards are merged on the driver, then deleted). A
    failed Spark job falls back to the driver, logged as one warning."""

    spark: Any
    io_properties: Mapping[str, str]

    def __call__(
        self, io: FileIO, metadata: TableMetadata, key_field_ids: Sequence[int] | None
    ) -> PrimaryKeyIndex:
        snapshot = metadata.current_snapshot
        if driver_rebuild_rows(metadata.properties, snapshot) is not None:
            return build_from_table(io, metadata, key_field_ids)
        rows = live_rows(snapshot) or 0
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
