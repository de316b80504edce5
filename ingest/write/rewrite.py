"""The rewrite task of a compaction group: read the live rows of its input files, write
them to new files of about the target size, and record where every row went.

Runs wherever the group is handed (a Spark executor or the maintenance process). Inputs
are read by Parquet field id and projected onto the table's current schema (columns added
later read as nulls, promoted types cast). Rows deleted by each file's DV at planning time
are dropped. Rows keep their input order, file after file, so the position map is a few
runs per file; the new files are cut at row counts estimated from the inputs' bytes per
live row. Returns the new data files and the position map (not yet committed).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyroaring import BitMap64

from calving.commit.io import FileIO
from calving.commit.maintenance.compaction import RewriteFn
from calving.commit.maintenance.compaction_plan import RewriteGroup
from calving.commit.spec import position_map as pm
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.schema import Schema
from calving.commit.table.data_files import read_data_file, top_level_field_ids
from calving.commit.table.properties import TableProperties
from calving.ingest.write.arrow_schema import schema_to_arrow
from calving.ingest.write.parquet_writer import write_data_file


@dataclass(frozen=True)
class RewriteInput:
    data_file: DataFile
    deleted: BitMap64  # the DV's positions when the group was planned


@dataclass(frozen=True)
class RewriteOutput:
    added: tuple[DataFile, ...]
    position_map: pm.PositionMap


def read_projected(io: FileIO, data_file: DataFile, schema: Schema) -> pa.Table:
    """All rows of a Parquet data file as the table's current Arrow schema."""
    table = read_data_file(io, data_file, "a rewrite")
    by_id = {
        fid: table.schema.get_field_index(name)
        for fid, name in top_level_field_ids(table.schema).items()
    }
    target = schema_to_arrow(schema)
    columns = []
    for field, arrow_field in zip(schema.fields, target):
        i = by_id.get(field.field_id)
        if i is None:
            columns.append(pa.nulls(table.num_rows, arrow_field.type))
        else:
            columns.append(table.column(i).cast(arrow_field.type))
    return pa.Table.from_arrays(columns, schema=target)


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
) -> RewriteOutput:
    """Copy the live rows of ``inputs`` (one partition) into new files."""
    parts, old_file, old_pos = [], [], []
    live_bytes = 0
    for i, item in enumerate(inputs):
        table = read_projected(io, item.data_file, schema)
        keep = np.ones(table.num_rows, dtype=bool)
        if len(item.deleted):
            keep[np.fromiter(item.deleted, dtype=np.int64, count=len(item.deleted))] = False
        survivors = np.flatnonzero(keep)
        parts.append(table.filter(pa.array(keep)))
        old_file.append(np.full(len(survivors), i, dtype=np.int64))
        old_pos.append(survivors.astype(np.int64))
        rows = max(item.data_file.record_count, 1)
        live_bytes += item.data_file.file_size_in_bytes * len(survivors) // rows
    merged = pa.concat_tables(parts) if parts else pa.table({})
    total = merged.num_rows
    files = max(1, -(-live_bytes // max(target_file_bytes, 1)))
    per_file = max(1, -(-total // files))
    base = (data_path or table_location.rstrip("/") + "/data").rstrip("/")
    added, new_file, new_pos = [], [], []
    for k, start in enumerate(range(0, total, per_file)):
        piece = merged.slice(start, per_file)
        location = f"{base}/rewrite-{uuid.uuid4().hex}.parquet"
        added.append(
            write_data_file(
                io, location, piece, schema, partition=tuple(partition), spec_id=spec_id
            )
        )
        new_file.append(np.full(piece.num_rows, k, dtype=np.int64))
        new_pos.append(np.arange(piece.num_rows, dtype=np.int64))
    pmap = pm.PositionMap.from_rows(
        tuple(i.data_file.file_path for i in inputs),
        tuple(f.file_path for f in added),
        _cat(old_file),
        _cat(old_pos),
        _cat(new_file),
        _cat(new_pos),
    )
    return RewriteOutput(tuple(added), pmap)


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)


def local_rewrite(io: FileIO, target_file_bytes: int) -> RewriteFn:
    """A ``RewriteFn`` for ``calving.commit.maintenance.compaction.compact`` that rewrites
    each group in this process."""

    def run(
        metadata: TableMetadata, group: RewriteGroup, inputs: Sequence[tuple[DataFile, BitMap64]]
    ) -> tuple[tuple[DataFile, ...], pm.PositionMap]:
        out = rewrite_group(
            io,
            metadata.location,
            metadata.schema,
            [RewriteInput(f, deleted) for f, deleted in inputs],
            target_file_bytes,
            spec_id=group.spec_id,
            partition=group.partition,
            data_path=TableProperties(metadata.properties).write_data_path,
        )
        return out.added, out.position_map

    return run
