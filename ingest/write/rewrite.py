"""The rewrite task of a compaction group: read the live rows of its input files, write
them to new files of about the target size, and record where every row went.

Runs wherever the group is handed (a Spark executor or the maintenance process). Inputs
are read by Parquet field id and projected onto the table's current schema (columns added
later read as nulls, promoted types cast). Rows deleted by each file's DV at planning time
are dropped. Rows keep their input order, file after file, unless the table has a default
sort order: then they are sorted by it (``calving.ingest.write.sort_rows``) and the
position map, kept by row, holds the permutation. The new files are cut at row counts
estimated from the inputs' bytes per live row, and go under the partition's directory
(``name=value/...``, as the stream's writer names it).

v3 row lineage survives: each new file stores every row's ``_row_id`` (the input's
stored value, else its ``first_row_id`` + position) and ``_last_updated_sequence_number``
(the stored value, else the data sequence number of the input's manifest entry) as the
reserved columns of ``calving.commit.spec.row_lineage``. Returns the new data files and
the position map (not yet committed).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap64

from calving.commit.errors import SchemaError
from calving.commit.io import FileIO
from calving.commit.maintenance.compaction import RewriteFn
from calving.commit.maintenance.compaction_plan import RewriteGroup
from calving.commit.spec import position_map as pm
from calving.commit.spec import row_lineage as rl
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.partition import PartitionSpec
from calving.commit.spec.properties import TableProperties
from calving.commit.spec.schema import Schema
from calving.commit.spec.sort_order import UNSORTED, SortOrder
from calving.commit.table import scan
from calving.commit.table.data_files import project, read_data_file, top_level_field_ids
from calving.ingest.write.arrow_schema import schema_to_arrow
from calving.ingest.write.parquet_writer import write_data_file
from calving.ingest.write.sort_rows import sort_indices

_V = TypeVar("_V")


@dataclass(frozen=True)
class RewriteInput:
    data_file: DataFile
    deleted: BitMap64  # the DV's positions when the group was planned
    # The data sequence number of the file's manifest entry: the last-updated sequence
    # number of its rows that store none (None: unknown, they take the new file's).
    data_sequence_number: int | None = None


@dataclass(frozen=True)
class RewriteOutput:
    added: tuple[DataFile, ...]
    position_map: pm.PositionMap


@dataclass(frozen=True)
class _Rows:
    """Live rows of the inputs, in one order, with where each came from."""

    rows: pa.Table
    row_ids: pa.Array  # int64, null where unknown
    sequence_numbers: pa.Array  # int64, null where unknown
    old_file: np.ndarray
    old_pos: np.ndarray

    def take(self, order: np.ndarray) -> _Rows:
        idx = pa.array(order, type=pa.int64())
        return _Rows(
            self.rows.take(idx),
            self.row_ids.take(idx),
            self.sequence_numbers.take(idx),
            self.old_file[order],
            self.old_pos[order],
        )


def read_projected(io: FileIO, data_file: DataFile, schema: Schema) -> pa.Table:
    """All rows of a Parquet data file as the table's current Arrow schema."""
    return project(read_data_file(io, data_file, "a rewrite"), schema)


def _stored(table: pa.Table, field_id: int, survivors: pa.Array) -> pa.Array:
    """The file's own values of a lineage column at ``survivors`` (nulls if absent)."""
    name = top_level_field_ids(table.schema).get(field_id)
    if name is None:
        return pa.nulls(len(survivors), pa.int64())
    column = table.column(name).cast(pa.int64()).take(survivors)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _read_live(io: FileIO, index: int, item: RewriteInput, schema: Schema) -> _Rows:
    raw = read_data_file(io, item.data_file, "a rewrite")
    keep = np.ones(raw.num_rows, dtype=bool)
    if len(item.deleted):
        keep[np.fromiter(item.deleted, dtype=np.int64, count=len(item.deleted))] = False
    survivors = np.flatnonzero(keep).astype(np.int64)
    at = pa.array(survivors, type=pa.int64())
    first = item.data_file.first_row_id
    row_ids = _stored(raw, rl.ROW_ID_FIELD_ID, at)
    if first is not None:
        row_ids = pc.coalesce(row_ids, pa.array(survivors + first, type=pa.int64()))
    seqs = _stored(raw, rl.LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID, at)
    if item.data_sequence_number is not None:
        seqs = pc.coalesce(seqs, pa.scalar(item.data_sequence_number, pa.int64()))
    return _Rows(
        project(raw, schema).take(at),
        row_ids,
        seqs,
        np.full(len(survivors), index, dtype=np.int64),
        survivors,
    )


def _merge(parts: list[_Rows], schema: Schema) -> _Rows:
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        nulls = pa.nulls(0, pa.int64())
        return _Rows(schema_to_arrow(schema).empty_table(), nulls, nulls, empty, empty)
    return _Rows(
        pa.concat_tables([p.rows for p in parts]),
        pa.concat_arrays([p.row_ids for p in parts]),
        pa.concat_arrays([p.sequence_numbers for p in parts]),
        np.concatenate([p.old_file for p in parts]),
        np.concatenate([p.old_pos for p in parts]),
    )


def rewrite_group(
    io: FileIO,
    table_location: str,
    schema: Schema,
    inputs: Sequence[RewriteInput],
    target_file_bytes: int,
    *,
    spec_id: int = 0,
    partition: tuple[object, ...] = (),
    data_path: str | None = None,
    partition_spec: PartitionSpec | None = None,
    sort_order: SortOrder = UNSORTED,
    row_lineage: bool = True,
) -> RewriteOutput:
    """Copy the live rows of ``inputs`` (one partition) into new files, sorted by
    ``sort_order``, under ``partition_spec``'s directory for ``partition`` (the data
    path itself without a spec or for an unpartitioned one), with the rows' lineage
    columns unless ``row_lineage`` is False (format versions before 3)."""
    merged = _merge([_read_live(io, i, item, schema) for i, item in enumerate(inputs)], schema)
    order = sort_indices(merged.rows, schema, sort_order)
    if order is not None:
        merged = merged.take(order)
    per_file = _rows_per_file(inputs, merged, target_file_bytes)
    directory = _directory(table_location, data_path, partition_spec, schema, partition)
    written_schema = with_lineage(schema) if row_lineage else schema
    added, new_file, new_pos = [], [], []
    for k, start in enumerate(range(0, merged.rows.num_rows, per_file)):
        piece = merged.rows.slice(start, per_file)
        if row_lineage:
            piece = piece.append_column(
                rl.ROW_ID.name, merged.row_ids.slice(start, per_file)
            ).append_column(
                rl.LAST_UPDATED_SEQUENCE_NUMBER.name,
                merged.sequence_numbers.slice(start, per_file),
            )
        location = f"{directory}/rewrite-{uuid.uuid4().hex}.parquet"
        written = write_data_file(
            io, location, piece, written_schema, partition=tuple(partition), spec_id=spec_id
        )
        added.append(table_metrics(written, sort_order))
        new_file.append(np.full(piece.num_rows, k, dtype=np.int64))
        new_pos.append(np.arange(piece.num_rows, dtype=np.int64))
    pmap = pm.PositionMap.from_rows(
        tuple(i.data_file.file_path for i in inputs),
        tuple(f.file_path for f in added),
        merged.old_file,
        merged.old_pos,
        _cat(new_file),
        _cat(new_pos),
    )
    return RewriteOutput(tuple(added), pmap)


def _rows_per_file(inputs: Sequence[RewriteInput], merged: _Rows, target_file_bytes: int) -> int:
    """Rows per new file: ceil(live bytes / target) files, live bytes estimated from the
    bytes per row of the input with the most rows. (Each input's own bytes per row
    would count every small file's fixed Parquet overhead, about 1 KB, again: a group of
    many tiny stream files was split into several files far below the target.)"""
    largest = max((item.data_file for item in inputs), key=lambda f: f.record_count)
    num_rows: int = merged.rows.num_rows  # pyarrow is untyped
    live_bytes = num_rows * largest.file_size_in_bytes // max(largest.record_count, 1)
    files = max(1, -(-live_bytes // max(target_file_bytes, 1)))
    return max(1, -(-num_rows // files))


def _directory(
    table_location: str,
    data_path: str | None,
    spec: PartitionSpec | None,
    schema: Schema,
    partition: tuple[object, ...],
) -> str:
    base = (data_path or table_location.rstrip("/") + "/data").rstrip("/")
    if spec is None or not spec.fields:
        return base
    return f"{base}/{spec.partition_path(schema, partition)}"


def with_lineage(schema: Schema) -> Schema:
    """The table's schema plus the reserved lineage columns, as written to the file."""
    for f in schema.fields:
        if f.name in (rl.ROW_ID.name, rl.LAST_UPDATED_SEQUENCE_NUMBER.name):
            raise SchemaError(f"column {f.name!r} uses a name Iceberg reserves for row lineage")
    return Schema(schema.fields + rl.LINEAGE_FIELDS, schema_id=schema.schema_id)


def table_metrics(f: DataFile, sort_order: SortOrder) -> DataFile:
    """``f`` with metrics only for the table's columns (none for the reserved lineage
    columns, which are not in the schema readers prune with) and its sort order id."""
    return replace(
        f,
        column_sizes=_without_lineage(f.column_sizes),
        value_counts=_without_lineage(f.value_counts),
        null_value_counts=_without_lineage(f.null_value_counts),
        nan_value_counts=_without_lineage(f.nan_value_counts),
        lower_bounds=_without_lineage(f.lower_bounds),
        upper_bounds=_without_lineage(f.upper_bounds),
        sort_order_id=f.sort_order_id if sort_order.is_unsorted else sort_order.order_id,
    )


def _without_lineage(values: dict[int, _V] | None) -> dict[int, _V] | None:
    if values is None:
        return None
    return {k: v for k, v in values.items() if k not in rl.LINEAGE_FIELD_IDS}


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)


def local_rewrite(io: FileIO, target_file_bytes: int) -> RewriteFn:
    """A ``RewriteFn`` for ``calving.commit.maintenance.compaction.compact`` that rewrites
    each group in this process, in the table's default sort order, under the group's
    partition directory, keeping the rows' lineage."""

    seen: dict[tuple[str, int | None], dict[str, int]] = {}

    def run(
        metadata: TableMetadata, group: RewriteGroup, inputs: Sequence[tuple[DataFile, BitMap64]]
    ) -> tuple[tuple[DataFile, ...], pm.PositionMap]:
        key = (metadata.table_uuid, metadata.current_snapshot_id)
        if key not in seen:  # the groups of one pass share the planning snapshot
            seen.clear()
            seen[key] = data_sequence_numbers(io, metadata)
        sequence_numbers = seen[key]
        out = rewrite_group(
            io,
            metadata.location,
            metadata.schema,
            [RewriteInput(f, deleted, sequence_numbers.get(f.file_path)) for f, deleted in inputs],
            target_file_bytes,
            spec_id=group.spec_id,
            partition=group.partition,
            data_path=TableProperties(metadata.properties).write_data_path,
            partition_spec=metadata.spec_by_id(group.spec_id),
            sort_order=default_sort_order(metadata),
            row_lineage=metadata.format_version >= 3,
        )
        return out.added, out.position_map

    return run


def default_sort_order(metadata: TableMetadata) -> SortOrder:
    for order in metadata.sort_orders:
        if order.order_id == metadata.default_sort_order_id:
            return order
    raise SchemaError(
        f"table {metadata.table_uuid} has no sort order with id {metadata.default_sort_order_id}"
    )


def data_sequence_numbers(io: FileIO, metadata: TableMetadata) -> dict[str, int]:
    """Data sequence number of every live data file of the current snapshot, by path."""
    live = scan.live_files(io, metadata, metadata.current_snapshot)
    return {
        path: e.entry.sequence_number
        for path, e in live.data.items()
        if e.entry.sequence_number is not None
    }
