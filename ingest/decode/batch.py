"""What every decoder takes and gives back.

In: the Kafka source's Arrow batch (``key``, ``value``, ``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType``, optional ``headers``).

Out: a ``DecodedBatch``: ``rows`` in the table's Arrow schema plus ``_op`` (0 upsert or
insert, 1 delete), ``_partition``, ``_offset`` and ``_topic``; ``dead_letters`` with the
record's coordinates, its raw bytes and a typed error; and the unknown fields of the
rows (never of dead letters: they must not add columns). Every
input record lands in exactly one of the two tables: ``BatchAssembler.finish`` checks it.
Delete rows carry only the identifier columns; their other columns are null even where
the schema says required (the sink reads only the keys of delete rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol, cast

import numpy as np
import pyarrow as pa

from calving.commit.errors import ConfigError, CorruptRecordError, Terminal
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import PrimitiveType
from calving.ingest.decode.coerce import (
    CoercionError,
    CoercionOptions,
    StructConverter,
    UnknownFields,
    build_converter,
)
from calving.ingest.write.arrow_schema import schema_to_arrow

OP_UPSERT = 0
OP_DELETE = 1
META_COLUMNS = ("_op", "_partition", "_offset", "_topic")
_ARROW_BUILD_ERRORS = (pa.ArrowException, ValueError, TypeError, OverflowError, UnicodeError)

DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("error", pa.string()),
        pa.field("error_type", pa.string()),
        pa.field("decoder", pa.string()),
    ]
)


# ---------------------------------------------------------------- typed record errors


class RecordDecodeError(CorruptRecordError):
    """Base of the errors that send one Kafka record to the dead letters."""


class MalformedRecordError(RecordDecodeError):
    """The bytes are not what the format promises: invalid UTF-8, invalid JSON, a JSON
    value that is not an object, Avro that does not decode, nesting too deep."""


class NullValueError(RecordDecodeError):
    """A record without a value where a value is required (plain append mode)."""


class SchemaMismatchError(RecordDecodeError):
    """The record decodes but does not fit the table schema (missing required field,
    wrong type, value out of range, not losslessly coercible)."""


class WireFormatError(RecordDecodeError):
    """The Confluent wire format header is wrong: missing magic byte 0 or truncated."""


class UnknownSchemaIdError(RecordDecodeError):
    """The record names a schema id neither the registry nor the schema files know (or
    whose schema does not parse); the message names the id."""


class MissingKeyError(RecordDecodeError):
    """A keyed record (upsert, delete, tombstone) whose key is absent or undecodable."""


class UnsupportedOperationError(RecordDecodeError):
    """A change event this sink cannot express as rows (e.g. Debezium truncate)."""


class DecoderInvariantError(Terminal):
    """A decoder bug: a record came out as neither a row nor a dead letter, or twice."""


class Reject(Exception):
    """Raised inside a decoder's per-record code; the loop turns it into the typed
    ``error_class`` with the record's coordinates."""

    def __init__(self, error_class: type[RecordDecodeError], reason: str) -> None:
        super().__init__(reason)
        self.error_class = error_class
        self.reason = reason


# ---------------------------------------------------------------- in and out


class RowConverter:
    """One table schema, compiled: decoded objects -> column values -> Arrow table."""

    def __init__(self, schema: Schema, options: CoercionOptions | None = None) -> None:
        self.schema = schema
        self.options = options or CoercionOptions()
        clash = [f.name for f in schema.fields if f.name in META_COLUMNS]
        if clash:
            raise ConfigError(f"table columns {clash} clash with the decoder's metadata columns")
        self.arrow_schema = schema_to_arrow(schema)
        self.output_schema = self.arrow_schema
        for name, typ in zip(META_COLUMNS, (pa.int8(), pa.int32(), pa.int64(), pa.string())):
            self.output_schema = self.output_schema.append(pa.field(name, typ, nullable=False))
        self._struct = StructConverter(schema.fields, self.options)
        self.column_names = self._struct.names
        self.key_names = schema.identifier_field_names
        self.key_positions = tuple(self.column_names.index(n) for n in self.key_names)
        self.column_converters = {
            f.name: build_converter(f.field_type, self.options) for f in schema.fields
        }

    @property
    def has_decimal(self) -> bool:
        return any(
            isinstance(f.field_type, PrimitiveType) and f.field_type.name == "decimal"
            for f in self.schema.all_fields()
        )

    def convert(self, obj: Mapping[str, Any], unknown: UnknownFields | None = None) -> list[Any]:
        """A decoded top-level object -> one value per column (schema order)."""
        return self._struct.values(obj, unknown, "")

    def convert_keys(self, obj: Mapping[str, Any]) -> list[Any]:
        """A key object -> a row with only the identifier columns set (a delete row)."""
        row: list[Any] = [None] * len(self.column_names)
        for name, pos in zip(self.key_names, self.key_positions):
            v = obj.get(name)
            if v is None and self.options.case_insensitive:
                v = next((x for k, x in obj.items() if str(k).lower() == name.lower()), None)
            if v is None:
                raise CoercionError("key field is missing or null").at(name)
            try:
                row[pos] = self.column_converters[name](v)
            except CoercionError as exc:
                raise exc.at(name) from None
        return row

    def column_arrays(self, rows: list[list[Any]]) -> tuple[list[pa.Array], dict[int, str]]:
        """Column values -> Arrow arrays; returns the arrays and the indexes of rows that
        Arrow refused (e.g. a string with a lone surrogate) with the column that refused
        them; the caller dead-letters those rows.
        """
        bad: dict[int, str] = {}
        arrays = []
        for i, column in enumerate(self.arrow_schema):
            values = [r[i] for r in rows]
            try:
                arrays.append(pa.array(values, type=column.type))
                continue
            except _ARROW_BUILD_ERRORS:
                pass
            for j, v in enumerate(values):
                try:
                    pa.array([v], type=column.type)
                except _ARROW_BUILD_ERRORS:
                    bad.setdefault(j, column.name)
                    values[j] = None
            arrays.append(pa.array(values, type=column.type))
        return arrays, bad

    def empty_rows(self) -> pa.Table:
        return self.output_schema.empty_table()


@dataclass
class DecodedBatch:
    rows: pa.Table
    dead_letters: pa.Table
    unknown_fields: dict[str, frozenset[str]] = field(default_factory=dict)
    """Dotted field path -> type names seen (``long``, ``double``, ``string``, ``boolean``,
    ``struct``, ``list``, ``null`` ...) for fields the table schema lacks."""


class Decoder(Protocol):
    name: str

    def decode(self, data: pa.Table | pa.RecordBatch) -> DecodedBatch: ...


class KafkaBatch:
    """Read-only view of the Kafka source's batch, columns materialised on demand."""

    def __init__(self, data: pa.Table | pa.RecordBatch) -> None:
        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        self.table = table.combine_chunks()
        self.num_rows = self.table.num_rows

    def column(self, name: str, typ: pa.DataType) -> pa.Array:
        if name not in self.table.column_names:
            return pa.nulls(self.num_rows, typ)
        col = self.table.column(name)
        if col.num_chunks == 0:
            arr = pa.array([], col.type)
        else:
            arr = col.chunk(0) if col.num_chunks == 1 else pa.concat_arrays(col.chunks)
        return arr if arr.type == typ else arr.cast(typ)

    @cached_property
    def value_array(self) -> pa.Array:
        return self.column("value", pa.binary())

    @cached_property
    def key_array(self) -> pa.Array:
        return self.column("key", pa.binary())

    # pyarrow is untyped (to_pylist returns Any); each column was cast to the type below.

    @cached_property
    def values(self) -> list[bytes | None]:
        return cast(list[bytes | None], self.value_array.to_pylist())

    @cached_property
    def keys(self) -> list[bytes | None]:
        return cast(list[bytes | None], self.key_array.to_pylist())

    @cached_property
    def topics(self) -> list[str]:
        return cast(list[str], self.column("topic", pa.string()).to_pylist())

    @cached_property
    def partitions(self) -> list[int]:
        return cast(list[int], self.column("partition", pa.int32()).to_pylist())

    @cached_property
    def offsets(self) -> list[int]:
        return cast(list[int], self.column("offset", pa.int64()).to_pylist())

    def error(self, index: int, error_class: type[RecordDecodeError], reason: str) -> Any:
        return error_class(
            str(self.topics[index]), _int(self.partitions[index]), _int(self.offsets[index]), reason
        )


def _int(v: int | None) -> int:
    return -1 if v is None else v


class BatchAssembler:
    """Collects each record's outcome and builds the two output tables."""

    def __init__(self, batch: KafkaBatch, converter: RowConverter, decoder: str) -> None:
        self.batch = batch
        self.converter = converter
        self.decoder = decoder
        self._row_index: list[int] = []
        self._row_ops: list[int] = []
        self._row_values: list[list[Any]] = []
        self._arrow_parts: list[tuple[np.ndarray, list[pa.Array], int]] = []
        self._dead_index: list[int] = []
        self._dead_errors: list[RecordDecodeError] = []
        #: Unknown fields of the record being decoded: decoders collect into it, then
        #: ``add_row``/``add_arrow_rows`` keep it for those rows and ``reject`` drops it.
        self.unknown: dict[str, set[str]] = {}
        self._unknown_of: list[tuple[np.ndarray, dict[str, set[str]]]] = []

    def _keep_unknown(self, indices: np.ndarray) -> None:
        if self.unknown:
            self._unknown_of.append((indices, self.unknown))
            self.unknown = {}

    def add_row(self, index: int, op: int, values: list[Any]) -> None:
        self._keep_unknown(np.array([index], dtype=np.int64))
        self._row_index.append(index)
        self._row_ops.append(op)
        self._row_values.append(values)

    def add_arrow_rows(
        self, indices: np.ndarray, columns: list[pa.Array], op: int = OP_UPSERT
    ) -> None:
        """Rows already in Arrow form (the vectorized paths), all upserts or all deletes."""
        if len(indices):
            indices = np.asarray(indices, dtype=np.int64)
            self._keep_unknown(indices)
            self._arrow_parts.append((indices, columns, op))

    def add_dead(self, index: int, error: RecordDecodeError) -> None:
        self.unknown = {}  # a dead letter's unknown fields never become columns
        self._dead_index.append(index)
        self._dead_errors.append(error)

    def reject(self, index: int, problem: Reject | CoercionError) -> None:
        # Its unknown fields are named in the error (a misspelt column is often the cause).
        extra = f"; fields not in the table: {', '.join(sorted(self.unknown))}"
        extra = extra if self.unknown else ""
        if isinstance(problem, CoercionError):
            reason = problem.describe() + extra
            self.add_dead(index, self.batch.error(index, SchemaMismatchError, reason))
        else:
            reason = problem.reason + extra
            self.add_dead(index, self.batch.error(index, problem.error_class, reason))

    def finish(self) -> DecodedBatch:
        conv = self.converter
        parts: list[pa.Table] = []
        indices: list[np.ndarray] = []
        ops: list[np.ndarray] = []
        if self._row_values:
            arrays, refused = conv.column_arrays(self._row_values)
            table = pa.Table.from_arrays(arrays, schema=conv.arrow_schema)
            index = np.asarray(self._row_index, dtype=np.int64)
            op = np.asarray(self._row_ops, dtype=np.int8)
            if refused:
                keep = np.ones(len(index), dtype=bool)
                for pos, column in refused.items():
                    keep[pos] = False
                    reason = f"field {column!r}: value cannot be stored in Arrow (invalid text?)"
                    self.add_dead(
                        int(index[pos]),
                        self.batch.error(int(index[pos]), SchemaMismatchError, reason),
                    )
                table, index, op = table.filter(pa.array(keep)), index[keep], op[keep]
            parts.append(table)
            indices.append(index)
            ops.append(op)
        for index, columns, op_code in self._arrow_parts:
            parts.append(pa.Table.from_arrays(columns, schema=conv.arrow_schema))
            indices.append(index)
            ops.append(np.full(len(index), op_code, dtype=np.int8))
        rows = self._rows_table(parts, indices, ops)
        dead = self._dead_table()
        self._check_partition(indices)
        return DecodedBatch(rows=rows, dead_letters=dead, unknown_fields=self._live_unknown())

    def _live_unknown(self) -> dict[str, frozenset[str]]:
        """Unknown fields of the records that became rows (not of dead letters)."""
        dead = np.asarray(self._dead_index, dtype=np.int64)
        live: dict[str, set[str]] = {}
        for indices, fields in self._unknown_of:
            if len(dead) and np.isin(indices, dead).all():
                continue
            for path, kinds in fields.items():
                live.setdefault(path, set()).update(kinds)
        return {k: frozenset(v) for k, v in sorted(live.items())}

    def _rows_table(
        self, parts: list[pa.Table], indices: list[np.ndarray], ops: list[np.ndarray]
    ) -> pa.Table:
        conv = self.converter
        if not parts:
            return conv.empty_rows()
        table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        index = np.concatenate(indices)
        op = np.concatenate(ops)
        order = np.argsort(index, kind="stable")
        table = table.take(pa.array(order))
        index = index[order]
        source = pa.array(index)
        extra = [
            pa.array(op[order], pa.int8()),
            self.batch.column("partition", pa.int32()).take(source),
            self.batch.column("offset", pa.int64()).take(source),
            self.batch.column("topic", pa.string()).take(source),
        ]
        arrays = [c.combine_chunks() for c in table.columns] + extra
        return pa.Table.from_arrays(arrays, schema=conv.output_schema)

    def _dead_table(self) -> pa.Table:
        if not self._dead_index:
            return DEAD_LETTER_SCHEMA.empty_table()
        order = np.argsort(np.asarray(self._dead_index, dtype=np.int64), kind="stable")
        index = pa.array(np.asarray(self._dead_index, dtype=np.int64)[order])
        errors = [self._dead_errors[i] for i in order]
        b = self.batch
        columns = [
            b.column("topic", pa.string()).take(index),
            b.column("partition", pa.int32()).take(index),
            b.column("offset", pa.int64()).take(index),
            b.column("timestamp", pa.timestamp("us", tz="UTC")).take(index),
            b.key_array.take(index),
            b.value_array.take(index),
            pa.array([str(e) for e in errors], pa.string()),
            pa.array([type(e).__name__ for e in errors], pa.string()),
            pa.array([self.decoder] * len(errors), pa.string()),
        ]
        return pa.Table.from_arrays(columns, schema=DEAD_LETTER_SCHEMA)

    def _check_partition(self, row_indices: Sequence[np.ndarray]) -> None:
        seen = np.zeros(self.batch.num_rows, dtype=np.int64)
        for idx in row_indices:
            np.add.at(seen, idx, 1)
        np.add.at(seen, np.asarray(self._dead_index, dtype=np.int64), 1)
        if (seen != 1).any():
            wrong = np.flatnonzero(seen != 1)[:10].tolist()
            raise DecoderInvariantError(
                f"{self.decoder}: batch rows {wrong} came out {seen[wrong].tolist()} times"
            )


__all__ = [
    "DEAD_LETTER_SCHEMA",
    "META_COLUMNS",
    "OP_DELETE",
    "OP_UPSERT",
    "BatchAssembler",
    "DecodedBatch",
    "Decoder",
    "DecoderInvariantError",
    "KafkaBatch",
    "MalformedRecordError",
    "MissingKeyError",
    "NullValueError",
    "RecordDecodeError",
    "Reject",
    "RowConverter",
    "SchemaMismatchError",
    "UnknownSchemaIdError",
    "UnsupportedOperationError",
    "WireFormatError",
]
