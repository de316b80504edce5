"""Confluent Avro values decoded a batch at a time (the ``avro`` and ``debezium-avro``
formats' fast path).

The per-record path pays for three things per value: the Confluent header checks in
Python, fastavro's body read, and the per-field ``coerce`` conversion. This path keeps
only fastavro's read:

1. **Headers, vectorized.** Lengths, the magic byte and the 4-byte schema id of every
   value are read with numpy from the Arrow binary array's buffers.
2. **Bodies, one buffer.** Records are grouped by schema id; fastavro reads each group's
   bodies from one in-memory view of the batch's value bytes, and each read must end
   exactly where its value ends.
3. **Columns, once per group.** A ``RecordPlan`` made once per writer schema (and, for
   Debezium, per envelope part) says how each Avro field becomes its column with Arrow
   alone. Arrow then builds each column from fastavro's values in one call, followed by
   one cast.

A writer schema gets a plan only when the per-record path would give the same values
with no questions. Every field must be a column of the table (no unknown fields to
report), with a type from a fixed list: boolean; int and long; float and double;
string; bytes; Avro ``date``; ``timestamp-millis`` and ``timestamp-micros``; ``decimal``
with the column's scale. For Debezium, the Connect ``Date``, ``Timestamp`` and
``MicroTimestamp`` epoch encodings are also planned.

Everything else goes to the per-record path, which keeps its exact values and dead
letters:
- a writer schema with no plan (nested records, enums, zoned-timestamp strings,
  variable-scale decimals, ...);
- a value that fails a check or a read;
- a row with a null in a required column;
- for Debezium: tombstones, deletes without a usable ``before`` key, truncate and
  message events.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from calving.commit.spec.sorted_sets import unique_sorted
from calving.commit.spec.types import PrimitiveType
from calving.ingest.decode.avro_confluent import HEADER_SIZE, ConfluentAvroReader, WriterSchema
from calving.ingest.decode.batch import (
    OP_DELETE,
    OP_UPSERT,
    BatchAssembler,
    KafkaBatch,
    Reject,
    RowConverter,
)

#: Connect epoch encodings (Debezium) this path converts: name -> (Avro type, to µs).
_CONNECT_EPOCHS = {
    "io.debezium.time.Date": ("int", 0),
    "org.apache.kafka.connect.data.Date": ("int", 0),
    "io.debezium.time.Timestamp": ("long", 1000),
    "io.debezium.time.MicroTimestamp": ("long", 1),
}
_TIMESTAMP_LOGICAL = frozenset({"timestamp-millis", "timestamp-micros"})
_ARROW_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)
_UPSERT_OPS = frozenset({"c", "r", "u"})


@dataclass(frozen=True)
class FieldPlan:
    """One Avro field -> one column: the Arrow type built from fastavro's values and how
    it becomes the column's type."""

    name: str
    read_type: pa.DataType
    target: pa.DataType
    #: Epoch milliseconds -> microseconds (Connect ``Timestamp``), else 1.
    to_micros: int = 1


def _field_type(avro: Any) -> tuple[str, dict[str, Any], bool] | None:
    """(base type, its attributes, may be null) of a field's Avro type; None for a
    union other than ``[null, T]`` or a named or complex type."""
    nullable = False
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1 or len(avro) > 2:
            return None
        nullable = len(avro) == 2
        avro = branches[0]
    attrs: dict[str, Any] = {}
    if isinstance(avro, dict):
        attrs = avro
        avro = avro.get("type")
    return (avro, attrs, nullable) if isinstance(avro, str) else None


def _read_type(
    base: str, attrs: dict[str, Any], ice: PrimitiveType, target: pa.DataType, connect: bool
) -> tuple[pa.DataType, int] | None:
    """How fastavro's value of ``base`` fills a column of Iceberg type ``ice`` with
    Arrow alone, as (type Arrow builds, ms -> µs factor); None: per record."""
    logical = attrs.get("logicalType")
    connect_name = attrs.get("connect.name")
    micros_column = pa.types.is_timestamp(target) and target.unit == "us"
    if logical is None and connect_name is None:
        plain: dict[tuple[str, str], pa.DataType] = {
            ("boolean", "boolean"): pa.bool_(),
            ("int", "int"): pa.int32(),
            ("int", "long"): pa.int64(),
            ("long", "long"): pa.int64(),
            ("float", "float"): pa.float32(),
            ("float", "double"): pa.float64(),
            ("double", "double"): pa.float64(),
            ("string", "string"): pa.string(),
            ("bytes", "binary"): pa.binary(),
        }
        found = plain.get((base, ice.name))
        return None if found is None else (found, 1)
    if logical == "date" and base == "int" and ice.name == "date":
        return pa.date32(), 1
    if logical in _TIMESTAMP_LOGICAL and base == "long" and micros_column:
        return pa.timestamp("us", tz="UTC"), 1  # fastavro gives UTC datetimes
    if logical == "decimal" and base == "bytes" and ice.name == "decimal":
        fits = attrs.get("scale", 0) == ice.scale and attrs.get("precision", 99) <= ice.precision
        return (pa.decimal128(ice.precision, ice.scale), 1) if fits else None
    if connect and logical is None and connect_name in _CONNECT_EPOCHS:
        avro_base, factor = _CONNECT_EPOCHS[connect_name]
        if base != avro_base:
            return None
        if factor == 0:
            return (pa.int32(), 1) if ice.name == "date" else None
        return (pa.int64(), factor) if micros_column else None
    return None


class RecordPlan:
    """One writer record (a schema id, or a Debezium envelope part of it) -> the table's
    columns with Arrow alone. ``only``: plan just these columns (a delete's key)."""

    def __init__(self, fields: Sequence[FieldPlan], converter: RowConverter) -> None:
        self.fields = {f.name: f for f in fields}
        self.read_schema = pa.schema([pa.field(f.name, f.read_type) for f in fields])
        self.converter = converter

    @classmethod
    def of(
        cls,
        record: Any,
        converter: RowConverter,
        connect: bool,
        only: Iterable[str] | None = None,
    ) -> RecordPlan | None:
        if not isinstance(record, dict) or record.get("type") != "record":
            return None
        columns = {f.name: f for f in converter.schema.fields}
        targets = {f.name: f.type for f in converter.arrow_schema}
        wanted = set(only) if only is not None else None
        plans: list[FieldPlan] = []
        optional: set[str] = set()
        for f in record.get("fields", ()):
            name = f.get("name") if isinstance(f, dict) else None
            if wanted is not None and name not in wanted:
                continue
            column = columns.get(name) if isinstance(name, str) else None
            parsed = _field_type(f.get("type")) if column is not None else None
            if column is None or parsed is None or not isinstance(column.field_type, PrimitiveType):
                return None  # unknown field, or a type the per-record path must handle
            base, attrs, nullable = parsed
            how = _read_type(base, attrs, column.field_type, targets[column.name], connect)
            if how is None:
                return None
            plans.append(FieldPlan(column.name, how[0], targets[column.name], how[1]))
            if nullable:
                optional.add(column.name)
        planned = {p.name for p in plans}
        needed = (
            wanted
            if wanted is not None
            else {f.name for f in columns.values() if f.required or f.write_default is not None}
        )
        if not needed <= planned:
            return None  # a required or defaulted column (or key) the writer schema lacks
        return cls(plans, converter)

    def columns(
        self, objs: list[Any], required: Iterable[str]
    ) -> tuple[list[pa.Array], np.ndarray]:
        """The table's columns for ``objs`` (other columns null) and a mask of rows that
        must go the per-record way (a null in a ``required`` column). Raises
        ``pa.ArrowException`` (or a conversion error) if Arrow refuses a value."""
        n = len(objs)
        raw = pa.Table.from_pylist(objs, schema=self.read_schema)
        bad = np.zeros(n, dtype=bool)
        needed = set(required)
        out: list[pa.Array] = []
        for column in self.converter.arrow_schema:
            plan = self.fields.get(column.name)
            if plan is None:
                out.append(pa.nulls(n, column.type))
                continue
            arr = raw.column(plan.name).combine_chunks()
            if plan.to_micros != 1:
                arr = pc.multiply_checked(arr, plan.to_micros)
            if arr.type != column.type:
                arr = arr.cast(column.type)
            if column.name in needed and arr.null_count:
                bad |= arr.is_null().to_numpy(zero_copy_only=False)
            out.append(arr)
        return out, bad


@dataclass
class SchemaGroup:
    """The records of one batch read with one writer schema."""

    writer: WriterSchema
    rows: list[int]
    values: list[Any]


class BodyReader:
    """Confluent-framed values -> fastavro values, grouped by writer schema; what cannot
    be read here (null, short or unframed values, unknown ids, bad bodies) is left for
    the per-record path, which explains it."""

    def __init__(self, reader: ConfluentAvroReader) -> None:
        self.reader = reader

    def read(self, values: pa.Array, rows: np.ndarray) -> tuple[list[SchemaGroup], list[int]]:
        starts, ends, ids, framed = _frames(values)
        leftover: list[int] = [int(i) for i in rows[~framed[rows]]]
        rows = rows[framed[rows]]
        groups: list[SchemaGroup] = []
        if not len(rows):
            return groups, leftover
        data = values.buffers()[2]
        view = io.BytesIO(memoryview(data) if data is not None else b"")
        read = fastavro.schemaless_reader
        for schema_id in unique_sorted(ids[rows]).tolist():
            members = rows[ids[rows] == schema_id]
            try:
                writer = self.reader.writer_schema(int(schema_id))
            except Reject:
                leftover += members.tolist()
                continue
            group = SchemaGroup(writer, [], [])
            parsed = writer.parsed
            for i, start, end in zip(
                members.tolist(), starts[members].tolist(), ends[members].tolist()
            ):
                view.seek(start + HEADER_SIZE)
                try:
                    value = read(view, parsed, None)
                except Exception:  # noqa: BLE001 - the per-record path names the problem
                    leftover.append(i)
                    continue
                if view.tell() != end:
                    leftover.append(i)
                    continue
                group.rows.append(i)
                group.values.append(value)
            groups.append(group)
        return groups, leftover


def _frames(values: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Start and end (in the data buffer), schema id and whether each value is a
    Confluent frame (not null, at least 5 bytes, magic byte 0)."""
    n = len(values)
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[
        values.offset : values.offset + n + 1
    ]
    starts, ends = offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64)
    data_buffer = values.buffers()[2]
    data = (
        np.frombuffer(data_buffer, dtype=np.uint8)
        if data_buffer is not None
        else np.zeros(0, np.uint8)
    )
    framed = values.is_valid().to_numpy(zero_copy_only=False) & (ends - starts >= HEADER_SIZE)
    at = np.where(framed, starts, 0)
    if len(data) == 0:
        framed &= False
    else:
        framed &= data[np.minimum(at, len(data) - 1)] == 0
    ids = np.zeros(n, dtype=np.int64)
    if framed.any():
        head = at[framed]
        for k in range(1, 5):
            ids[framed] = (ids[framed] << 8) | data[head + k]
    return starts, ends, ids, framed


class PlanCache:
    """Record plans by (schema id, part, key-only), made once each."""

    def __init__(self, converter: RowConverter, connect: bool) -> None:
        self.converter = converter
        self.connect = connect
        self._plans: dict[tuple[int, str | None, bool], RecordPlan | None] = {}

    def get(
        self, writer: WriterSchema, part: str | None, keys_only: bool = False
    ) -> RecordPlan | None:
        cache_key = (writer.schema_id, part, keys_only)
        if cache_key not in self._plans:
            record = writer.record(part)
            only = self.converter.key_names if keys_only else None
            self._plans[cache_key] = RecordPlan.of(record, self.converter, self.connect, only)
        return self._plans[cache_key]


def add_planned(
    out: BatchAssembler,
    plan: RecordPlan | None,
    rows: list[int],
    objs: list[Any],
    required: Iterable[str],
    op: int,
) -> list[int]:
    """Adds the rows ``plan`` can build to ``out``; returns the rows left for the
    per-record path (all of them without a plan or if Arrow refuses a value)."""
    if plan is None or not rows:
        return rows
    try:
        columns, bad = plan.columns(objs, required)
    except _ARROW_ERRORS:
        return rows
    index = np.asarray(rows, dtype=np.int64)
    if bad.any():
        keep = pa.array(~bad)
        columns = [c.filter(keep) for c in columns]
    out.add_arrow_rows(index[~bad], columns, op)
    left: list[int] = index[bad].tolist()  # numpy's tolist is untyped; index is int64
    return left


class AvroBatchReader:
    """The ``avro`` format's fast path: every planned record becomes an upsert row."""

    def __init__(self, converter: RowConverter, reader: ConfluentAvroReader) -> None:
        self.bodies = BodyReader(reader)
        self.plans = PlanCache(converter, connect=False)
        self.required = [f.name for f in converter.schema.fields if f.required]
        #: Records this reader decoded (the rest went to the per-record path).
        self.decoded = 0

    def read(self, batch: KafkaBatch, out: BatchAssembler) -> list[int]:
        """Decodes what it can into ``out``; returns the batch rows left, in order."""
        groups, leftover = self.bodies.read(batch.value_array, np.arange(batch.num_rows))
        for g in groups:
            plan = self.plans.get(g.writer, None)
            leftover += add_planned(out, plan, g.rows, g.values, self.required, OP_UPSERT)
        self.decoded += batch.num_rows - len(leftover)
        return sorted(leftover)


class DebeziumAvroBatchReader:
    """The ``debezium-avro`` format's fast path: creates, snapshot reads and updates
    with an ``after`` record become upserts, deletes with a ``before`` key become
    key-only delete rows; everything else is left for the per-event path."""

    def __init__(self, converter: RowConverter, reader: ConfluentAvroReader) -> None:
        self.bodies = BodyReader(reader)
        self.plans = PlanCache(converter, connect=True)
        self.required = [f.name for f in converter.schema.fields if f.required]
        self.keys = list(converter.key_names)
        self.decoded = 0

    def read(self, batch: KafkaBatch, out: BatchAssembler) -> list[int]:
        groups, leftover = self.bodies.read(batch.value_array, np.arange(batch.num_rows))
        for g in groups:
            after_plan = self.plans.get(g.writer, "after")
            key_plan = self.plans.get(g.writer, "before", keys_only=True)
            upserts: tuple[list[int], list[Any]] = ([], [])
            deletes: tuple[list[int], list[Any]] = ([], [])
            for i, event in zip(g.rows, g.values):
                op = event.get("op") if isinstance(event, dict) else None
                image = None
                if op in _UPSERT_OPS and after_plan is not None:
                    image, into = event.get("after"), upserts
                elif op == "d" and key_plan is not None:
                    image, into = event.get("before"), deletes
                if isinstance(image, dict):
                    into[0].append(i)
                    into[1].append(image)
                else:
                    leftover.append(i)
            leftover += add_planned(out, after_plan, *upserts, self.required, OP_UPSERT)
            leftover += add_planned(out, key_plan, *deletes, self.keys, OP_DELETE)
        self.decoded += batch.num_rows - len(leftover)
        return sorted(leftover)
