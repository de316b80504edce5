"""The change feed of a snapshot range, in the vocabulary of Iceberg's Spark changelog
view: every table column, then ``_change_type`` (INSERT, DELETE, UPDATE_BEFORE,
UPDATE_AFTER), ``_change_ordinal`` (the snapshot's place in the range, from 0),
``_commit_snapshot_id`` and ``_row_id``.

Per snapshot of the range (``calving.commit.changelog.delta``): the rows of the data
files it added, less those its own deletion vectors delete, are inserted; the rows its
deletion vectors newly delete, and the live rows of the data files it removed, are
deleted. A ``_row_id`` on both sides is the same row: an UPDATE_BEFORE / UPDATE_AFTER
pair when the new row's ``_last_updated_sequence_number`` moved on, and nothing when it
did not (the row was moved unmodified, as compaction does). A ``replace`` snapshot
must consist of such moves only: one that gave rows new ids or changed them is refused.

``net``: one change per row over the whole range: its state before the range against
its state after it (a row inserted and deleted within the range vanishes; a row
updated and updated back to its old values too), stamped with its last change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap64

from calving.commit.changelog.delta import FileRef, SnapshotDelta, read_delta
from calving.commit.changelog.range import Bound, ChangeRange, resolve_range
from calving.commit.changelog.rows import LAST_UPDATED, LINEAGE_SCHEMA, POSITION, ROW_ID, read_rows
from calving.commit.errors import ChangeFeedError, SchemaError
from calving.commit.io import FileIO
from calving.commit.spec.arrow import schema_to_arrow
from calving.commit.spec.data_file import ManifestContent
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.schema import Schema
from calving.commit.spec.snapshot import Snapshot
from calving.commit.table import scan

CHANGE_TYPE = "_change_type"
CHANGE_ORDINAL = "_change_ordinal"
COMMIT_SNAPSHOT_ID = "_commit_snapshot_id"
CHANGE_COLUMNS = (CHANGE_TYPE, CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID, ROW_ID)
INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER = "INSERT", "DELETE", "UPDATE_BEFORE", "UPDATE_AFTER"
_RANKED = pa.array([DELETE, UPDATE_BEFORE, UPDATE_AFTER, INSERT])  # order within a row
_ALL = None  # every row of a file


class _Directory:
    """Data file path -> its ``FileRef``, for files a snapshot deletes rows of without
    adding or removing them in the range: found in the manifests of that snapshot (or
    its parent), each manifest indexed once."""

    def __init__(self, io: FileIO, metadata: TableMetadata) -> None:
        self.io = io
        self.metadata = metadata
        self.refs: dict[str, FileRef] = {}
        self.indexed: set[str] = set()

    def learn(self, refs: Sequence[FileRef]) -> None:
        for ref in refs:
            self.refs.setdefault(ref.path, ref)

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


@dataclass
class _Wanted:
    """What one snapshot needs read: (file, positions or all) for each side."""

    inserts: list[tuple[FileRef, BitMap64 | None, BitMap64]]  # (file, _ALL, minus these)
    deletes: list[tuple[FileRef, BitMap64 | None, BitMap64]]  # (file, these or _ALL, minus)


def _wanted(delta: SnapshotDelta, directory: _Directory) -> _Wanted:
    snap = delta.snapshot
    empty = BitMap64()
    inserts = [(ref, _ALL, delta.new_deletes.get(p, empty)) for p, ref in delta.added.items()]
    deletes: list[tuple[FileRef, BitMap64 | None, BitMap64]] = []
    for path, positions in delta.new_deletes.items():
        if path not in delta.added and path not in delta.removed and len(positions):
            deletes.append((directory.find(path, snap), positions, empty))
    for path, removed in delta.removed.items():
        ref = removed or directory.find(path, snap)
        deletes.append((ref, _ALL, delta.old_deletes.get(path, empty)))
    return _Wanted(inserts, deletes)


class _Reader:
    """Reads each file once per range: all the positions one file is needed at, over
    all the range's snapshots, in one pass (only the row groups holding them), with the
    table's columns when a data change needs them, else only the lineage columns (the
    files a ``replace`` moves rows between)."""

    def __init__(self, io: FileIO, schema: Schema) -> None:
        self.io = io
        self.schema = schema
        self.rows: dict[str, pa.Table] = {}

    def prefetch(self, wanted: Sequence[tuple[_Wanted, bool]]) -> None:
        """``wanted``: each snapshot's needs, and whether it needs the table's columns."""
        some: dict[str, tuple[FileRef, BitMap64]] = {}
        whole: dict[str, FileRef] = {}
        with_data: set[str] = set()
        for w, data in wanted:
            for ref, positions, _ in (*w.inserts, *w.deletes):
                if data:
                    with_data.add(ref.path)
                if positions is _ALL:
                    whole[ref.path] = ref
                else:
                    some.setdefault(ref.path, (ref, BitMap64()))[1].update(positions)
        for path, ref in whole.items():
            schema = self.schema if path in with_data else None
            self.rows[path] = read_rows(self.io, ref, None, schema)
        for path, (ref, positions) in some.items():
            if path not in whole:
                at = np.fromiter(positions, dtype=np.int64, count=len(positions))
                schema = self.schema if path in with_data else None
                self.rows[path] = read_rows(self.io, ref, at, schema)

    def take(self, ref: FileRef, positions: BitMap64 | None, minus: BitMap64) -> pa.Table:
        rows = self.rows[ref.path]
        if positions is not _ALL:
            wanted = np.fromiter(positions, dtype=np.int64, count=len(positions))
            have = rows.column(POSITION).to_numpy()
            rows = rows.take(pa.array(np.searchsorted(have, wanted), pa.int64()))
        if len(minus):
            gone = np.fromiter(minus, dtype=np.int64, count=len(minus))
            keep = ~np.isin(rows.column(POSITION).to_numpy(), gone)
            rows = rows.filter(pa.array(keep))
        return rows


def _concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _pair(
    deleted: pa.Table, inserted: pa.Table
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows on both sides by ``_row_id``: (deleted index, inserted index) of the updates
    and of the unmodified moves."""
    d_ids = deleted.column(ROW_ID).to_numpy(zero_copy_only=False)
    i_ids = inserted.column(ROW_ID).to_numpy(zero_copy_only=False)
    d_valid = pc.is_valid(deleted.column(ROW_ID)).to_numpy(zero_copy_only=False)
    i_valid = pc.is_valid(inserted.column(ROW_ID)).to_numpy(zero_copy_only=False)
    common, d_at, i_at = np.intersect1d(
        np.where(d_valid, d_ids, -1), np.where(i_valid, i_ids, -2), return_indices=True
    )
    del common
    d_seq = deleted.column(LAST_UPDATED).to_numpy(zero_copy_only=False)[d_at]
    i_seq = inserted.column(LAST_UPDATED).to_numpy(zero_copy_only=False)[i_at]
    moved = d_seq == i_seq
    return d_at[~moved], i_at[~moved], d_at[moved], i_at[moved]


def _stamp(rows: pa.Table, change_type: str, ordinal: int, snapshot_id: int) -> pa.Table:
    n = rows.num_rows
    return (
        rows.append_column(CHANGE_TYPE, pa.repeat(pa.scalar(change_type), n))
        .append_column(CHANGE_ORDINAL, pa.repeat(pa.scalar(ordinal, pa.int32()), n))
        .append_column(COMMIT_SNAPSHOT_ID, pa.repeat(pa.scalar(snapshot_id, pa.int64()), n))
    )


def _snapshot_changes(
    deleted: pa.Table, inserted: pa.Table, ordinal: int, snap: Snapshot
) -> pa.Table:
    upd_d, upd_i, mov_d, mov_i = _pair(deleted, inserted)
    drop_d = np.concatenate([upd_d, mov_d])
    drop_i = np.concatenate([upd_i, mov_i])
    only_d = np.setdiff1d(np.arange(deleted.num_rows), drop_d)
    only_i = np.setdiff1d(np.arange(inserted.num_rows), drop_i)
    sid = snap.snapshot_id
    parts = [
        _stamp(deleted.take(pa.array(only_d, pa.int64())), DELETE, ordinal, sid),
        _stamp(deleted.take(pa.array(upd_d, pa.int64())), UPDATE_BEFORE, ordinal, sid),
        _stamp(inserted.take(pa.array(upd_i, pa.int64())), UPDATE_AFTER, ordinal, sid),
        _stamp(inserted.take(pa.array(only_i, pa.int64())), INSERT, ordinal, sid),
    ]
    return _sorted(pa.concat_tables(parts))


def _sorted(changes: pa.Table) -> pa.Table:
    rank = pc.index_in(changes.column(CHANGE_TYPE), value_set=_RANKED)
    order = pc.sort_indices(
        changes.append_column("_rank", rank),
        [(CHANGE_ORDINAL, "ascending"), (ROW_ID, "ascending"), ("_rank", "ascending")],
    )
    return changes.take(order)


def _check_replace(reader: _Reader, delta: SnapshotDelta, wanted: _Wanted) -> None:
    """A ``replace`` may only move rows unmodified: every row it removes comes back with
    the same ``_row_id`` and ``_last_updated_sequence_number``."""

    def side(items: list[tuple[FileRef, BitMap64 | None, BitMap64]]) -> pa.Table:
        parts = [reader.take(*w).select(LINEAGE_SCHEMA.names) for w in items]
        return _concat(parts, LINEAGE_SCHEMA)

    deleted, inserted = side(wanted.deletes), side(wanted.inserts)
    upd_d, _, mov_d, mov_i = _pair(deleted, inserted)
    if len(upd_d) or len(mov_d) != deleted.num_rows or len(mov_i) != inserted.num_rows:
        raise ChangeFeedError(
            f"snapshot {delta.snapshot.snapshot_id} (replace) rewrote {deleted.num_rows} rows "
            f"into {inserted.num_rows} and kept the _row_id and last-updated sequence number "
            f"of {len(mov_d)}: the change feed cannot see through it (a rewrite that does not "
            "keep v3 row lineage); read a range that starts after it"
        )


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
    directory = _Directory(io, metadata)
    deltas = [read_delta(io, metadata, snap) for snap in rng.snapshots]
    for d in deltas:
        directory.learn(list(d.added.values()))
    plans = [(ordinal, d, _wanted(d, directory)) for ordinal, d in enumerate(deltas)]
    reader = _Reader(io, schema)
    reader.prefetch([(w, d.operation != "replace") for _, d, w in plans])
    columns = _row_schema(schema)
    out = []
    for ordinal, delta, wanted in plans:
        if delta.operation == "replace":
            _check_replace(reader, delta, wanted)
            continue
        deleted = _concat([reader.take(*w) for w in wanted.deletes], columns)
        inserted = _concat([reader.take(*w) for w in wanted.inserts], columns)
        out.append(_snapshot_changes(deleted, inserted, ordinal, delta.snapshot))
    changes = _concat(out, _stamp(columns.empty_table(), INSERT, 0, 0).schema)
    if net:
        changes = net_changes(changes, [f.name for f in schema.fields])
    return changes.select([*(f.name for f in schema.fields), *CHANGE_COLUMNS])


def _row_schema(schema: Schema) -> pa.Schema:
    return pa.schema([*schema_to_arrow(schema), *LINEAGE_SCHEMA])


def net_changes(changes: pa.Table, data_columns: Sequence[str]) -> pa.Table:
    """One change per ``_row_id`` (rows without one pass through): see the module doc."""
    valid = pc.is_valid(changes.column(ROW_ID))
    keyed = changes.filter(valid)
    loose = changes.filter(pc.invert(valid))
    if keyed.num_rows == 0:
        return changes
    index = pa.array(np.arange(keyed.num_rows), pa.int64())
    spans = (
        keyed.select([ROW_ID])
        .append_column("_i", index)
        .group_by(ROW_ID, use_threads=False)
        .aggregate([("_i", "min"), ("_i", "max")])
    )
    first = keyed.take(spans.column("_i_min"))
    last = keyed.take(spans.column("_i_max"))
    before = pc.is_in(first.column(CHANGE_TYPE), pa.array([DELETE, UPDATE_BEFORE])).to_numpy(
        zero_copy_only=False
    )
    after = pc.is_in(last.column(CHANGE_TYPE), pa.array([INSERT, UPDATE_AFTER])).to_numpy(
        zero_copy_only=False
    )
    same = _same_values(first, last, data_columns)
    both = before & after & ~same
    stamp = [CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID]

    def restamp(rows: pa.Table, stamps: pa.Table, change_type: str) -> pa.Table:
        rows = rows.set_column(
            rows.schema.get_field_index(CHANGE_TYPE),
            CHANGE_TYPE,
            pa.repeat(pa.scalar(change_type), rows.num_rows),
        )
        for name in stamp:
            rows = rows.set_column(rows.schema.get_field_index(name), name, stamps.column(name))
        return rows

    def pick(rows: pa.Table, mask: np.ndarray) -> pa.Table:
        return rows.filter(pa.array(mask))

    parts = [
        restamp(pick(first, before & ~after), pick(last, before & ~after), DELETE),
        restamp(pick(first, both), pick(last, both), UPDATE_BEFORE),
        restamp(pick(last, both), pick(last, both), UPDATE_AFTER),
        restamp(pick(last, after & ~before), pick(last, after & ~before), INSERT),
        loose,
    ]
    return _sorted(pa.concat_tables(parts))


def _same_values(a: pa.Table, b: pa.Table, columns: Sequence[str]) -> np.ndarray:
    same = np.ones(a.num_rows, dtype=bool)
    for name in columns:
        x, y = a.column(name), b.column(name)
        try:
            eq = pc.fill_null(pc.equal(x, y), False)
            both_null = pc.and_(pc.is_null(x), pc.is_null(y))
            same &= pc.or_(eq, both_null).to_numpy(zero_copy_only=False)
        except pa.ArrowNotImplementedError:  # nested types: compare as Python values
            same &= np.array([p == q for p, q in zip(x.to_pylist(), y.to_pylist())], dtype=bool)
    return same
