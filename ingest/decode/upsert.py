"""Key-upsert mode: the Kafka key is the primary key, the value the row.

Values are JSON objects (``upsert-json``) or Confluent Avro records (``upsert-avro``,
writer schemas from a schema source, as the ``avro`` format reads them). The key is a
JSON object or Avro record holding the table's identifier fields, or a bare scalar
(JSON, or an Avro primitive) when the table has a single identifier column
(``key_format``: json or avro; the value's format by default). A record with a value
upserts that row (identifier columns the value lacks are taken from the key; ones it
has must equal the key's); a record with a null value (tombstone) deletes the key. A
record without a key, or whose key or value does not decode, is a dead letter.
"""

from __future__ import annotations

from typing import Any, Literal

import pyarrow as pa

from calving.commit.errors import ConfigError
from calving.commit.spec.schema import Schema
from calving.ingest.decode.avro_confluent import (
    ConfluentAvroReader,
    FieldAnnotation,
    unwrap_nanos,
)
from calving.ingest.decode.batch import (
    OP_DELETE,
    OP_UPSERT,
    BatchAssembler,
    DecodedBatch,
    KafkaBatch,
    MalformedRecordError,
    MissingKeyError,
    Reject,
    RowConverter,
    SchemaMismatchError,
)
from calving.ingest.decode.coerce import CoercionError, json_type_name
from calving.ingest.decode.debezium import scalar_key_object
from calving.ingest.decode.json_values import JsonOptions, parse_json, parse_json_object
from calving.ingest.decode.schema_registry import SchemaSource

Format = Literal["json", "avro"]


class KeyUpsertDecoder:
    name = "upsert"

    def __init__(
        self,
        schema: Schema,
        options: JsonOptions | None = None,
        value_format: Format = "json",
        key_format: Format | None = None,
        schema_source: SchemaSource | None = None,
    ) -> None:
        if not schema.identifier_field_ids:
            raise ConfigError("key-upsert mode needs identifier fields (the primary key)")
        self.options = options or JsonOptions()
        self.value_format: Format = value_format
        self.key_format: Format = key_format or value_format
        if "avro" in (self.value_format, self.key_format) and schema_source is None:
            raise ConfigError("key-upsert Avro needs a schema source (registry url or directory)")
        self.reader = ConfluentAvroReader(schema_source) if schema_source is not None else None
        self._notes: dict[int, dict[str, FieldAnnotation]] = {}
        self.converter = RowConverter(schema, self.options.coercion())
        self._exact = self.converter.has_decimal

    def __reduce__(self) -> tuple[Any, ...]:
        # Compiled converters are closures; executors rebuild them from the arguments.
        source = self.reader.source if self.reader is not None else None
        args = (self.converter.schema, self.options, self.value_format, self.key_format, source)
        return (type(self), args)

    def decode(self, data: pa.Table | pa.RecordBatch) -> DecodedBatch:
        batch = KafkaBatch(data)
        out = BatchAssembler(batch, self.converter, self.name)
        keys = batch.keys
        for i, raw in enumerate(batch.values):
            try:
                key_obj, key_row = self._key(keys[i])
                if raw is None:
                    out.add_row(i, OP_DELETE, key_row)
                else:
                    out.add_row(i, OP_UPSERT, self._row(raw, key_obj, key_row, out))
            except (Reject, CoercionError) as problem:
                out.reject(i, problem)
        return out.finish()

    def _key(self, raw: bytes | None) -> tuple[dict[str, Any], list[Any]]:
        if raw is None:
            raise Reject(MissingKeyError, "record has no Kafka key; key-upsert mode needs one")
        try:
            decoded = self._avro(raw, "Kafka key") if self.key_format == "avro" else None
            if decoded is None:
                decoded = parse_json(raw, self._exact)
            obj = scalar_key_object(decoded, self.converter.key_names)
            return obj, self.converter.convert_keys(obj)
        except Reject as exc:
            raise Reject(MissingKeyError, f"Kafka key: {exc.reason}") from None
        except CoercionError as exc:
            raise Reject(MissingKeyError, f"Kafka key {exc.describe()}") from None

    def _avro(self, raw: bytes, what: str) -> Any:
        """A Confluent-framed Avro value (records with nanosecond timestamps unwrapped)."""
        assert self.reader is not None
        writer, obj = self.reader.read(raw, what)
        if isinstance(obj, dict):
            notes = self._notes.get(writer.schema_id)
            if notes is None:
                notes = self._notes[writer.schema_id] = writer.record_annotations()
            obj = unwrap_nanos(obj, notes)
        return obj

    def _value(self, raw: bytes) -> dict[str, Any]:
        if self.value_format == "json":
            return parse_json_object(raw, self._exact)
        obj = self._avro(raw, "value")
        if not isinstance(obj, dict):
            raise Reject(MalformedRecordError, f"value is a {json_type_name(obj)}, not a record")
        return obj

    def _row(
        self, raw: bytes, key_obj: dict[str, Any], key_row: list[Any], out: BatchAssembler
    ) -> list[Any]:
        obj = self._value(raw)
        names = self.converter.key_names
        missing = [n for n in names if obj.get(n) is None]
        if missing:
            obj = dict(obj)
            for n in missing:
                obj[n] = key_obj.get(n)
        row = self.converter.convert(obj, out.unknown)
        for name, pos in zip(names, self.converter.key_positions):
            if row[pos] != key_row[pos]:
                raise Reject(
                    SchemaMismatchError,
                    f"key field {name!r} is {key_row[pos]!r} in the Kafka key "
                    f"but {row[pos]!r} in the value",
                )
        return row
