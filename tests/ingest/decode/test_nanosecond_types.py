"""Debezium's nanosecond timestamps (issue 23, part 4): ``NanoTimestamp`` maps to
``timestamp_ns`` and a ``ZonedTimestamp`` of a source column with more than 6 fractional
digits (``__debezium.source.column.scale``) to ``timestamptz_ns``, from JSON-converter
and Avro schemas alike; both decoders (JSON per event and vectorized, Avro per record
and in batches) keep every nanosecond; a table that has the other precision needs no
schema change, and a value finer than its column becomes a dead letter naming it."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from calving.commit.spec.schema import Schema
from calving.commit.spec.types import LONG, TIMESTAMP_NS, TIMESTAMPTZ, TIMESTAMPTZ_NS, NestedField
from calving.ingest.decode.connect_schema import table_schema_from_avro, table_schema_from_json
from calving.ingest.decode.debezium import DebeziumDecoder, DebeziumOptions
from calving.ingest.decode.schema_changes import classify_changes
from tests.ingest.decode import data_rows, kafka_batch
from tests.ingest.decode.test_avro_confluent import DictSource, wire

NS = 1_767_323_045_123_456_789  # 2026-01-02T03:04:05.123456789
ZONED = "2026-01-02T04:04:05.123456789+01:00"
NANO_TS = "io.debezium.time.NanoTimestamp"
ZONED_TS = "io.debezium.time.ZonedTimestamp"
SCALE = "__debezium.source.column.scale"


def _json_envelope(scale: str | None) -> dict[str, Any]:
    zt: dict[str, Any] = {"field": "zt", "type": "string", "optional": True, "name": ZONED_TS}
    if scale is not None:
        zt["parameters"] = {SCALE: scale}
    row = {"type": "struct", "name": "p.s.t.Value", "optional": True, "fields": [
        {"field": "id", "type": "int64", "optional": False},
        {"field": "ts", "type": "int64", "optional": True, "name": NANO_TS}, zt]}  # fmt: skip
    return {"type": "struct", "name": "p.s.t.Envelope", "fields": [
        {**row, "field": "before"}, {**row, "field": "after"},
        {"field": "op", "type": "string", "optional": False}]}  # fmt: skip


def _avro_envelope(scale: str | None) -> dict[str, Any]:
    zt: dict[str, Any] = {"type": "string", "connect.name": ZONED_TS}
    if scale is not None:
        zt["connect.parameters"] = {SCALE: scale}
    row = {"type": "record", "name": "Value", "namespace": "p.s.t", "fields": [
        {"name": "id", "type": "long"},
        {"name": "ts", "type": ["null", {"type": "long", "connect.name": NANO_TS}]},
        {"name": "zt", "type": ["null", zt]}]}  # fmt: skip
    return {"type": "record", "name": "Envelope", "namespace": "p.s.t", "fields": [
        {"name": "before", "type": ["null", row]}, {"name": "after", "type": ["null", "Value"]},
        {"name": "op", "type": "string"}]}  # fmt: skip


KEY_JSON = {"type": "struct", "name": "p.s.t.Key",
            "fields": [{"field": "id", "type": "int64", "optional": False}]}  # fmt: skip
KEY_AVRO = {"type": "record", "name": "Key", "namespace": "p.s.t",
            "fields": [{"name": "id", "type": "long"}]}  # fmt: skip


@pytest.mark.parametrize(
    ("scale", "zoned"),
    [
        ("9", "timestamptz_ns"),
        ("7", "timestamptz_ns"),
        ("6", "timestamptz"),
        (None, "timestamptz"),
    ],
)
def test_mapping(scale: str | None, zoned: str) -> None:
    for mapped in (
        table_schema_from_json(_json_envelope(scale), KEY_JSON),
        table_schema_from_avro(_avro_envelope(scale), KEY_AVRO),
    ):
        types = {f.name: str(f.field_type) for f in mapped.schema.fields}
        assert types == {"id": "long", "ts": "timestamp_ns", "zt": zoned}


SCHEMA = table_schema_from_json(_json_envelope("9"), KEY_JSON).schema


def _decoded(out: Any) -> list[tuple[int, int, int]]:
    assert out.dead_letters.num_rows == 0, out.dead_letters.to_pylist()
    rows = data_rows(out)
    naive, utc = pa.timestamp("ns"), pa.timestamp("ns", tz="UTC")
    return [(r["id"], pa.scalar(r["ts"], naive).value, pa.scalar(r["zt"], utc).value) for r in rows]


@pytest.mark.parametrize("vectorized", [False, True])
def test_json_events_keep_every_nanosecond(vectorized: bool) -> None:
    after = {"id": 1, "ts": NS, "zt": ZONED}
    wrapped = {
        "schema": _json_envelope("9"),
        "payload": {"before": None, "after": after, "op": "c"},
    }
    bare = {"before": None, "after": {**after, "id": 2}, "op": "c"}
    values = [json.dumps(wrapped).encode(), json.dumps(bare).encode()]
    decoder = DebeziumDecoder(SCHEMA, DebeziumOptions(vectorized=vectorized, epoch_unit="ns"))
    out = decoder.decode(kafka_batch(values, [b'{"id":1}', b'{"id":2}']))
    assert _decoded(out) == [(1, NS, NS), (2, NS, NS)]


@pytest.mark.parametrize("vectorized", [False, True])
def test_avro_events_keep_every_nanosecond(vectorized: bool) -> None:
    envelope = _avro_envelope("9")
    source = DictSource({1: envelope, 2: KEY_AVRO})
    value = wire(
        1, envelope, {"before": None, "after": {"id": 1, "ts": NS, "zt": ZONED}, "op": "c"}
    )
    options = DebeziumOptions(value_format="avro", key_format="avro", vectorized=vectorized)
    out = DebeziumDecoder(SCHEMA, options, source).decode(
        kafka_batch([value], [wire(2, KEY_AVRO, {"id": 1})])
    )
    assert _decoded(out) == [(1, NS, NS)]


def test_the_other_precision_needs_no_schema_change_and_finer_values_are_dead_letters() -> None:
    micros = Schema(
        (
            NestedField(1, "id", LONG, True),
            NestedField(2, "ts", TIMESTAMP_NS),
            NestedField(3, "zt", TIMESTAMPTZ),
        ),
        identifier_field_ids=(1,),
    )
    assert not classify_changes("s.t", micros, SCHEMA)
    assert not classify_changes("s.t", SCHEMA, micros)
    assert SCHEMA.find_field_by_name("zt").field_type == TIMESTAMPTZ_NS  # type: ignore[union-attr]  # find_field_by_name is Optional; the field exists
    value = {"before": None, "after": {"id": 1, "ts": NS, "zt": ZONED}, "op": "c"}
    out = DebeziumDecoder(micros, DebeziumOptions(epoch_unit="ns")).decode(
        kafka_batch([json.dumps(value).encode()], [b'{"id":1}'])
    )
    [error] = out.dead_letters.column("error").to_pylist()
    assert "field 'zt'" in error and "more precision than the column keeps" in error
