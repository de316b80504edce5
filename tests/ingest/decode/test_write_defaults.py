"""A column's ``write-default`` is written for records that do not carry the field at
all (an older source schema), through every Debezium decoding path: JSON per event,
JSON that the vectorized reader would take (it cannot tell absent from null, so such a
table decodes per event), and Avro (a writer schema without the column goes the
per-record way). An explicit null stays null."""

from __future__ import annotations

import json

from calving.commit.spec.schema import Schema
from calving.commit.spec.types import LONG, STRING, NestedField
from calving.ingest.decode.debezium import DebeziumDecoder, DebeziumOptions
from tests.ingest.decode import data_rows, kafka_batch
from tests.ingest.decode.test_avro_confluent import DictSource, wire

SCHEMA = Schema(
    (
        NestedField(1, "id", LONG, True),
        NestedField(2, "note", STRING),
        NestedField(3, "qty", LONG, initial_default=7, write_default=7),
    ),
    identifier_field_ids=(1,),
)


def _event(after: dict) -> bytes:
    return json.dumps({"before": None, "after": after, "op": "c"}).encode()


def test_json_events_without_the_field_take_its_write_default() -> None:
    values = [
        _event({"id": 1, "note": "old schema"}),
        _event({"id": 2, "note": "explicit null", "qty": None}),
        _event({"id": 3, "note": "new", "qty": 4}),
    ]
    for vectorized in (False, True):
        decoder = DebeziumDecoder(SCHEMA, DebeziumOptions(vectorized=vectorized))
        assert decoder.vector is None  # absent and null differ here: per event
        out = decoder.decode(kafka_batch(values, [b'{"id":1}', b'{"id":2}', b'{"id":3}']))
        assert [(r["id"], r["qty"]) for r in data_rows(out)] == [(1, 7), (2, None), (3, 4)]


def test_avro_writer_schemas_without_the_column_take_its_write_default() -> None:
    row = {"type": "record", "name": "Value", "namespace": "p.s.t", "fields": [
        {"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"]}]}  # fmt: skip
    envelope = {"type": "record", "name": "Envelope", "namespace": "p.s.t", "fields": [
        {"name": "before", "type": ["null", row]}, {"name": "after", "type": ["null", "Value"]},
        {"name": "op", "type": "string"}]}  # fmt: skip
    key = {"type": "record", "name": "Key", "namespace": "p.s.t",
           "fields": [{"name": "id", "type": "long"}]}  # fmt: skip
    source = DictSource({1: envelope, 2: key})
    values = [
        wire(1, envelope, {"before": None, "after": {"id": i, "note": "x"}, "op": "c"})
        for i in (1, 2)
    ]
    keys = [wire(2, key, {"id": i}) for i in (1, 2)]
    options = DebeziumOptions(value_format="avro", key_format="avro")
    out = DebeziumDecoder(SCHEMA, options, source).decode(kafka_batch(values, keys))
    assert out.dead_letters.num_rows == 0
    assert [(r["id"], r["qty"]) for r in data_rows(out)] == [(1, 7), (2, 7)]
