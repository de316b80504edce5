"""Avro decoded a batch at a time: the same rows, dead letters and unknown fields as the
per-record path, for plain Confluent Avro and Debezium Avro, with the fast path shown to
have done the work."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.spec.schema import Schema
from calving.commit.spec.types import (
    BINARY,
    BOOLEAN,
    DATE,
    DOUBLE,
    INT,
    LONG,
    STRING,
    TIMESTAMP,
    TIMESTAMPTZ,
    NestedField,
    decimal,
)
from calving.ingest.decode.avro_confluent import AvroOptions, ConfluentAvroDecoder
from calving.ingest.decode.batch import DecodedBatch
from calving.ingest.decode.debezium import DebeziumDecoder, DebeziumOptions
from tests.ingest.decode import assert_partitioned, kafka_batch
from tests.ingest.decode.test_avro_confluent import DictSource, wire

FLAT = {
    "type": "record",
    "name": "Flat",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "flag", "type": ["null", "boolean"]},
        {"name": "small", "type": "int"},
        {"name": "count", "type": ["null", "int"]},
        {"name": "ratio", "type": "float"},
        {"name": "score", "type": ["null", "double"]},
        {"name": "name", "type": ["null", "string"]},
        {"name": "blob", "type": ["null", "bytes"]},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
    ],
}
#: The same record without ``blob`` and with ``name`` not null (a second writer schema).
FLAT_V2 = {
    **FLAT,
    "fields": [
        {"name": "name", "type": "string"} if f["name"] == "name" else f
        for f in FLAT["fields"]
        if f["name"] != "blob"
    ],
}
#: A field the table lacks: the per-record path reports it for schema evolution.
FLAT_EXTRA = {**FLAT, "fields": [*FLAT["fields"], {"name": "note", "type": "string"}]}


def table(name_required: bool = False) -> Schema:
    return Schema(
        (
            NestedField(1, "id", LONG, required=True),
            NestedField(2, "flag", BOOLEAN),
            NestedField(3, "small", LONG),
            NestedField(4, "count", INT),
            NestedField(5, "ratio", DOUBLE),
            NestedField(6, "score", DOUBLE),
            NestedField(7, "name", STRING, required=name_required),
            NestedField(8, "blob", BINARY),
            NestedField(9, "day", DATE),
            NestedField(10, "at", TIMESTAMPTZ),
            NestedField(11, "at_ms", TIMESTAMP),
            NestedField(12, "price", decimal(10, 2)),
            NestedField(13, "unset", STRING),
        ),
        identifier_field_ids=(1,),
    )


UTC = dt.timezone.utc
records = st.fixed_dictionaries(
    {
        "id": st.integers(-(2**63), 2**63 - 1),
        "flag": st.none() | st.booleans(),
        "small": st.integers(-(2**31), 2**31 - 1),
        "count": st.none() | st.integers(-(2**31), 2**31 - 1),
        "ratio": st.floats(width=32, allow_nan=False),
        "score": st.none() | st.floats(allow_nan=False),
        "name": st.none() | st.text(max_size=6),
        "blob": st.none() | st.binary(max_size=6),
        "day": st.dates(),
        "at": st.none()
        | st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1), timezones=st.just(UTC)),
        "at_ms": st.datetimes(
            dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1), timezones=st.just(UTC)
        ).map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)),
        "price": st.decimals(-9_999_999, 9_999_999, places=2, allow_nan=False),
    }
)


def compare(fast: DecodedBatch, slow: DecodedBatch) -> None:
    assert fast.rows.equals(slow.rows), (fast.rows.to_pylist()[:3], slow.rows.to_pylist()[:3])
    assert fast.dead_letters.select(["offset", "error", "error_type"]).equals(
        slow.dead_letters.select(["offset", "error", "error_type"])
    )
    assert fast.unknown_fields == slow.unknown_fields


def plain(schema: Schema, vectorized: bool) -> ConfluentAvroDecoder:
    source = DictSource({1: FLAT, 2: FLAT_V2, 3: FLAT_EXTRA})
    return ConfluentAvroDecoder(schema, source, AvroOptions(vectorized=vectorized))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["v1", "v2", "extra", "bad"]), records),
        min_size=1,
        max_size=30,
    )
)
def test_plain_avro_batches_match_the_per_record_path(items):
    values: list[bytes | None] = []
    for kind, rec in items:
        if kind == "v1":
            values.append(wire(1, FLAT, rec))
        elif kind == "v2":
            values.append(wire(2, FLAT_V2, {**rec, "name": rec["name"] or ""}))
        elif kind == "extra":
            values.append(wire(3, FLAT_EXTRA, {**rec, "note": "n"}))
        else:
            values.append(wire(1, FLAT, rec) + b"\x00")  # trailing byte: a dead letter
    batch = kafka_batch(values)
    fast_decoder = plain(table(), True)
    fast, slow = fast_decoder.decode(batch), plain(table(), False).decode(batch)
    compare(fast, slow)
    assert_partitioned(batch, fast)
    assert fast_decoder.batch_reader is not None
    assert fast_decoder.batch_reader.decoded == sum(kind in ("v1", "v2") for kind, _ in items)


def test_framing_problems_and_required_nulls_take_the_per_record_path():
    rec: dict[str, Any] = {
        "id": 1, "flag": True, "small": 2, "count": None, "ratio": 0.5, "score": 1.25,
        "name": "a", "blob": b"x", "day": dt.date(2024, 5, 6),
        "at": dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
        "at_ms": dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC),
        "price": Decimal("12.34"),
    }  # fmt: skip
    good = wire(1, FLAT, rec)
    values = [
        good,
        None,  # append mode needs a value
        b"\x00\x00",  # shorter than the header
        b"\x01" + good[1:],  # not magic byte 0
        b"\x00\x00\x00\x00\x63" + good[5:],  # schema id 99: unknown
        good[:-3],  # truncated body
        wire(1, FLAT, {**rec, "name": None}),  # null in the required column
        wire(1, FLAT, {**rec, "id": 2}),
    ]
    batch = kafka_batch(values)
    fast_decoder = plain(table(name_required=True), True)
    fast = fast_decoder.decode(batch)
    compare(fast, plain(table(name_required=True), False).decode(batch))
    assert fast.rows.column("id").to_pylist() == [1, 2]
    assert fast.dead_letters.num_rows == 6
    errors = fast.dead_letters.column("error").to_pylist()
    assert any("schema id 99" in e for e in errors)
    assert any("'name'" in e for e in errors)
    assert fast_decoder.batch_reader is not None and fast_decoder.batch_reader.decoded == 2
    row = fast.rows.to_pylist()[0]
    assert row["at"] == rec["at"] and row["price"] == Decimal("12.34")
    assert row["at_ms"] == dt.datetime(2024, 5, 6, 7, 8, 9, 123000)
    assert row["day"] == dt.date(2024, 5, 6) and row["unset"] is None


# ---------------------------------------------------------------- Debezium Avro

ROW = {
    "type": "record",
    "name": "Value",
    "namespace": "pg.public.t",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "status", "type": ["null", "string"]},
        {"name": "day", "type": ["null", {"type": "int", "connect.name": "io.debezium.time.Date"}]},
        {"name": "at", "type": {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}},
        {
            "name": "at_ms",
            "type": ["null", {"type": "long", "connect.name": "io.debezium.time.Timestamp"}],
        },
    ],
}
ZONED_ROW = {
    **ROW,
    "fields": [
        *ROW["fields"],
        {
            "name": "seen",
            "type": ["null", {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}],
        },
    ],
}
CDC_TABLE = Schema(
    (
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "status", STRING),
        NestedField(3, "day", DATE),
        NestedField(4, "at", TIMESTAMP),
        NestedField(5, "at_ms", TIMESTAMPTZ),
        NestedField(6, "seen", TIMESTAMPTZ),
    ),
    identifier_field_ids=(1,),
)
KEY = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]}


def envelope(row: dict) -> dict:
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": "pg.public.t",
        "fields": [
            {"name": "before", "type": ["null", row]},
            {"name": "after", "type": ["null", "Value"]},  # a named reference, as Debezium
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"]},
        ],
    }


def debezium(vectorized: bool) -> DebeziumDecoder:
    source = DictSource({1: envelope(ROW), 2: envelope(ZONED_ROW), 9: KEY})
    options = DebeziumOptions(value_format="avro", key_format="avro", vectorized=vectorized)
    return DebeziumDecoder(CDC_TABLE, options, source)


images = st.fixed_dictionaries(
    {
        "id": st.integers(0, 5),
        "status": st.none() | st.text(max_size=4),
        "day": st.none() | st.integers(-700_000, 2_900_000),
        "at": st.integers(-(2**62), 2**62),
        "at_ms": st.none() | st.integers(-(2**53), 2**53),
    }
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["c", "r", "u", "d", "d-nobefore", "t", "tomb", "z"]), images),
        min_size=1,
        max_size=30,
    )
)
def test_debezium_avro_batches_match_the_per_event_path(items):
    values: list[bytes | None] = []
    keys: list[bytes | None] = []
    fast_count = 0
    for op, image in items:
        keys.append(wire(9, KEY, {"id": image["id"]}))
        event: dict[str, Any] = {"before": None, "after": None, "op": op, "ts_ms": 1}
        schema_id, schema = 1, envelope(ROW)
        if op in ("c", "r", "u"):
            event["after"] = image
            fast_count += 1
        elif op == "d":
            event["before"] = image
            fast_count += 1
        elif op == "d-nobefore":
            event["op"] = "d"  # the Kafka key tells which row
        elif op == "z":  # a writer schema with a zoned timestamp: per event
            schema_id, schema = 2, envelope(ZONED_ROW)
            event.update(op="c", after={**image, "seen": "2024-01-02T03:04:05Z"})
        values.append(None if op == "tomb" else wire(schema_id, schema, event))
    batch = kafka_batch(values, keys)
    fast_decoder = debezium(True)
    fast = fast_decoder.decode(batch)
    compare(fast, debezium(False).decode(batch))
    assert_partitioned(batch, fast)
    assert fast_decoder.avro_batch is not None
    # Epoch-ms timestamps past int64 microseconds would take the per-event path too.
    assert fast_decoder.avro_batch.decoded == fast_count


def test_debezium_avro_connect_epochs_become_columns():
    image = {
        "id": 4,
        "status": "x",
        "day": 19_000,
        "at": 1_700_000_000_123_456,
        "at_ms": 1_700_000_000_123,
    }
    values = [wire(1, envelope(ROW), {"before": None, "after": image, "op": "c", "ts_ms": 1})]
    decoder = debezium(True)
    out = decoder.decode(kafka_batch(values, [wire(9, KEY, {"id": 4})]))
    row = out.rows.to_pylist()[0]
    assert row["day"] == dt.date(1970, 1, 1) + dt.timedelta(days=19_000)
    assert row["at"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456)
    assert row["at_ms"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    assert out.rows.schema.field("at").type == pa.timestamp("us")
    assert decoder.avro_batch is not None and decoder.avro_batch.decoded == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=50), min_size=1, max_size=20))
def test_random_bodies_behind_a_planned_schema_id(bodies):
    batch = kafka_batch([b"\x00\x00\x00\x00\x01" + b for b in bodies])
    fast = plain(table(), True).decode(batch)
    compare(fast, plain(table(), False).decode(batch))
    assert_partitioned(batch, fast)
