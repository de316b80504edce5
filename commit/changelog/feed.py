"""The change feed of a snapshot range, in the vocabulary of Iceberg's Spark changelog
view: every table column, then ``_change_type`` (INSERT, DELETE, UPDATE_BEFORE,
UPDATE_AFTER), ``_change_ordinal`` (the snapshot's place in the range, from 0),
``_commit_snapshot_id`` and ``_row_id``.

Per snapshot of the range (``calving.commit.changelog.delta``): the rows of the data
files it added, less those its own deletion vectors delete, are inserted; the rows its
deletion vectors newly delete (the vector less the one it replaced), and the live rows
of the data files it removed, are deleted. A ``_row_id`` on both sides is the same row:
an UPDATE_BEFORE / UPDATE_AFTER pair when the new row's
``_last_updated_sequence_number`` moved on, and nothing when it did not (the row was
moved unmodified, as compaction does). A ``replace`` snapshot must consist of such
moves only: one that gave rows new ids or changed them is refused.

Work is done per range, not per snapshot: every deletion vector is read once, every
data file once (``calving.commit.changelog.rows``, in parallel), and the pairing is one
join over the whole range. Manifests and vectors on remote storage are read by threads;
local ones in turn (their decoding holds the interpreter, so threads only contend).

``net``: one change per row over the whole range: its state before the range against
its state after it (a row inserted and deleted within the range vanishes; a row
updated and updated back to its old values too), stamped with its last change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap64

from calving.commit.changelog.columns import (
    CHANGE_COLUMNS,
    CHANGE_ORDINAL,
    CHANGE_TYPE,
    COMMIT_SNAPSHOT_ID,
    DELETE,
    INSERT,
    LAST_UPDATED,
    LINEAGE_SCHEMA,
    POSITION,
    ROW_ID,
    UPDATE_AFTER,
    UPDATE_BEFORE,
)
from calving.commit.changelog.delta import FileRef, SnapshotDelta, read_delta
from calving.commit.changelog.net import net_changes
from calving.commit.changelog.range import Bound, ChangeRange, resolve_range
from calving.commit.changelog.rows import read_rows
from calving.commit.errors import ChangeFeedError, SchemaError
from calving.commit.io import LOCAL_SCHEME, FileIO, scheme_of
from calving.commit.spec.arrow import schema_to_arrow
from calving.commit.spec.data_file import DataFile, ManifestContent
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.schema import Schema
from calving.commit.spec.snapshot import Snapshot
from calving.commit.table import scan

_RANKED = pa.array([DELETE, UPDATE_BEFORE, UPDATE_AFTER, INSERT])  # order within a row
_EMPTY = BitMap64()
_READ_THREADS = 8


@dataclass(frozen=True)
class _Item:
    """Rows one snapshot needs from one data file: ``positions`` (None: all of them)
    less ``minus``, as deleted or inserted rows."""

    ordinal: int
    deleted: bool
    ref: FileRef
    positions: BitMap64 | None
    minus: BitMap64 = _EMPTY


class _Directory:
    """Data file path -> its ``FileRef``, for files a snapshot deletes rows of without
    adding or removing them in the range: found in the manifests of that snapshot (or
    its parent), each manifest indexed once."""

    def __init__(self, io: FileIO, metadata: TableMetadata, deltas: Iterable[SnapshotDelta]):
        self.io = io
        self.metadata = metadata
        self.refs: dict[str, FileRef] = {p: r for d in deltas for p, r in d.added.items()}
        self.indexed: set[str] = set()

    def find(self, path: str, snapshot: Snapshot) -> FileRef:
        if path in self.refs:
            return self.refs[path]
        parent = snapshot.parent_snapshot_id
        for snap in (snapshot, self.metadata.snapshot_by_id(parent) if parent else None):
            for mf in scan.manifest_files(self.io, snap):
                if mf.content != ManifestContent.DATA or mf.manifest_path in self.indexed:
                    continue
                self.indexed.add(mf.manifest_path)
                for e in scan.manifest_entries(self.io, self.metadata, mf):
                    if e.data_file.first_row_id is not None and e.sequence_number is not None:
                        self.refs.setdefault(
                            e.data_file.file_path,
                            FileRef(e.data_file, e.data_file.first_row_id, e.sequence_number),
                        )
            if path in self.refs:
                return self.refs[path]
        raise ChangeFeedError(
            f"snapshot {snapshot.snapshot_id} deletes rows of {path}, which no manifest of it "
            "or its parent lists with a first row id"
        )


def _read_dvs(io: FileIO, deltas: Sequence[SnapshotDelta]) -> dict[str, BitMap64]:
    """The positions of every deletion vector the range needs, by Puffin location and
    offset: each one the range added, and the ones it replaced that were there before
    the range (a file's first change in it). One read a Puffin file; remote files in
    parallel."""
    wanted: dict[str, DataFile] = {}
    seen: set[str] = set()
    for d in deltas:
        for target in (*d.new_dvs, *d.removed):
            if target not in seen:
                seen.add(target)
                old = d.old_dvs.get(target)
                if old is not None:
                    wanted[_dv_key(old)] = old
        for dv in d.new_dvs.values():
            wanted[_dv_key(dv)] = dv
    by_file: dict[str, list[DataFile]] = {}
    for dv in wanted.values():
        by_file.setdefault(dv.file_path, []).append(dv)
    groups = list(by_file.values())

    def read(chunk: Sequence[list[DataFile]]) -> list[tuple[str, BitMap64]]:
        return [
            (_dv_key(dv), positions)
            for group in chunk
            for dv, positions in zip(group, scan.read_dvs_of_file(io, group))
        ]

    threads = _threads(g[0].file_path for g in groups)
    share = max(1, -(-len(groups) // threads))  # a share of the files a thread
    chunks = [groups[i : i + share] for i in range(0, len(groups), share)]
    with ThreadPoolExecutor(max(1, len(chunks))) as pool:
        return {key: positions for part in pool.map(read, chunks) for key, positions in part}


def _threads(locations: Iterable[str]) -> int:
    """Threads for reading many small files (manifests, deletion vectors): one for
    local files, whose reads take tens of microseconds and whose decoding holds the
    interpreter (eight threads contending for it took 1.3-3x as long as one), else
    ``_READ_THREADS`` so that remote requests overlap."""
    local = all(scheme_of(location) == LOCAL_SCHEME for location in locations)
    return 1 if local else _READ_THREADS


def _dv_key(dv: DataFile) -> str:
    return f"{dv.file_path}@{dv.content_offset}"


def _items(io: FileIO, deltas: Sequence[SnapshotDelta], directory: _Directory) -> list[_Item]:
    """What every snapshot of the range needs read, with each file's deletion vector
    followed through the range (new positions = its vector less the previous one)."""
    dvs = _read_dvs(io, deltas)
    current: dict[str, BitMap64] = {}  # data file -> its DV positions so far in the range

    def before(d: SnapshotDelta, target: str) -> BitMap64:
        if target in current:
            return current[target]
        old = d.old_dvs.get(target)
        return dvs[_dv_key(old)] if old is not None else _EMPTY

    out: list[_Item] = []
    for ordinal, d in enumerate(deltas):
        snap = d.snapshot
        for path, ref in d.added.items():
            dv = d.new_dvs.get(path)
            out.append(_Item(ordinal, False, ref, None, dvs[_dv_key(dv)] if dv else _EMPTY))
        for target, dv in d.new_dvs.items():
            positions = dvs[_dv_key(dv)]
            if target not in d.added and target not in d.removed:
                new = positions - before(d, target)
                if new:
                    out.append(_Item(ordinal, True, directory.find(target, snap), new))
            current[target] = positions
        for path, removed in d.removed.items():
            ref = removed or directory.find(path, snap)
            out.append(_Item(ordinal, True, ref, None, before(d, path)))
            current.pop(path, None)
    return out


class _Reader:
    """Reads each file once per range: all the positions the range needs it at, in one
    pass (only the row groups holding them), with the table's columns when a data
    change needs them, else only the lineage columns (files a ``replace`` moves rows
    between)."""

    def __init__(self, io: FileIO, schema: Schema, items: Sequence[_Item], lineage_only: set[int]):
        self.io = io
        self.rows: dict[str, pa.Table] = {}
        some: dict[str, tuple[FileRef, BitMap64]] = {}
        whole: dict[str, FileRef] = {}
        with_data: set[str] = set()
        for item in items:
            path = item.ref.path
            if item.ordinal not in lineage_only:
                with_data.add(path)
            if item.positions is None:
                whole[path] = item.ref
            else:
                some.setdefault(path, (item.ref, BitMap64()))[1].update(item.positions)
        jobs: list[tuple[FileRef, np.ndarray | None, Schema | None]] = []
        for path, ref in whole.items():
            jobs.append((ref, None, schema if path in with_data else None))
        for path, (ref, positions) in some.items():
            if path not in whole:
                at = np.fromiter(positions, dtype=np.int64, count=len(positions))
                jobs.append((ref, at, schema if path in with_data else None))
        with ThreadPoolExecutor(min(_READ_THREADS, max(1, len(jobs)))) as pool:
            for (ref, _, _), rows in zip(jobs, pool.map(lambda j: read_rows(io, *j), jobs)):
                self.rows[ref.path] = rows

    def gather(self, items: Sequence[_Item], columns: pa.Schema) -> pa.Table:
        """The items' rows, one take per file, with their snapshot's ordinal."""
        by_file: dict[str, list[_Item]] = {}
        for item in items:
            by_file.setdefault(item.ref.path, []).append(item)
        parts = []
        for path, group in by_file.items():
            rows = self.rows[path]
            have = rows.column(POSITION).to_numpy()
            picks, ordinals = [], []
            for item in group:
                if item.positions is None:
                    at = np.arange(rows.num_rows, dtype=np.int64)
                else:
                    wanted = np.fromiter(item.positions, np.int64, len(item.positions))
                    at = np.searchsorted(have, wanted)
                if len(item.minus):
                    gone = np.fromiter(item.minus, np.int64, len(item.minus))
                    at = at[~np.isin(have[at], gone)]
                picks.append(at)
                ordinals.append(np.full(len(at), item.ordinal, dtype=np.int32))
            taken = rows.select(columns.names).take(pa.array(np.concatenate(picks), pa.int64()))
            parts.append(taken.append_column(CHANGE_ORDINAL, pa.array(np.concatenate(ordinals))))
        if not parts:
            empty = columns.empty_table()
            return empty.append_column(CHANGE_ORDINAL, pa.array([], pa.int32()))
        return pa.concat_tables(parts)


@dataclass(frozen=True)
class _Pairs:
    """Indices of rows on both sides with one ``_row_id`` in one snapshot."""

    updated_d: np.ndarray
    updated_i: np.ndarray
    moved_d: np.ndarray
    moved_i: np.ndarray


def _pairs(deleted: pa.Table, inserted: pa.Table) -> _Pairs:
    keys = [CHANGE_ORDINAL, ROW_ID]

    def side(t: pa.Table, name: str) -> pa.Table:
        idx = pa.array(np.arange(t.num_rows, dtype=np.int64))
        return t.select([*keys, LAST_UPDATED]).append_column(name, idx)

    joined = side(deleted, "_d").join(
        side(inserted, "_i"), keys, join_type="inner", right_suffix="_i", use_threads=False
    )
    d = joined.column("_d").to_numpy()
    i = joined.column("_i").to_numpy()
    moved = pc.equal(joined.column(LAST_UPDATED), joined.column(LAST_UPDATED + "_i"))
    moved_np = pc.fill_null(moved, False).to_numpy(zero_copy_only=False)
    return _Pairs(d[~moved_np], i[~moved_np], d[moved_np], i[moved_np])


def _check_replaces(deleted: pa.Table, inserted: pa.Table, snapshots: Sequence[Snapshot]) -> None:
    """A ``replace`` may only move rows unmodified: every row it removes comes back with
    the same ``_row_id`` and ``_last_updated_sequence_number``."""
    pairs = _pairs(deleted, inserted)
    d_ord = deleted.column(CHANGE_ORDINAL).to_numpy()
    i_ord = inserted.column(CHANGE_ORDINAL).to_numpy()
    for ordinal in sorted(set(d_ord.tolist()) | set(i_ord.tolist())):
        removed = int((d_ord == ordinal).sum())
        added = int((i_ord == ordinal).sum())
        kept = int((d_ord[pairs.moved_d] == ordinal).sum())
        if kept != removed or kept != added:
            raise ChangeFeedError(
                f"snapshot {snapshots[ordinal].snapshot_id} (replace) rewrote {removed} rows "
                f"into {added} and kept the _row_id and last-updated sequence number of "
                f"{kept}: the change feed cannot see through it (a rewrite that does not "
                "keep v3 row lineage); read a range that starts after it"
            )


def _stamp(rows: pa.Table, change_type: str) -> pa.Table:
    return rows.append_column(CHANGE_TYPE, pa.repeat(pa.scalar(change_type), rows.num_rows))


def _take(t: pa.Table, at: np.ndarray) -> pa.Table:
    return t.take(pa.array(at, pa.int64()))


def _changes(deleted: pa.Table, inserted: pa.Table, snapshots: Sequence[Snapshot]) -> pa.Table:
    p = _pairs(deleted, inserted)
    only_d = np.setdiff1d(np.arange(deleted.num_rows), np.concatenate([p.updated_d, p.moved_d]))
    only_i = np.setdiff1d(np.arange(inserted.num_rows), np.concatenate([p.updated_i, p.moved_i]))
    out = pa.concat_tables(
        [
            _stamp(_take(deleted, only_d), DELETE),
            _stamp(_take(deleted, p.updated_d), UPDATE_BEFORE),
            _stamp(_take(inserted, p.updated_i), UPDATE_AFTER),
            _stamp(_take(inserted, only_i), INSERT),
        ]
    )
    ids = pa.array([s.snapshot_id for s in snapshots], pa.int64())
    out = out.append_column(COMMIT_SNAPSHOT_ID, ids.take(out.column(CHANGE_ORDINAL)))
    return sort_changes(out)


def sort_changes(changes: pa.Table) -> pa.Table:
    """By snapshot, then ``_row_id``, then DELETE, UPDATE_BEFORE, UPDATE_AFTER, INSERT."""
    rank = pc.index_in(changes.column(CHANGE_TYPE), value_set=_RANKED)
    order = pc.sort_indices(
        changes.append_column("_rank", rank),
        [(CHANGE_ORDINAL, "ascending"), (ROW_ID, "ascending"), ("_rank", "ascending")],
    )
    return changes.take(order)


def _output_schema(metadata: TableMetadata, rng: ChangeRange) -> Schema:
    end = metadata.snapshot_by_id(rng.end_id) if rng.end_id is not None else None
    schema_id = end.schema_id if end is not None and end.schema_id is not None else None
    schema = metadata.schema if schema_id is None else metadata.schema_by_id(schema_id)
    clash = [f.name for f in schema.fields if f.name in (*CHANGE_COLUMNS, LAST_UPDATED, POSITION)]
    if clash:
        raise SchemaError(
            f"column {clash[0]!r} has the name of a change-feed column; the change feed "
            "cannot be read for this table"
        )
    return schema


def read_changes(
    io: FileIO, metadata: TableMetadata, start: Bound, end: Bound = None, *, net: bool = False
) -> pa.Table:
    """The changes after ``start`` up to ``end`` (see ``resolve_range``), one row per
    change (``net``: per row of the table), as an Arrow table."""
    rng = resolve_range(metadata, start, end)
    schema = _output_schema(metadata, rng)
    snapshots = rng.snapshots
    with ThreadPoolExecutor(_threads(s.manifest_list for s in snapshots)) as pool:
        deltas = list(pool.map(lambda s: read_delta(io, metadata, s), snapshots))
    items = _items(io, deltas, _Directory(io, metadata, deltas))
    replaces = {i for i, d in enumerate(deltas) if d.operation == "replace"}
    reader = _Reader(io, schema, items, replaces)
    data = [i for i in items if i.ordinal not in replaces]
    moves = [i for i in items if i.ordinal in replaces]
    if moves:
        _check_replaces(
            reader.gather([i for i in moves if i.deleted], LINEAGE_SCHEMA),
            reader.gather([i for i in moves if not i.deleted], LINEAGE_SCHEMA),
            snapshots,
        )
    columns = pa.schema([*schema_to_arrow(schema), *LINEAGE_SCHEMA])
    changes = _changes(
        reader.gather([i for i in data if i.deleted], columns),
        reader.gather([i for i in data if not i.deleted], columns),
        snapshots,
    )
    if net:
        changes = sort_changes(net_changes(changes, [f.name for f in schema.fields]))
    return changes.select([*(f.name for f in schema.fields), *CHANGE_COLUMNS])
