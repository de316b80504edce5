"""Functions Spark runs on executors through ``mapInArrow``: no driver state.

Each task filters out records the table's ledger already holds, decodes, writes data
files, and emits commit messages: one per data file, the keys deleted by the batch,
the Kafka offset range it saw (``kind="range"``), and dead letters. The driver only
ever collects these small message rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from commit.io import FileIO
from commit.spec.metadata import parse_metadata
from commit.spec.partition import PartitionSpec
from commit.spec.schema import Schema
from ingest.sink.messages import (
    MESSAGE_SCHEMA,
    data_file_to_json,
    message_batch,
    table_to_ipc,
)
from ingest.write.arrow_schema import schema_to_arrow
from ingest.write.task_writer import TaskWriter

META_COLUMNS = ("_op", "_topic", "_partition", "_offset")
OP_UPSERT, OP_DELETE = 0, 1


@dataclass(frozen=True)
class TaskPlan:
    """Everything a task needs, pickled once per batch."""

    metadata_json: bytes  # the table's metadata (schema, spec, location, properties)
    metadata_location: str
    decoder: Any  # picklable object with .decode(pa.Table) -> (rows, dead_letters)
    ledger: dict[tuple[str, int], int] = field(default_factory=dict)
    file_prefix: str = "calving"
    dead_letter_metadata_json: bytes | None = None
    dead_letter_location: str | None = None

    def table(self) -> tuple[Schema, PartitionSpec, str, int]:
        m = parse_metadata(self.metadata_json, self.metadata_location)
        target = int(m.properties.get("write.target-file-size-bytes", 512 * 1024 * 1024))
        return m.schema, m.spec, m.location, target


def below_ledger_mask(batch: pa.Table, ledger: dict[tuple[str, int], int]) -> pa.Array | None:
    """True for records the ledger already covers (to be dropped)."""
    if not ledger or batch.num_rows == 0:
        return None
    mask = None
    for (topic, partition), next_offset in ledger.items():
        cond = pc.and_(pc.and_(pc.equal(batch.column("topic"), topic),
                               pc.equal(batch.column("partition"), partition)),
                       pc.less(batch.column("offset"), next_offset))
        mask = cond if mask is None else pc.or_(mask, cond)
    return mask


def range_messages(batch: pa.Table) -> list[dict[str, Any]]:
    if batch.num_rows == 0:
        return []
    g = batch.group_by(["topic", "partition"]).aggregate([("offset", "min"), ("offset", "max")])
    return [{"kind": "range", "payload": json.dumps([r["topic"], r["partition"], r["offset_min"],
                                                     r["offset_max"] + 1]),
             "keys": None, "count": r["offset_max"] - r["offset_min"] + 1}
            for r in g.to_pylist()]


def _dead_letter_messages(plan: TaskPlan, dead: pa.Table, io: FileIO) -> list[dict[str, Any]]:
    if dead.num_rows == 0:
        return []
    if plan.dead_letter_metadata_json is None:
        return [{"kind": "deadletter-count", "payload": "", "keys": None,
                 "count": dead.num_rows}]
    m = parse_metadata(plan.dead_letter_metadata_json, plan.dead_letter_location or "dlq")
    writer = TaskWriter(io, m.location, m.schema, m.spec, file_prefix=plan.file_prefix + "-dlq")
    writer.write(dead)
    return [{"kind": "deadletter", "payload": data_file_to_json(w.data_file), "keys": None,
             "count": w.data_file.record_count} for w in writer.close()]


def decode_and_write_append(plan: TaskPlan) -> Callable[[Iterator[pa.RecordBatch]],
                                                        Iterator[pa.RecordBatch]]:
    """Append tables: decode + write in one pass."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema, spec, location, target = plan.table()
        io = FileIO()
        writer = TaskWriter(io, location, schema, spec, file_prefix=plan.file_prefix,
                            target_file_size=target)
        messages: list[dict[str, Any]] = []
        dead_parts = []
        for rb in batches:
            batch = pa.Table.from_batches([rb])
            mask = below_ledger_mask(batch, plan.ledger)
            if mask is not None:
                batch = batch.filter(pc.invert(mask))
            messages += range_messages(batch)
            if batch.num_rows == 0:
                continue
            rows, dead = plan.decoder.decode(batch)
            if dead.num_rows:
                dead_parts.append(dead)
            if rows.num_rows:
                writer.write(rows.drop_columns([c for c in META_COLUMNS if c in rows.column_names]))
        for w in writer.close():
            messages.append({"kind": "data", "payload": data_file_to_json(w.data_file),
                             "keys": None, "count": w.data_file.record_count})
        if dead_parts:
            messages += _dead_letter_messages(plan, pa.concat_tables(dead_parts), io)
        yield message_batch(messages)

    return run


def decode_for_keyed(plan: TaskPlan, out_schema: pa.Schema) -> Callable[
        [Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Keyed tables, stage 1: decode; messages ride along in the ``_meta`` column."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        io = FileIO()
        dead_parts = []
        for rb in batches:
            batch = pa.Table.from_batches([rb])
            mask = below_ledger_mask(batch, plan.ledger)
            if mask is not None:
                batch = batch.filter(pc.invert(mask))
            meta = range_messages(batch)
            if batch.num_rows:
                rows, dead = plan.decoder.decode(batch)
                if dead.num_rows:
                    dead_parts.append(dead)
                if rows.num_rows:
                    rows = rows.append_column("_meta", pa.nulls(rows.num_rows, pa.string()))
                    yield _conform(rows, out_schema).to_batches()[0] if rows.num_rows else None
            if meta:
                yield _meta_rows(meta, out_schema)
        if dead_parts:
            yield _meta_rows(_dead_letter_messages(plan, pa.concat_tables(dead_parts), io),
                             out_schema)

    def filtered(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in run(batches):
            if b is not None and b.num_rows:
                yield b

    return filtered


def collapse_and_write(plan: TaskPlan) -> Callable[[Iterator[pa.RecordBatch]],
                                                   Iterator[pa.RecordBatch]]:
    """Keyed tables, stage 2 (after repartition by key): keep each key's last event in
    Kafka order, write upserts, report every key touched so the driver can delete
    earlier versions through deletion vectors."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema, spec, location, target = plan.table()
        keys = [schema.column_name(i) for i in schema.identifier_field_ids]
        tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        messages: list[dict[str, Any]] = []
        if not tables:
            yield message_batch(messages)
            return
        data = pa.concat_tables(tables)
        is_meta = pc.is_valid(data.column("_meta"))
        for payload in data.filter(is_meta).column("_meta").to_pylist():
            messages.append(json.loads(payload))
        data = data.filter(pc.invert(is_meta)).drop_columns(["_meta"])
        if data.num_rows:
            data = data.append_column("_seq", pa.array(range(data.num_rows), pa.int64()))
            data = data.sort_by([("_topic", "ascending"), ("_partition", "ascending"),
                                 ("_offset", "ascending")])
            data = data.set_column(data.column_names.index("_seq"), "_seq",
                                   pa.array(range(data.num_rows), pa.int64()))
            last = data.group_by(keys, use_threads=False).aggregate([("_seq", "max")])
            data = data.take(last.column("_seq_max"))  # _seq is the row index here
            upserts = data.filter(pc.equal(data.column("_op"), OP_UPSERT))
            deletes = data.filter(pc.equal(data.column("_op"), OP_DELETE))
            writer = TaskWriter(FileIO(), location, schema, spec, file_prefix=plan.file_prefix,
                                target_file_size=target)
            writer.write(upserts.drop_columns([*META_COLUMNS, "_seq"]))
            for w in writer.close():
                messages.append({"kind": "data", "payload": data_file_to_json(w.data_file),
                                 "keys": table_to_ipc(w.keys), "count": w.data_file.record_count})
            if deletes.num_rows:
                messages.append({"kind": "deletes", "payload": "",
                                 "keys": table_to_ipc(deletes.select(keys)),
                                 "count": deletes.num_rows})
        yield message_batch(messages)

    return run


def keyed_stage_schema(schema: Schema) -> pa.Schema:
    base = schema_to_arrow(schema)
    extra = [pa.field("_op", pa.int8()), pa.field("_topic", pa.string()),
             pa.field("_partition", pa.int32()), pa.field("_offset", pa.int64()),
             pa.field("_meta", pa.string())]
    return pa.schema([pa.field(f.name, f.type, True) for f in base] + extra)


def _conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    cols = [rows.column(f.name).cast(f.type) if f.name in rows.column_names
            else pa.nulls(rows.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def _meta_rows(messages: list[dict[str, Any]], schema: pa.Schema) -> pa.RecordBatch:
    n = len(messages)
    cols = [pa.array([json.dumps(_json_safe(m)) for m in messages], pa.string())
            if f.name == "_meta" else pa.nulls(n, f.type) for f in schema]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _json_safe(m: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if k != "keys"}


__all__ = ["MESSAGE_SCHEMA", "TaskPlan", "decode_and_write_append", "decode_for_keyed",
           "collapse_and_write", "keyed_stage_schema"]
