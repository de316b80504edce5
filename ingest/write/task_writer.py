"""Executor-side writing of one Spark task's rows: partition fanout, rolling files.

Rows are buffered per partition and flushed to a Parquet file once the buffer
reaches ``write.target-file-size-bytes`` of Arrow memory (compressed files come out
smaller, never larger than the target by more than one batch). Every file name
carries the writer id, batch id, task id and a per-attempt UUID, so a replayed
batch never overwrites a file that a committed snapshot references.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from calving.commit.errors import SchemaError
from calving.commit.io import FileIO
from calving.commit.io_sync import synced_together
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.partition import PartitionSpec
from calving.commit.spec.schema import Schema
from calving.ingest.write.arrow_schema import schema_to_arrow
from calving.ingest.write.parquet_writer import write_data_file

DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024


@dataclass(frozen=True)
class WrittenFile:
    data_file: DataFile
    keys: pa.Table | None  # identifier columns in file row order (keyed tables)


class TaskWriter:
    def __init__(
        self,
        io: FileIO,
        table_location: str,
        schema: Schema,
        spec: PartitionSpec,
        *,
        file_prefix: str,
        target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
        data_path: str | None = None,
    ) -> None:
        self.io = io
        self.schema = schema
        self.spec = spec
        self.arrow_schema = schema_to_arrow(schema)
        self.data_path = (data_path or f"{table_location.rstrip('/')}/data").rstrip("/")
        self.prefix = f"{file_prefix}-{uuid.uuid4().hex[:12]}"
        self.target = target_file_size
        self.key_names = [schema.column_name(i) for i in schema.identifier_field_ids]
        self._buffers: dict[tuple[Any, ...], list[pa.Table]] = {}
        self._sizes: dict[tuple[Any, ...], int] = {}
        self._count = 0
        self.written: list[WrittenFile] = []

    def write(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        rows = rows.select(self.arrow_schema.names).cast(self.arrow_schema)
        for partition, part_rows in self._split(rows):
            self._buffers.setdefault(partition, []).append(part_rows)
            self._sizes[partition] = self._sizes.get(partition, 0) + part_rows.nbytes
            if self._sizes[partition] >= self.target:
                self._flush(partition)

    def close(self) -> list[WrittenFile]:
        with synced_together():  # one file per partition: their fsyncs overlap
            for partition in list(self._buffers):
                self._flush(partition)
        return self.written

    def _split(self, rows: pa.Table) -> list[tuple[tuple[Any, ...], pa.Table]]:
        if not self.spec.fields:
            return [((), rows)]
        types = self.spec.source_types(self.schema)
        keys = []
        for f, t in zip(self.spec.fields, types):
            name = self.schema.column_name(f.source_id)
            if name is None:
                raise SchemaError(
                    f"partition field {f.name!r}: source id {f.source_id} is not in the schema"
                )
            column = rows.column(name) if "." not in name else _nested(rows, name)
            keys.append(_internal_keys(f.transform.apply_arrow(column.combine_chunks(), t)))
        key_table = pa.table({f"p{i}": k for i, k in enumerate(keys)})
        groups = key_table.group_by(key_table.column_names, use_threads=False).aggregate([])
        out = []
        for g in groups.to_pylist():
            mask = None
            for name, value in g.items():
                col = key_table.column(name)
                cond = pc.is_null(col) if value is None else pc.equal(col, value)
                mask = cond if mask is None else pc.and_(mask, cond)
            partition = tuple(g.values())
            out.append((partition, rows.filter(mask)))
        return out

    def _flush(self, partition: tuple[Any, ...]) -> None:
        parts = self._buffers.pop(partition, [])
        self._sizes.pop(partition, None)
        if not parts:
            return
        table = pa.concat_tables(parts)
        self._count += 1
        sub = self.spec.partition_path(self.schema, partition) if self.spec.fields else ""
        directory = f"{self.data_path}/{sub}" if sub else self.data_path
        location = f"{directory}/{self.prefix}-{self._count:05d}.parquet"
        data_file = write_data_file(
            self.io, location, table, self.schema, partition=partition, spec_id=self.spec.spec_id
        )
        keys = table.select(self.key_names) if self.key_names else None
        self.written.append(WrittenFile(data_file, keys))


def _nested(rows: pa.Table, dotted: str) -> pa.ChunkedArray:
    parts = dotted.split(".")
    col: Any = rows.column(parts[0])
    for p in parts[1:]:
        col = pc.struct_field(col, p)
    return col


def _internal_keys(keys: pa.Array) -> pa.Array:
    """Partition values in calving's internal forms: dates (``day``, ``identity`` of a
    date) as day numbers, times and timestamps (``identity``) as integers in their unit."""
    t = keys.type
    if pa.types.is_date32(t):
        return keys.cast(pa.int32())
    if pa.types.is_timestamp(t) or pa.types.is_time64(t):
        return keys.cast(pa.int64())
    return keys


def write_rows(
    io: FileIO,
    table_location: str,
    schema: Schema,
    spec: PartitionSpec,
    batches: Sequence[pa.Table],
    file_prefix: str,
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
) -> list[WrittenFile]:
    writer = TaskWriter(
        io, table_location, schema, spec, file_prefix=file_prefix, target_file_size=target_file_size
    )
    for b in batches:
        writer.write(b)
    return writer.close()
