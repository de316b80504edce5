"""The driver's side of a sharded primary-key index: a manifest, never a key.

``ShardedIndex`` holds the shard manifest of the table's last known snapshot (a few
hundred bytes a shard plus the live files' names). For each keyed batch it splits the
batch's keys and new rows by shard, hands the touched shards to a ``ShardResolver``
(Spark tasks, ``shard_lookup``), and turns what they return into the deletion vectors
and the key matches the commit needs. After the commit it writes the next manifest,
naming the chains the tasks wrote, and the next commit names that manifest in the
table property ``calving.index.location`` (the same swap as the rest of that commit).

Why the next commit: a manifest describes one snapshot, and a batch's commit may retry
onto a snapshot another writer made after the keys were resolved. The tasks resolved
on snapshot ``C``; if the commit lands with parent ``C``, their chains are exactly the
new snapshot's and the manifest is written; if it lands elsewhere, the chains are
dropped and the next batch catches every shard up from the manifest it has (``C``'s
or older) through the commits since, as it does after any other writer's commit. A
restart does the same from the manifest the table names: at most the last commit's
changes are read again.

A new ``calving.index.shards`` splits or merges the held shards' files into that
many (``reshard``: the groups run on the executors, or in the driver below the
rebuild threshold), reading no data file; shards that cannot be read that way are
rebuilt.

The manifest's shards must hold, together, the snapshot's live rows (record counts
minus deletion-vector cardinalities); a manifest that does not is never written: the
next batch rebuilds every shard, by ``rebuild`` (the Spark tasks of
``calving.ingest.sink.index_rebuild``) or on the driver when none is given.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa
from pyroaring import BitMap64

from calving.commit import faults
from calving.commit.errors import CalvingError, FileNotFoundInTableError
from calving.commit.index.index_file import UnreadableIndexError
from calving.commit.index.keys import KeyCodec
from calving.commit.index.matches import Matches
from calving.commit.index.reshard import Reshard, reshard_here, resharded
from calving.commit.index.shard_batch import BatchKeys, merge_results
from calving.commit.index.shard_chain import ShardDiff
from calving.commit.index.shard_lookup import (
    DRIVER_SHARD_ENTRIES,
    ShardJob,
    ShardResolver,
    ShardResult,
)
from calving.commit.index.shard_rebuild import build_shards
from calving.commit.index.shards import (
    ShardFile,
    ShardManifest,
    check_shard_count,
    read_manifest,
    split_index,
    write_manifest,
)
from calving.commit.index.snapshot_diff import diff_snapshots
from calving.commit.index.store import (
    INDEX_LOCATION_PROPERTY,
    IndexMismatchError,
    count_full_rebuild,
    key_spec,
    open_index,
)
from calving.commit.index.task_steps import PlacedSteps, merge_task_steps
from calving.commit.io import FileIO
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.properties import INDEX_WORKER_CACHE_BYTES, TableProperties
from calving.commit.table import scan
from calving.commit.table.summary import live_rows

log = logging.getLogger(__name__)

#: (io, metadata, snapshot id, shard count, shards) -> the shards' new base files, in
#: shard order, read from that snapshot's data files (all shards when none are named).
ShardRebuild = Callable[[FileIO, TableMetadata, int | None, int, Sequence[int]], list[ShardFile]]

MANIFEST_SUFFIX = ".calvshards"
#: ``calving.index.shard-steps = auto``: from this many entries in all (about 0.5 GiB
#: of long keys, half a worker's default shard cache) a batch's steps run on the
#: shards' owners, each worker keeping its share, not in the write tasks, which keep
#: every shard in every worker. It scales with ``calving.index.worker-cache-bytes``
#: (``owner_step_entries``).
OWNER_STEP_ENTRIES = 32_000_000


def owner_step_entries(worker_cache_bytes: int) -> int:
    """``OWNER_STEP_ENTRIES`` for a worker shard cache of ``worker_cache_bytes``: the
    same share of it."""
    return OWNER_STEP_ENTRIES * worker_cache_bytes // INDEX_WORKER_CACHE_BYTES.default


def names_shards(metadata: TableMetadata) -> bool:
    """The table's index property names a shard manifest (not a driver index file)."""
    return metadata.properties.get(INDEX_LOCATION_PROPERTY, "").endswith(MANIFEST_SUFFIX)


@dataclass(frozen=True)
class Resolved:
    """A batch's stage 2: what the commit deletes, and what the tasks wrote."""

    snapshot_id: int | None  # the snapshot the keys were resolved on
    matches: Matches  # by the batch's key rows (``_touched_keys`` order)
    results: tuple[ShardResult, ...]
    #: Steps that found their shard (or an earlier state of it) in their worker's cache.
    cache_hits: int
    #: Resolved by the write tasks: the longest task's steps, in seconds (else 0).
    task_seconds: float = 0.0
    #: Shard steps the batch took (a write task's step of a shard is one; several
    #: tasks may step one shard), when not one a result.
    step_count: int | None = None

    @property
    def steps(self) -> int:
        """Shard steps the batch took."""
        return len(self.results) if self.step_count is None else self.step_count

    @property
    def shards_read(self) -> int:
        """Steps that read their shard from storage (no state of it cached)."""
        return self.steps - self.cache_hits

    def deletes(self) -> dict[str, BitMap64]:
        return self.matches.deletes()


@dataclass
class ShardedIndex:
    """A keyed table's sharded index, as the driver holds it (see the module)."""

    io: FileIO
    resolver: ShardResolver
    rebuild: ShardRebuild | None = None
    #: Shards of a new index (0: the table property, else 2 a core for 2M keys each).
    shard_count: int = 0
    io_properties: dict[str, str] = field(default_factory=dict)
    manifest: ShardManifest | None = None
    location: str | None = None  # the manifest's file
    rebuilds: int = 0
    #: Wall seconds the full rebuilds took.
    rebuild_seconds: float = 0.0
    #: Splits or merges of the shards into a new count (``calving.index.shards``),
    #: on the executors or, when None, in this process (``reshard.reshard_here``).
    reshard: Reshard | None = None
    reshards: int = 0
    reshard_seconds: float = 0.0
    #: Batches whose keys the write tasks resolved (``task_steps``), and their steps
    #: that found the shard as the task's read-ahead left it.
    in_tasks: int = 0
    read_ahead: int = 0
    #: Keys the last batch looked up (a small batch on small shards steps in the driver;
    #: None before the first batch, whose size is not known: its write tasks step).
    last_keys: int | None = None
    #: Write tasks whose steps resolved the last batch (0: the separate stage did).
    last_tasks: int = 0
    #: Those tasks' partitions, where known (the next batch's rebase owners).
    last_partitions: tuple[int, ...] = ()
    #: Bases the write tasks' rebases wrote, each with the chain whose rows it holds
    #: (``ShardJob.rebased``: a worker that cached that chain uses it).
    rebased: dict[str, tuple[str, ...]] = field(default_factory=dict)

    # ------------------------------------------------------------ opening

    def open(self, metadata: TableMetadata) -> ShardManifest:
        """The manifest to resolve on: the one held, else the one the table names, else
        the driver index split into shards (the switch), else a rebuild."""
        if self.manifest is not None and self.manifest.table_uuid == metadata.table_uuid:
            return self.manifest
        named = metadata.properties.get(INDEX_LOCATION_PROPERTY)
        if named and names_shards(metadata):
            try:
                manifest = read_manifest(self.io, named)
                self._check(manifest, metadata, named)
            except (UnreadableIndexError, FileNotFoundInTableError, IndexMismatchError) as err:
                log.warning("index shards not used, rebuilding them: %s", err)
                return self.rebuild_all(metadata)
            wanted = TableProperties(metadata.properties).index_shards
            if not wanted or wanted == manifest.shard_count:
                return self._hold(manifest, named)
            try:
                return self.reshard_to(metadata, manifest, wanted)
            except CalvingError as err:  # a shard did not load, or the executors' job failed
                log.warning("index shards not resharded, rebuilding them: %s", err)
                return self.rebuild_all(metadata)
        elif named and metadata.current_snapshot_id is not None:
            # Driver mode before: its index (caught up, or rebuilt) split into shards.
            index = open_index(self.io, metadata)
            location, manifest = split_index(
                self.io, index, metadata.location, self._shards(metadata)
            )
            log.info("primary-key index switched to %d shards", manifest.shard_count)
            return self._hold(manifest, location)
        return self.rebuild_all(metadata)

    def reshard_to(
        self, metadata: TableMetadata, manifest: ShardManifest, shard_count: int
    ) -> ShardManifest:
        """``manifest``'s index split or merged into ``shard_count`` shards, from its
        shards' files (``reshard``): the same snapshot, no data file read."""
        started = time.perf_counter()
        written = (self.reshard or reshard_here)(self.io, metadata, manifest, shard_count)
        new = resharded(manifest, shard_count, written)
        self.reshards += 1
        self.reshard_seconds += time.perf_counter() - started
        log.info(
            "primary-key index resharded from %d to %d shards in %.2fs (%d entries)",
            manifest.shard_count,
            shard_count,
            time.perf_counter() - started,
            new.entries,
        )
        location = write_manifest(self.io, new, metadata.location)
        faults.hit("after-reshard")
        return self._hold(new, location)

    def rebuild_all(self, metadata: TableMetadata) -> ShardManifest:
        """Every shard rebuilt from the current snapshot's data files."""
        count = self._shards(metadata)
        snapshot = metadata.current_snapshot_id
        if snapshot is not None:
            count_full_rebuild()
            self.rebuilds += 1
        rebuild = self.rebuild if self.rebuild is not None and snapshot is not None else None
        started = time.perf_counter()
        written = (rebuild or build_shards)(self.io, metadata, snapshot, count, ())
        self.rebuild_seconds += time.perf_counter() - started
        ids, types = key_spec(metadata)
        live = scan.live_files(self.io, metadata, metadata.current_snapshot)
        manifest = ShardManifest(
            metadata.table_uuid,
            snapshot,
            ids,
            types,
            count,
            tuple(sorted((p, e.data_file.record_count) for p, e in live.data.items())),
            tuple(written),
        )
        return self._hold(manifest, write_manifest(self.io, manifest, metadata.location))

    def repair(
        self, metadata: TableMetadata, manifest: ShardManifest, bad: Sequence[ShardResult]
    ) -> ShardManifest:
        """The shards that could not be read, rebuilt alone at the manifest's snapshot
        (every shard, when that snapshot is gone from history)."""
        for r in bad:
            log.warning("index shard %d not used, rebuilding it: %s", r.chain.shard, r.unreadable)
        snapshot = manifest.snapshot_id
        if snapshot is not None and metadata.snapshot_by_id(snapshot) is None:
            return self.rebuild_all(metadata)
        only = sorted({r.chain.shard for r in bad})
        rebuild = self.rebuild if self.rebuild is not None and snapshot is not None else None
        written = (rebuild or build_shards)(self.io, metadata, snapshot, manifest.shard_count, only)
        self.rebuilds += 1
        shards = list(manifest.shards)
        for f in written:
            shards[f.shard] = f
        kept = {f for s in shards for f in (s.location, *s.deltas)}
        repaired = replace(
            manifest,
            shards=tuple(shards),
            aliases=tuple(a for a in manifest.aliases if a[0] in kept),
        )
        return self._hold(repaired, write_manifest(self.io, repaired, metadata.location))

    def _shards(self, metadata: TableMetadata) -> int:
        chosen = TableProperties(metadata.properties).index_shards or self.shard_count
        return check_shard_count(chosen or 16, "calving.index.shards")

    def _check(self, manifest: ShardManifest, metadata: TableMetadata, location: str) -> None:
        ids, types = key_spec(metadata)
        if (manifest.table_uuid, manifest.key_field_ids) != (metadata.table_uuid, ids):
            raise IndexMismatchError(
                f"{location}: shards of table {manifest.table_uuid} key "
                f"{manifest.key_field_ids}, wanted {metadata.table_uuid} key {ids}"
            )
        if KeyCodec(manifest.key_types).encoding_class() != KeyCodec(types).encoding_class():
            raise IndexMismatchError(f"{location}: the key types changed")

    def _follow_key_types(self, metadata: TableMetadata, manifest: ShardManifest) -> ShardManifest:
        """The manifest with the table's key types, after a schema change that keeps
        every key's encoding (int -> long); another change is a rebuild."""
        _, types = key_spec(metadata)
        if types == manifest.key_types:
            return manifest
        if KeyCodec(types).encoding_class() != KeyCodec(manifest.key_types).encoding_class():
            log.info("index shards: the key types changed, rebuilding them")
            return self.rebuild_all(metadata)
        self.manifest = replace(manifest, key_types=types)
        return self.manifest

    def _hold(self, manifest: ShardManifest, location: str) -> ShardManifest:
        self.manifest, self.location = manifest, location
        return manifest

    def drop(self) -> None:
        self.manifest = self.location = None

    # ------------------------------------------------------------ a batch

    def task_job(self, metadata: TableMetadata, max_deltas: int) -> ShardJob | None:
        """The job a batch's write tasks step their shards with (``task_steps``), or
        None when the batch's keys go to the separate stage: other writers' commits to
        catch up, steps on the shards' owners (``on_owners``), or a table whose shards
        are small after a small batch (those steps are cheaper in the driver). The
        tasks rebase a chain once it holds ``max_deltas`` batches' deltas (each write
        task of a batch adds one: the last batch's count of tasks stands for the
        next's)."""
        manifest = self._follow_key_types(metadata, self.open(metadata))
        if self.location is None or manifest.snapshot_id != metadata.current_snapshot_id:
            return None
        if self.on_owners(metadata, manifest):
            return None
        tasks = max(1, self.last_tasks)
        due = frozenset(
            s.shard for s in manifest.shards if len(s.deltas) + tasks > max_deltas * tasks
        )
        # One task writes a due base (shard s: the last batch's s % n-th task), not
        # every task stepping it; a chain still long at twice the count (that task
        # did not step it) is written by every task.
        owners = self.last_partitions
        overdue = {s.shard for s in manifest.shards if len(s.deltas) >= 2 * max_deltas * tasks}
        rebase_owners = {s: owners[s % len(owners)] for s in sorted(due - overdue) if owners}
        props = TableProperties(metadata.properties)
        small = props.index_driver_step_keys
        last = self.last_keys  # None: the first batch, of unknown size, steps in its tasks
        if (
            small
            and last is not None
            and last <= small
            and manifest.entries <= DRIVER_SHARD_ENTRIES
        ):
            return None
        return ShardJob(
            metadata.location,
            manifest,
            metadata.current_snapshot_id,
            None,
            self.io_properties,
            max_deltas=max_deltas,
            cache_bytes=props.index_worker_cache_bytes,
            in_task=True,
            manifest_location=self.location,
            rebase=due,
            rebase_owners=rebase_owners,
            rebased=self.rebased,
        )

    def on_owners(self, metadata: TableMetadata, manifest: ShardManifest) -> bool:
        """Whether the batch's steps run on the shards' owners (the separate stage,
        pinned: ``calving.index.shard-steps``), not in its write tasks: asked for, or
        ``auto`` on an index of ``owner_step_entries`` entries; and the resolver pins
        steps to at least two processes (else the write tasks are as good a place)."""
        props = TableProperties(metadata.properties)
        choice = props.index_shard_steps
        large = manifest.entries >= owner_step_entries(props.index_worker_cache_bytes)
        if choice == "write-tasks" or (choice == "auto" and not large):
            return False
        return self.resolver.owners() > 1

    def from_tasks(
        self,
        metadata: TableMetadata,
        placed: Sequence[PlacedSteps],
        file_rows: int,
        delete_rows: int,
    ) -> Resolved | None:
        """The batch resolved by its write tasks' steps, or None (none ran, or they do
        not make the batch's: the caller runs ``resolve``)."""
        manifest, location = self.manifest, self.location
        if not placed or manifest is None or location is None:
            return None
        if manifest.snapshot_id != metadata.current_snapshot_id:
            return None
        merged = merge_task_steps(manifest, location, placed, file_rows, delete_rows)
        if isinstance(merged, str):
            log.info("index shards: the write tasks' steps not used (%s)", merged)
            return None
        self.in_tasks += 1
        self.read_ahead += sum(p.steps.read_ahead for p in placed)
        self.last_keys = file_rows + delete_rows
        self.last_tasks = len(placed)
        tasks = [p.steps.task for p in placed]
        self.last_partitions = tuple(sorted({t for t in tasks if t is not None}))
        bases = {r.chain.location for r in merged.results} | {s.location for s in manifest.shards}
        self.rebased = {b: c for b, c in self.rebased.items() if b in bases} | merged.rebased
        for spare in merged.spare:  # named by no chain
            try:
                self.io.delete(spare)
            except (CalvingError, OSError) as err:
                log.info("could not delete %s: %s", spare, err)
        return Resolved(
            metadata.current_snapshot_id,
            merged.matches,
            merged.results,
            merged.cache_hits,
            max(p.steps.seconds for p in placed),
            sum(len(p.steps.chains) for p in placed),
        )

    def resolve(
        self,
        metadata: TableMetadata,
        keys: pa.Table | None,
        files: Sequence[tuple[DataFile, pa.Table | None]],
        max_deltas: int,
    ) -> Resolved:
        """Stage 2 for a batch on ``metadata``'s current snapshot: ``keys`` (every key
        the batch upserts or deletes) resolved to live rows by the shard tasks, which
        also record the keys of the batch's new ``files`` (row ``i`` at position ``i``).
        A shard the tasks cannot read is rebuilt alone and the stage runs again."""
        for attempt in range(2):
            manifest = self._follow_key_types(metadata, self.open(metadata))
            catch_up = self._catch_up(metadata, manifest)
            if catch_up is None and manifest.snapshot_id != metadata.current_snapshot_id:
                manifest = self.rebuild_all(metadata)
            batch = BatchKeys.of(manifest, keys, files)
            self.last_keys = batch.count
            results = self._stage(metadata, manifest, catch_up, batch, max_deltas)
            bad = [r for r in results if r.unreadable]
            if not bad:
                matches = merge_results(results, batch.rows_of(manifest, catch_up), batch.count)
                return Resolved(
                    metadata.current_snapshot_id,
                    matches,
                    results,
                    sum(r.cache_hit for r in results),
                )
            if attempt:
                raise UnreadableIndexError(bad[0].chain.location, bad[0].unreadable)
            self.repair(metadata, manifest, bad)
        raise AssertionError("unreachable")

    def _stage(
        self,
        metadata: TableMetadata,
        manifest: ShardManifest,
        catch_up: ShardDiff | None,
        batch: BatchKeys,
        max_deltas: int,
    ) -> tuple[ShardResult, ...]:
        requests = batch.requests(manifest, catch_up)
        if not requests:
            return ()
        props = TableProperties(metadata.properties)
        job = ShardJob(
            metadata.location,
            manifest,
            metadata.current_snapshot_id,
            catch_up,
            self.io_properties,
            max_deltas=max_deltas,
            cache_bytes=props.index_worker_cache_bytes,
            driver_step_keys=props.index_driver_step_keys,
            rebased=self.rebased,
        )
        return tuple(self.resolver(job, requests))

    def _catch_up(self, metadata: TableMetadata, manifest: ShardManifest) -> ShardDiff | None:
        """Other commits since the manifest's snapshot, or None (none, or the
        manifest's snapshot is gone from history: a rebuild)."""
        if manifest.snapshot_id == metadata.current_snapshot_id:
            return None
        old = None
        if manifest.snapshot_id is not None:
            old = metadata.snapshot_by_id(manifest.snapshot_id)
            if old is None:
                log.info("index shards: snapshot %s is gone, rebuilding", manifest.snapshot_id)
                return None
        diff = diff_snapshots(
            self.io,
            scan.live_files(self.io, metadata, old),
            scan.live_files(self.io, metadata, metadata.current_snapshot),
        )
        return ShardDiff.of(diff, manifest.snapshot_id, metadata.current_snapshot_id)

    def committed(
        self,
        metadata: TableMetadata,
        resolved: Resolved,
        renamed: Mapping[str, str] | None = None,
    ) -> str | None:
        """After the batch's commit (``metadata``): the manifest of the new snapshot,
        written when the commit sits on the snapshot the keys were resolved on (else
        the chains are dropped and the next batch catches up). ``renamed``: new data
        files the commit holds under another path (row-lineage copies), old -> new.
        Returns the manifest's location."""
        manifest = self.manifest
        snapshot = metadata.current_snapshot
        if manifest is None or snapshot is None:
            return None
        if snapshot.parent_snapshot_id != resolved.snapshot_id:
            log.info(
                "batch committed on snapshot %s, not %s: the index shards catch up next batch",
                snapshot.parent_snapshot_id,
                resolved.snapshot_id,
            )
            return None
        shards = list(manifest.shards)
        for r in resolved.results:
            shards[r.chain.shard] = r.chain
        live = scan.live_files(self.io, metadata, snapshot)
        rows = sum(e.data_file.record_count for e in live.data.values())
        rows -= sum(e.data_file.record_count for e in live.dvs.values())
        entries = sum(s.entries for s in shards)
        if entries != rows:
            log.warning(
                "index shards hold %d entries, snapshot %d has %d live rows: rebuilding them",
                entries,
                snapshot.snapshot_id,
                rows,
            )
            self.drop()
            return None
        new = replace(
            manifest,
            snapshot_id=snapshot.snapshot_id,
            files=tuple(sorted((p, e.data_file.record_count) for p, e in live.data.items())),
            shards=tuple(shards),
            aliases=_aliases(manifest.aliases, resolved.results, renamed or {}, shards),
        )
        location = write_manifest(self.io, new, metadata.location)
        self._hold(new, location)
        return location

    def naming(self, metadata: TableMetadata) -> dict[str, str]:
        """The property update naming the held manifest, when the table does not yet."""
        if self.location and metadata.properties.get(INDEX_LOCATION_PROPERTY) != self.location:
            return {INDEX_LOCATION_PROPERTY: self.location}
        return {}


def _aliases(
    held: Sequence[tuple[str, str, str]],
    results: Sequence[ShardResult],
    renamed: Mapping[str, str],
    shards: Sequence[ShardFile],
) -> tuple[tuple[str, str, str], ...]:
    """The aliases a manifest keeps: this commit's renames, under the file each changed
    chain ends with, and the earlier ones whose chain file is still in a chain."""
    chained = {f for s in shards for f in (s.location, *s.deltas)}
    kept = [a for a in held if a[0] in chained]
    for r in results:
        tail = r.chain.deltas[-1] if r.chain.deltas else r.chain.location
        kept += [(tail, old, renamed[old]) for old in r.added if old in renamed]
    return tuple(dict.fromkeys(kept))


def choose_mode(metadata: TableMetadata) -> str:
    """``driver`` or ``sharded`` for a keyed table, by ``calving.index.mode``: ``auto``
    keeps an index that is sharded sharded, and shards one once the table holds
    ``calving.index.sharded-rows`` live rows."""
    props = TableProperties(metadata.properties)
    mode = props.index_mode
    if mode != "auto":
        return mode
    if names_shards(metadata):
        return "sharded"
    rows = live_rows(metadata.current_snapshot) or 0
    return "sharded" if rows >= props.index_sharded_rows else "driver"
