"""The index and the table: save and load it beside the metadata, rebuild it from the
data files, and catch it up to a newer snapshot.

File: ``<table location>/metadata/calving-index/<snapshot-id>-<uuid>.calvidx``, in the
format of ``index_file``.

The commit that changes the table records the current index file in the table property
``calving.index.location``. ``load`` checks the file against the table: same UUID and key,
snapshot id equal to the current one (else ``StaleIndexError``, carrying the loaded index
so ``catch_up`` can bring it forward) and, from manifests alone, the same live data files
with ``record_count - deletion vector cardinality`` rows each, which catches a file saved
for a commit that then landed on another parent. A file that cannot be read or trusted is
``UnreadableIndexError``; ``open_index`` turns it (and every other reason not to use the
file) into a rebuild from the data files, logged as one warning.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from calving.commit.errors import (
    CalvingError,
    CorruptFileError,
    FileNotFoundInTableError,
    SchemaError,
    Terminal,
    UnsupportedFeatureError,
)
from calving.commit.index.index_file import (
    Compression,
    IndexHeader,
    UnreadableIndexError,
    file_header,
    one_line,
    read_entries,
    read_index_table,
    write_entries,
)
from calving.commit.index.keys import KeyCodec
from calving.commit.index.pk_index import IndexUpdateError, PrimaryKeyIndex
from calving.commit.index.snapshot_diff import bitmap_positions, diff_snapshots
from calving.commit.io import FileIO
from calving.commit.spec.arrow import FIELD_ID_KEY
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.position_map import SUMMARY_PROPERTY, PositionMap
from calving.commit.spec.types import PrimitiveType
from calving.commit.table import scan
from calving.commit.table.data_files import read_data_file
from calving.commit.table.rewrites import load_map

log = logging.getLogger(__name__)

INDEX_LOCATION_PROPERTY = "calving.index.location"
INDEX_DIRECTORY = "metadata/calving-index"


class StaleIndexError(CalvingError):
    """The index file reflects another snapshot than the table's current one.

    ``index`` is the loaded index (at ``index_snapshot_id``): ``catch_up`` it.
    """

    def __init__(
        self,
        location: str,
        index_snapshot_id: int | None,
        table_snapshot_id: int | None,
        index: PrimaryKeyIndex,
    ) -> None:
        self.location = location
        self.index_snapshot_id = index_snapshot_id
        self.table_snapshot_id = table_snapshot_id
        self.index = index
        super().__init__(
            f"{location}: index of snapshot {index_snapshot_id}, "
            f"table is at snapshot {table_snapshot_id}"
        )


class IndexMismatchError(Terminal):
    """The index file belongs to another table or key, or does not match the live files
    of the snapshot it claims; rebuild it."""


# ---------------------------------------------------------------- key of a table


def key_spec(
    metadata: TableMetadata, key_field_ids: Sequence[int] | None = None
) -> tuple[tuple[int, ...], tuple[PrimitiveType, ...]]:
    """Key field ids (default: the schema's identifier fields) and their types."""
    schema = metadata.schema
    ids = tuple(key_field_ids) if key_field_ids else schema.identifier_field_ids
    if not ids:
        raise SchemaError(
            f"table {metadata.table_uuid} has no identifier fields; "
            "a primary-key index needs key field ids"
        )
    types = []
    for fid in ids:
        f = schema.find_field(fid)
        if f is None or not isinstance(f.field_type, PrimitiveType):
            raise SchemaError(f"key field id {fid} is not a primitive field of the schema")
        types.append(f.field_type)
    return ids, tuple(types)


# ---------------------------------------------------------------- save / load


def index_file_location(table_location: str, snapshot_id: int | None) -> str:
    name = f"{'none' if snapshot_id is None else snapshot_id}-{uuid.uuid4()}.calvidx"
    return f"{table_location.rstrip('/')}/{INDEX_DIRECTORY}/{name}"


def save(io: FileIO, index: PrimaryKeyIndex, table_location: str) -> str:
    """Write the index (compacting it) to a new file; returns its location."""
    keys, file_index, positions, files = index.export_entries()
    location = index_file_location(table_location, index.snapshot_id)
    header = index_header(index, files)
    write_entries(io, location, header, keys, file_index, positions, compression=Compression.SAVED)
    return location


def index_header(index: PrimaryKeyIndex, files: Sequence[tuple[str, int]]) -> dict[bytes, str]:
    """The schema metadata of an index file holding ``index``'s entries over ``files``."""
    if index.table_uuid is None:
        raise IndexUpdateError("the index has no table_uuid; set it before saving")
    return file_header(
        index.table_uuid, index.snapshot_id, index.key_field_ids, index.key_types, files
    )


def load(
    io: FileIO,
    location: str,
    metadata: TableMetadata,
    key_field_ids: Sequence[int] | None = None,
    *,
    verify_files: bool = True,
    **options: Any,
) -> PrimaryKeyIndex:
    """Load the index at ``location`` (the one the table property names) for this table.

    Raises ``UnreadableIndexError`` (cannot be read or trusted), ``IndexMismatchError``
    (other table or key, or content that does not fit the snapshot), ``StaleIndexError``
    (older snapshot) or ``FileNotFoundInTableError``. ``options`` go to
    ``PrimaryKeyIndex``.
    """
    table = read_index_table(io, location)
    header = IndexHeader.parse(location, table.schema.metadata or {})
    if header.table_uuid != metadata.table_uuid:
        raise IndexMismatchError(
            f"{location}: index of table {header.table_uuid}, not {metadata.table_uuid}"
        )
    ids, types = key_spec(metadata, key_field_ids)
    if header.key_field_ids != ids or (
        KeyCodec(header.key_types).encoding_class() != KeyCodec(types).encoding_class()
    ):
        raise IndexMismatchError(
            f"{location}: index of key {header.key_field_ids} "
            f"{[str(t) for t in header.key_types]}, wanted {ids}"
        )
    index = _from_table(
        location,
        table,
        ids,
        types,
        header.files,
        table_uuid=header.table_uuid,
        snapshot_id=header.snapshot_id,
        **options,
    )
    if header.snapshot_id != metadata.current_snapshot_id:
        raise StaleIndexError(location, header.snapshot_id, metadata.current_snapshot_id, index)
    if verify_files:
        problem = mismatch_with_table(io, index, metadata)
        if problem:
            raise IndexMismatchError(f"{location}: {problem}")
    return index


def _from_table(
    location: str,
    table: pa.Table,
    ids: tuple[int, ...],
    types: tuple[PrimitiveType, ...],
    files: list[tuple[str, int]],
    **options: Any,
) -> PrimaryKeyIndex:
    keys, file_index, positions = read_entries(location, table)
    try:
        return PrimaryKeyIndex.from_entries(
            ids, types, keys, file_index, positions, files, **options
        )
    except IndexUpdateError as err:
        raise UnreadableIndexError(
            location, f"index entries are malformed: {one_line(err)}"
        ) from None


def load_current(
    io: FileIO, metadata: TableMetadata, key_field_ids: Sequence[int] | None = None, **options: Any
) -> PrimaryKeyIndex | None:
    """The index the table property names, or None when the table records none."""
    location = metadata.properties.get(INDEX_LOCATION_PROPERTY)
    if not location:
        return None
    return load(io, location, metadata, key_field_ids, **options)


class _RebuildCounter:
    """Full index rebuilds in this process (``full_rebuilds()``): a recorded index that
    could not be used, a table with snapshots but no recorded index, a catch-up that fell
    back to a rebuild, a commit's rebase by key. The first open of a table without
    snapshots builds an empty index and is not counted."""

    count = 0


def full_rebuilds() -> int:
    return _RebuildCounter.count


def count_full_rebuild() -> None:
    _RebuildCounter.count += 1


class Rebuild(Protocol):
    """Builds the index of ``metadata``'s current snapshot from its data files
    (``build_from_table``, or the executors' rebuild of ``ingest.sink.index_rebuild``)."""

    def __call__(
        self, io: FileIO, metadata: TableMetadata, key_field_ids: Sequence[int] | None
    ) -> PrimaryKeyIndex: ...


def open_index(
    io: FileIO,
    metadata: TableMetadata,
    key_field_ids: Sequence[int] | None = None,
    *,
    rebuild: Rebuild | None = None,
    **options: Any,
) -> PrimaryKeyIndex:
    """An index at the table's current snapshot, the cheapest way: the recorded file,
    caught up if stale, rebuilt from the data files if missing, corrupt or mismatched
    (with ``rebuild`` when given and there are snapshots, else ``build_from_table``)."""
    try:
        index = load_current(io, metadata, key_field_ids, **options)
    except StaleIndexError as stale:
        return catch_up(io, stale.index, metadata)
    except (FileNotFoundInTableError, CorruptFileError, IndexMismatchError) as err:
        log.warning("primary-key index not used, rebuilding it from the table: %s", err)
        index = None
    if index is None:
        if metadata.current_snapshot_id is not None:
            count_full_rebuild()
            if rebuild is not None:
                return rebuild(io, metadata, key_field_ids)
        index = build_from_table(io, metadata, key_field_ids, **options)
    return index


def mismatch_with_table(io: FileIO, index: PrimaryKeyIndex, metadata: TableMetadata) -> str:
    """Why the index cannot reflect the current snapshot ('' if it can): it must hold
    exactly the live data files, each with record count minus DV cardinality rows."""
    live = scan.live_files(io, metadata, metadata.current_snapshot)
    counts = index.live_rows_per_file()
    if set(counts) != set(live.data):
        extra, missing = set(counts) - set(live.data), set(live.data) - set(counts)
        return (
            f"index files differ from the live data files ({len(extra)} extra, "
            f"{len(missing)} missing, e.g. {min(extra | missing)})"
        )
    for path, entry in live.data.items():
        dv = live.dvs.get(path)
        expected = entry.data_file.record_count - (dv.data_file.record_count if dv else 0)
        if counts[path] != expected:
            return f"{path}: index holds {counts[path]} rows, the table {expected}"
    return ""


# ---------------------------------------------------------------- rebuild / catch up


@dataclass(frozen=True)
class FileKeys:
    """The live rows' key columns of one data file and their positions."""

    path: str
    keys: pa.Table
    positions: np.ndarray
    row_count: int


def build_from_table(
    io: FileIO,
    metadata: TableMetadata,
    key_field_ids: Sequence[int] | None = None,
    *,
    max_workers: int = 4,
    **options: Any,
) -> PrimaryKeyIndex:
    """Index the current snapshot from its data files' key columns minus DV positions."""
    ids, types = key_spec(metadata, key_field_ids)
    index = PrimaryKeyIndex(
        ids,
        types,
        table_uuid=metadata.table_uuid,
        snapshot_id=metadata.current_snapshot_id,
        **options,
    )
    live = scan.live_files(io, metadata, metadata.current_snapshot)
    for f in read_live_keys(io, live, sorted(live.data), ids, max_workers):
        index.add_file(f.path, f.keys, positions=f.positions, row_count=f.row_count)
    index.compact()
    return index


def catch_up(
    io: FileIO,
    index: PrimaryKeyIndex,
    metadata: TableMetadata,
    *,
    max_workers: int = 4,
    rebuild: Rebuild | None = None,
) -> PrimaryKeyIndex:
    """Bring ``index`` (in place) to the current snapshot by applying only what changed
    between its snapshot and the current one: removed files, added files with their
    DVs, and positions newly deleted. Falls back to a full rebuild (a new index, by
    ``rebuild`` when given) when the index's snapshot is gone from history, belongs to
    another table or key, or its files do not match that snapshot."""
    target = metadata.current_snapshot_id
    why, old = _incremental_base(io, index, metadata)
    if why:
        log.info("primary-key index: full rebuild (%s)", why)
        count_full_rebuild()
        if rebuild is not None:
            return rebuild(io, metadata, index.key_field_ids)
        return build_from_table(
            io,
            metadata,
            index.key_field_ids,
            max_workers=max_workers,
            hasher=index.hasher,
            min_merge_rows=index.min_merge_rows,
            merge_fraction=index.merge_fraction,
        )
    ids, types = key_spec(metadata, index.key_field_ids)
    if old is None:  # already at the current snapshot
        return index
    diff = diff_snapshots(io, old, scan.live_files(io, metadata, metadata.current_snapshot))
    removed, deletes, added, new = diff.removed, diff.deletes, diff.added, diff.new
    maps = rewrites_since(io, metadata, index.snapshot_id, removed)
    remapped = {p for m in maps for p in m.new_files}
    # Read everything first: a failure leaves the index as it was.
    fresh = read_live_keys(io, new, [p for p in added if p not in remapped], ids, max_workers)
    for pmap in maps:  # rewrites move their inputs' entries: their outputs are not read
        index.remap_files(pmap, {p: _rows(metadata, io, p, new) for p in pmap.new_files})
    for path in removed:
        if index.has_file(path):
            index.remove_file(path)
    for path in remapped:  # an output gone again since (rewritten, or every row deleted)
        if path not in new.data:
            if index.has_file(path):
                index.remove_file(path)
        elif path in new.dvs:  # deletes it carried, or that reached it since
            index.delete_positions(path, bitmap_positions(new.positions_deleted(io, path)))
    for path, positions in deletes.items():
        index.delete_positions(path, positions)
    for f in fresh:
        index.add_file(f.path, f.keys, positions=f.positions, row_count=f.row_count)
    index.promote_key_types(types)
    index.snapshot_id = target
    return index


def rewrites_since(
    io: FileIO, metadata: TableMetadata, snapshot_id: int | None, removed: Sequence[str]
) -> list[PositionMap]:
    """The position maps of the rewrites committed after ``snapshot_id`` (oldest first)
    that the index can follow: each one's inputs are files the index holds by then (the
    snapshot's live files the catch-up removes, or an earlier followed rewrite's
    outputs). A rewrite of any other file (one added after ``snapshot_id``, not yet in
    the index) is left to reading its outputs' keys, as are rewrites without a map."""
    since: list[PositionMap] = []
    snap = metadata.current_snapshot
    while snap is not None and snap.snapshot_id != snapshot_id:
        location = snap.summary.get(SUMMARY_PROPERTY)
        if location:
            since.append(load_map(io, location))
        parent = snap.parent_snapshot_id
        snap = None if parent is None else metadata.snapshot_by_id(parent)
    if snap is None:  # the index's snapshot is no ancestor: nothing to follow
        return []
    held = set(removed)
    out: list[PositionMap] = []
    for pmap in reversed(since):
        if all(p in held for p in pmap.old_files):
            out.append(pmap)
            held.difference_update(pmap.old_files)
            held.update(pmap.new_files)
    return out


def _rows(metadata: TableMetadata, io: FileIO, path: str, live: scan.LiveFiles) -> int:
    """A rewritten file's row count: from the current snapshot when it is live, else
    from the manifests of the rewrite that made it."""
    entry = live.data.get(path)
    if entry is not None:
        return entry.data_file.record_count
    return _made_by(io, metadata, path)


def _made_by(io: FileIO, metadata: TableMetadata, path: str) -> int:
    for snap in metadata.snapshots:
        for mf in scan.own_manifests(io, snap):
            for e in scan.manifest_entries(io, metadata, mf):
                if e.data_file.file_path == path:
                    return e.data_file.record_count
    raise FileNotFoundInTableError(f"{path}: made by a rewrite no kept snapshot holds")


def _incremental_base(
    io: FileIO, index: PrimaryKeyIndex, metadata: TableMetadata
) -> tuple[str, scan.LiveFiles | None]:
    """(why a full rebuild is needed or '', live files of the index's snapshot, or None
    when the index is already current)."""
    if index.table_uuid != metadata.table_uuid:
        return "the table UUID changed", None
    try:
        _, types = key_spec(metadata, index.key_field_ids)
    except SchemaError as err:
        return str(err), None
    if KeyCodec(types).encoding_class() != index.codec.encoding_class():
        return "the key types changed", None
    if index.snapshot_id == metadata.current_snapshot_id:
        return "", None
    old_snapshot = None
    if index.snapshot_id is not None:
        old_snapshot = metadata.snapshot_by_id(index.snapshot_id)
        if old_snapshot is None:
            return f"snapshot {index.snapshot_id} is gone from history", None
    try:
        old = scan.live_files(io, metadata, old_snapshot)
    except FileNotFoundInTableError as err:
        return str(err), None
    if set(index.file_paths) != set(old.data):
        return f"index files differ from snapshot {index.snapshot_id}", None
    return "", old


def read_live_keys(
    io: FileIO,
    live: scan.LiveFiles,
    paths: Sequence[str],
    key_field_ids: Sequence[int],
    max_workers: int,
) -> list[FileKeys]:
    def one(path: str) -> FileKeys:
        dv = live.dvs.get(path)
        return live_keys(
            io, live.data[path].data_file, None if dv is None else dv.data_file, key_field_ids
        )

    if len(paths) <= 1 or max_workers <= 1:
        return [one(p) for p in paths]
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        return list(pool.map(one, paths))


def live_keys(
    io: FileIO, data_file: DataFile, dv: DataFile | None, key_field_ids: Sequence[int]
) -> FileKeys:
    """The key columns of ``data_file``'s rows that ``dv`` (its deletion vector, if
    any) leaves live, with their positions."""
    keys = read_key_columns(io, data_file, key_field_ids)
    positions = np.arange(keys.num_rows, dtype=np.int64)
    if dv is not None:
        deleted = bitmap_positions(scan.read_dv(io, dv))
        if len(deleted):
            positions = np.setdiff1d(positions, deleted, assume_unique=True)
            keys = keys.take(pa.array(positions))
    return FileKeys(data_file.file_path, keys, positions, data_file.record_count)


def read_key_columns(io: FileIO, data_file: DataFile, key_field_ids: Sequence[int]) -> pa.Table:
    """The key columns of a Parquet data file, found by Parquet field id (not by name),
    as a table with one column per key field, in key order."""
    location = data_file.file_path
    paths: list[tuple[str, ...]] = []

    def key_tops(schema: pa.Schema) -> list[str]:
        paths.extend(_field_path(schema, fid, location) for fid in key_field_ids)
        return list(dict.fromkeys(p[0] for p in paths))

    table = read_data_file(io, data_file, "the primary-key index", key_tops)
    columns = []
    for names in paths:
        column: Any = table.column(names[0])
        for name in names[1:]:
            column = pc.struct_field(column, name)
        columns.append(column)
    return pa.table(columns, names=[str(fid) for fid in key_field_ids])


def _field_path(schema: pa.Schema, field_id: int, location: str) -> tuple[str, ...]:
    wanted = str(field_id).encode()

    def search(fields: Sequence[pa.Field], prefix: tuple[str, ...]) -> tuple[str, ...] | None:
        for f in fields:
            if (f.metadata or {}).get(FIELD_ID_KEY) == wanted:
                return prefix + (f.name,)
            if pa.types.is_struct(f.type):
                found = search(
                    [f.type.field(i) for i in range(f.type.num_fields)], prefix + (f.name,)
                )
                if found:
                    return found
        return None

    found = search(list(schema), ())
    if found is None:
        raise UnsupportedFeatureError(
            f"{location}: no column with Parquet field id {field_id} (files without field "
            "ids would need a name mapping, which calving does not support)"
        )
    return found
