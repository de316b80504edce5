"""Key-upsert mode: the Kafka key is the primary key, the JSON value the row.

The key is a JSON object holding the table's identifier fields, or a bare JSON scalar
when the table has a single identifier column. A record with a value upserts that row
(identifier columns the value lacks are taken from the key; ones it has must equal the
key's); a record with a null value (tombstone) deletes the key. A record without a key,
or whose key does not decode, is a dead letter.
"""

from __future__ import annotations

import pyarrow as pa

from calving.commit.errors import ConfigError
from calving.commit.spec.schema import Schema
from calving.ingest.decode.batch import (
    OP_DELETE,
    OP_UPSERT,
    BatchAssembler,
    DecodedBatch,
    KafkaBatch,
    MissingKeyError,
    Reject,
    RowConverter,
    SchemaMismatchError,
)
from calving.ingest.decode.coerce import CoercionError
from calving.ingest.decode.debezium import scalar_key_object
from calving.ingest.decode.json_values import JsonOptions, parse_json, parse_json_object


class KeyUpsertDecoder:
    name = "upsert"

    def __init__(self, schema: Schema, options: JsonOptions | None = None) -> None:
        if not schema.identifier_field_ids:
            raise ConfigError("key-upsert mode needs identifier fields (the primary key)")
        self.options = options or JsonOptions()
        self.converter = RowConverter(schema, self.options.coercion())
        self._exact = self.converter.has_decimal

    def __reduce__(self) -> tuple:
        # Compiled converters are closures; executors rebuild them from schema + options.
        return (type(self), (self.converter.schema, self.options))

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

    def _key(self, raw: bytes | None) -> tuple[dict, list]:
        if raw is None:
            raise Reject(MissingKeyError, "record has no Kafka key; key-upsert mode needs one")
        try:
            obj = scalar_key_object(parse_json(raw, self._exact), self.converter.key_names)
            return obj, self.converter.convert_keys(obj)
        except Reject as exc:
            raise Reject(MissingKeyError, f"Kafka key: {exc.reason}") from None
        except CoercionError as exc:
            raise Reject(MissingKeyError, f"Kafka key {exc.describe()}") from None

    def _row(self, raw: bytes, key_obj: dict, key_row: list, out: BatchAssembler) -> list:
        obj = parse_json_object(raw, self._exact)
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
