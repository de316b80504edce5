"""Confluent wire-format Avro values -> table rows.

Wire format: magic byte 0, the writer schema id as 4 bytes big-endian, then the Avro
binary body (no container header). The writer schema comes from a ``SchemaSource``
(registry or ``<id>.avsc`` files), parsed once per id. Avro record fields are matched to
columns by name; logical types arrive as Python objects (date, time, timestamp-millis/
micros as datetimes, decimal as ``Decimal``, uuid as ``UUID``) and ``coerce`` checks them;
``timestamp-nanos`` (which fastavro leaves as an int) is unwrapped here from the schema.

A bad magic byte, a truncated header or body, trailing bytes after the body, and a schema
id the source does not know are dead letters naming the id; a registry that is down is a
``SchemaRegistryUnavailableError`` raised out of ``decode`` (transient: retry the batch).
"""

from __future__ import annotations

import io
import json
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import fastavro
import pyarrow as pa

from calving.commit.spec.schema import Schema
from calving.ingest.decode.batch import (
    OP_UPSERT,
    BatchAssembler,
    DecodedBatch,
    KafkaBatch,
    MalformedRecordError,
    NullValueError,
    Reject,
    RowConverter,
    UnknownSchemaIdError,
    WireFormatError,
)
from calving.ingest.decode.coerce import (
    CoercionError,
    CoercionOptions,
    EpochTime,
    EpochUnit,
    json_type_name,
)
from calving.ingest.decode.schema_registry import SchemaNotFoundError, SchemaSource

if TYPE_CHECKING:
    from calving.ingest.decode.avro_batch import AvroBatchReader

MAGIC_BYTE = 0
HEADER_SIZE = 5
_NANOS_LOGICAL = frozenset({"timestamp-nanos", "local-timestamp-nanos"})


@dataclass(frozen=True)
class FieldAnnotation:
    """What an Avro field's schema says beyond its Avro type: the ``logicalType`` and
    Kafka Connect's ``connect.name`` / ``connect.parameters`` (Debezium's encodings)."""

    logical_type: str | None = None
    connect_name: str | None = None
    parameters: tuple[tuple[str, str], ...] = ()

    def parameter(self, key: str) -> str | None:
        return dict(self.parameters).get(key)


@dataclass
class WriterSchema:
    schema_id: int
    parsed: Any
    raw: Any

    def record(self, field_name: str | None = None) -> Any:
        """The top-level record schema, or the record inside its top-level field
        ``field_name`` (e.g. Debezium's ``after``, which may name ``before``'s record)."""
        if field_name is None:
            return self.raw
        return _record_of(_field_type(self.raw, field_name), _named_records(self.raw))

    def record_annotations(self, field_name: str | None = None) -> dict[str, FieldAnnotation]:
        """Annotations of the fields of ``record(field_name)``."""
        return record_annotations(self.record(field_name))


def _named_records(
    t: Any, namespace: str = "", out: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Every record defined in schema ``t`` by full and short name: a field may refer to
    a record defined earlier by name (Debezium's ``after`` names ``before``'s record)."""
    out = {} if out is None else out
    if isinstance(t, list):
        for branch in t:
            _named_records(branch, namespace, out)
    elif isinstance(t, dict):
        if t.get("type") == "record" and isinstance(t.get("name"), str):
            name = t["name"]
            namespace = t.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
            full = name if "." in name or not namespace else f"{namespace}.{name}"
            out.setdefault(full, t)
            out.setdefault(name.rsplit(".", 1)[-1], t)
            for f in t.get("fields", ()):
                if isinstance(f, dict):
                    _named_records(f.get("type"), namespace, out)
        elif "items" in t or "values" in t:
            _named_records(t.get("items", t.get("values")), namespace, out)
        elif isinstance(t.get("type"), dict | list):
            _named_records(t["type"], namespace, out)
    return out


def _field_type(record: Any, name: str) -> Any:
    if isinstance(record, dict):
        for f in record.get("fields", ()):
            if f.get("name") == name:
                return f.get("type")
    return None


def _record_of(t: Any, named: dict[str, Any] | None = None) -> Any:
    if isinstance(t, list):
        for branch in t:
            found = _record_of(branch, named)
            if found is not None:
                return found
        return None
    if isinstance(t, dict) and t.get("type") == "record":
        return t
    if isinstance(t, str) and named:
        return named.get(t)
    return None


def _annotation(t: Any) -> FieldAnnotation:
    if isinstance(t, list):
        non_null = [b for b in t if b != "null"]
        return _annotation(non_null[0]) if len(non_null) == 1 else FieldAnnotation()
    if not isinstance(t, dict):
        return FieldAnnotation()
    params = t.get("connect.parameters") or {}
    return FieldAnnotation(
        logical_type=t.get("logicalType"),
        connect_name=t.get("connect.name"),
        parameters=tuple(sorted((str(k), str(v)) for k, v in params.items())),
    )


def record_annotations(record: Any) -> dict[str, FieldAnnotation]:
    if not isinstance(record, dict):
        return {}
    return {f["name"]: _annotation(f.get("type")) for f in record.get("fields", ()) if "name" in f}


class ConfluentAvroReader:
    """Confluent-framed bytes -> (writer schema, decoded Python value)."""

    def __init__(self, source: SchemaSource) -> None:
        self.source = source
        self._schemas: dict[int, WriterSchema] = {}

    def writer_schema(self, schema_id: int) -> WriterSchema:
        found = self._schemas.get(schema_id)
        if found is not None:
            return found
        try:
            text = self.source.schema_text(schema_id)
        except SchemaNotFoundError as exc:
            raise Reject(UnknownSchemaIdError, str(exc)) from None
        try:
            raw = json.loads(text)
            parsed = fastavro.parse_schema(raw)
        except Exception as exc:  # noqa: BLE001 - fastavro raises many types for bad schemas
            raise Reject(
                UnknownSchemaIdError, f"schema id {schema_id} is not a valid Avro schema: {exc}"
            ) from None
        found = WriterSchema(schema_id, parsed, raw)
        self._schemas[schema_id] = found
        return found

    def read(self, raw: bytes, what: str = "value") -> tuple[WriterSchema, Any]:
        if len(raw) < HEADER_SIZE:
            raise Reject(
                WireFormatError,
                f"{what} has {len(raw)} bytes, shorter than the 5-byte Confluent header",
            )
        if raw[0] != MAGIC_BYTE:
            raise Reject(WireFormatError, f"{what} starts with byte {raw[0]}, not magic byte 0")
        (schema_id,) = struct.unpack_from(">I", raw, 1)
        writer = self.writer_schema(schema_id)
        body = io.BytesIO(raw)
        body.seek(HEADER_SIZE)
        try:
            value = fastavro.schemaless_reader(body, writer.parsed, None)
        except RecursionError:
            raise Reject(MalformedRecordError, f"{what}: Avro nested too deeply") from None
        except Exception as exc:  # noqa: BLE001 - fastavro signals bad bytes in many types
            raise Reject(
                MalformedRecordError,
                f"{what} does not decode with schema id {schema_id}: "
                f"{type(exc).__name__}: {_OBJECT_REPR.sub('the value', str(exc))[:200]}",
            ) from None
        if body.tell() != len(raw):
            raise Reject(
                MalformedRecordError,
                f"{what} has {len(raw) - body.tell()} bytes left after the Avro body "
                f"(schema id {schema_id})",
            )
        return writer, value


#: An object's repr with its address (``<_io.BytesIO object at 0x7f...>``) in fastavro's
#: messages: the same record must get the same error on every path and every run.
_OBJECT_REPR = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")


@dataclass(frozen=True)
class AvroOptions:
    case_insensitive: bool = False
    naive_timestamps_as_utc: bool = False
    epoch_unit: EpochUnit | None = None
    #: Decode in batches (``avro_batch``) where the writer schema allows it.
    vectorized: bool = True

    def coercion(self) -> CoercionOptions:
        return CoercionOptions(
            case_insensitive=self.case_insensitive,
            epoch_unit=self.epoch_unit,
            naive_timestamps_as_utc=self.naive_timestamps_as_utc,
        )


def unwrap_nanos(obj: dict[str, Any], annotations: dict[str, FieldAnnotation]) -> dict[str, Any]:
    """Top-level ``timestamp-nanos`` ints -> ``EpochTime`` (fastavro leaves them as ints)."""
    for name, note in annotations.items():
        if note.logical_type in _NANOS_LOGICAL and type(obj.get(name)) is int:
            obj[name] = EpochTime(obj[name], "ns")
    return obj


class ConfluentAvroDecoder:
    """Plain append mode for Confluent Avro values."""

    name = "avro"

    def __init__(
        self, schema: Schema, source: SchemaSource, options: AvroOptions | None = None
    ) -> None:
        self.options = options or AvroOptions()
        self.converter = RowConverter(schema, self.options.coercion())
        self.reader = ConfluentAvroReader(source)
        self._annotations: dict[int, dict[str, FieldAnnotation]] = {}
        self.batch_reader: AvroBatchReader | None = None
        if self.options.vectorized and not self.options.case_insensitive:
            from calving.ingest.decode.avro_batch import AvroBatchReader  # it builds on this

            self.batch_reader = AvroBatchReader(self.converter, self.reader)

    def __reduce__(self) -> tuple[Any, ...]:
        # Compiled converters are closures; executors rebuild them from the arguments.
        return (type(self), (self.converter.schema, self.reader.source, self.options))

    def decode(self, data: pa.Table | pa.RecordBatch) -> DecodedBatch:
        batch = KafkaBatch(data)
        out = BatchAssembler(batch, self.converter, self.name)
        rest: Iterable[int] = range(batch.num_rows)
        if self.batch_reader is not None and batch.num_rows:
            rest = self.batch_reader.read(batch, out)
        for i in rest:
            raw = batch.values[i]
            try:
                if raw is None:
                    raise Reject(
                        NullValueError, "record has no value (null); append mode needs one"
                    )
                writer, obj = self.reader.read(raw)
                if not isinstance(obj, dict):
                    raise Reject(
                        MalformedRecordError,
                        f"schema id {writer.schema_id} is a {json_type_name(obj)}, not a record",
                    )
                notes = self._annotations.get(writer.schema_id)
                if notes is None:
                    notes = self._annotations[writer.schema_id] = writer.record_annotations()
                obj = unwrap_nanos(obj, notes)
                out.add_row(i, OP_UPSERT, self.converter.convert(obj, out.unknown))
            except (Reject, CoercionError) as problem:
                out.reject(i, problem)
        return out.finish()
