"""Confluent wire-format Avro decoder."""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
import uuid
from decimal import Decimal

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.spec.schema import Schema
from calving.commit.spec.types import (
    DATE,
    DOUBLE,
    LONG,
    STRING,
    TIMESTAMP,
    TIMESTAMP_NS,
    TIMESTAMPTZ,
    UUID,
    ListType,
    MapType,
    NestedField,
    StructType,
    decimal,
)
from calving.ingest.decode.avro_confluent import AvroOptions, ConfluentAvroDecoder
from calving.ingest.decode.schema_registry import (
    SchemaNotFoundError,
    SchemaRegistryUnavailableError,
)
from tests.ingest.decode import assert_partitioned, data_rows, kafka_batch

AVRO_V1 = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": ["null", "string"], "default": None},
        {
            "name": "amount",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "placed_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "nanos", "type": {"type": "long", "logicalType": "timestamp-nanos"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "weight", "type": "float"},
        {
            "name": "lines",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Line",
                    "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}],
                },
            },
        },
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    ],
}
AVRO_V2 = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "channel", "type": "string"},
    ],
}
TABLE = Schema(
    (
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "customer", STRING),
        NestedField(3, "amount", decimal(9, 2)),
        NestedField(4, "placed", TIMESTAMPTZ),
        NestedField(5, "placed_ms", TIMESTAMPTZ),
        NestedField(6, "local", TIMESTAMP),
        NestedField(7, "nanos", TIMESTAMP_NS),
        NestedField(8, "day", DATE),
        NestedField(9, "ref", UUID),
        NestedField(10, "weight", DOUBLE),
        NestedField(
            11,
            "lines",
            ListType(
                12, StructType((NestedField(13, "sku", STRING), NestedField(14, "qty", LONG)))
            ),
        ),
        NestedField(15, "attrs", MapType(16, STRING, 17, LONG)),
        NestedField(18, "status", STRING),
    ),
    identifier_field_ids=(1,),
)
REF = uuid.UUID("12345678-1234-5678-1234-567812345678")
RECORD = {
    "id": 7,
    "customer": "ada",
    "amount": Decimal("12.30"),
    "placed": dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=dt.timezone.utc),
    "placed_ms": dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=dt.timezone.utc),
    "local": dt.datetime(2024, 1, 2, 3, 4, 5),
    "nanos": 1_704_164_645_000_000_001,
    "day": dt.date(2024, 1, 2),
    "ref": REF,
    "weight": 1.5,
    "lines": [{"sku": "a", "qty": 2}],
    "attrs": {"x": 1},
    "status": "PAID",
}


class DictSource:
    def __init__(self, schemas: dict[int, dict | str]) -> None:
        self.schemas = schemas
        self.calls = 0

    def schema_text(self, schema_id: int) -> str:
        self.calls += 1
        if schema_id not in self.schemas:
            raise SchemaNotFoundError(schema_id, "not in the test source")
        s = self.schemas[schema_id]
        return s if isinstance(s, str) else json.dumps(s)


def wire(schema_id: int, schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    out.write(b"\x00" + struct.pack(">I", schema_id))
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def decoder(extra: dict[int, dict | str] | None = None) -> tuple[ConfluentAvroDecoder, DictSource]:
    source = DictSource({1: AVRO_V1, 2: AVRO_V2, **(extra or {})})
    return ConfluentAvroDecoder(TABLE, source), source


def test_logical_types_map_to_columns():
    dec, source = decoder()
    out = dec.decode(
        kafka_batch(
            [wire(1, AVRO_V1, RECORD)] * 3 + [wire(2, AVRO_V2, {"id": 8, "channel": "web"})]
        )
    )
    assert out.dead_letters.num_rows == 0
    nanos = out.rows.column("nanos").cast("int64").to_pylist()[0]
    assert nanos == RECORD["nanos"]
    out.rows = out.rows.drop_columns(["nanos"])
    rows = data_rows(out)
    r = rows[0]
    assert r["amount"] == Decimal("12.30")
    assert r["placed"] == RECORD["placed"]
    assert r["placed_ms"] == RECORD["placed_ms"]
    assert r["local"] == RECORD["local"]
    assert r["day"] == RECORD["day"]
    assert r["ref"] == REF.bytes
    assert r["lines"] == [{"sku": "a", "qty": 2}]
    assert r["attrs"] == [("x", 1)]
    assert r["status"] == "PAID"
    assert rows[3]["id"] == 8 and rows[3]["customer"] is None
    assert out.unknown_fields == {"channel": frozenset({"string"})}
    assert source.calls == 2  # parsed once per id


def test_wire_format_errors_are_dead_letters_naming_the_id():
    dec, _ = decoder({9: "{not json"})
    good = wire(1, AVRO_V1, RECORD)
    values = [
        b"\x01" + good[1:],
        good[:3],
        good[:-2],
        good + b"\x00",
        b"\x00\x00\x00\x00\x63" + good[5:],
        b"\x00\x00\x00\x00\x09" + good[5:],
        wire(2, AVRO_V2, {"id": 1, "channel": "x"})[:6]
        + b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        None,
    ]
    batch = kafka_batch(values)
    out = dec.decode(batch)
    assert_partitioned(batch, out)
    assert out.rows.num_rows == 0
    got = list(
        zip(
            out.dead_letters.column("error_type").to_pylist(),
            out.dead_letters.column("error").to_pylist(),
        )
    )
    assert got[0][0] == "WireFormatError" and "not magic byte 0" in got[0][1]
    assert got[1][0] == "WireFormatError" and "shorter than the 5-byte" in got[1][1]
    assert got[2][0] == "MalformedRecordError" and "schema id 1" in got[2][1]
    assert got[3][0] == "MalformedRecordError" and "1 bytes left" in got[3][1]
    assert got[4][0] == "UnknownSchemaIdError" and "schema id 99" in got[4][1]
    assert (
        got[5][0] == "UnknownSchemaIdError"
        and "schema id 9 is not a valid Avro schema" in got[5][1]
    )
    assert got[6][0] == "MalformedRecordError"
    assert got[7][0] == "NullValueError"


def test_type_mismatch_is_a_dead_letter():
    schema = {"type": "record", "name": "X", "fields": [{"name": "id", "type": "string"}]}
    dec, _ = decoder({3: schema})
    out = dec.decode(kafka_batch([wire(3, schema, {"id": "seven"})]))
    assert out.dead_letters.column("error_type").to_pylist() == ["SchemaMismatchError"]
    assert "field 'id': expected long" in out.dead_letters.column("error")[0].as_py()


def test_unavailable_registry_fails_the_batch():
    class Down:
        def schema_text(self, schema_id: int) -> str:
            raise SchemaRegistryUnavailableError("down")

    with pytest.raises(SchemaRegistryUnavailableError):
        ConfluentAvroDecoder(TABLE, Down()).decode(kafka_batch([wire(1, AVRO_V1, RECORD)]))


def test_non_record_schema_and_naive_option():
    dec, _ = decoder({4: '"long"'})
    out = dec.decode(kafka_batch([b"\x00\x00\x00\x00\x04\x02"]))
    assert "is a long, not a record" in out.dead_letters.column("error")[0].as_py()
    table = Schema((NestedField(1, "t", TIMESTAMPTZ),))
    local = {
        "type": "record",
        "name": "L",
        "fields": [
            {"name": "t", "type": {"type": "long", "logicalType": "local-timestamp-micros"}}
        ],
    }
    value = wire(1, local, {"t": dt.datetime(2024, 1, 1)})
    strict = ConfluentAvroDecoder(table, DictSource({1: local})).decode(kafka_batch([value]))
    assert strict.dead_letters.num_rows == 1
    lenient = ConfluentAvroDecoder(
        table, DictSource({1: local}), AvroOptions(naive_timestamps_as_utc=True)
    )
    assert (
        data_rows(lenient.decode(kafka_batch([value])))[0]["t"].isoformat()
        == "2024-01-01T00:00:00+00:00"
    )


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.binary(max_size=60),
            st.binary(max_size=60).map(lambda b: b"\x00\x00\x00\x00" + bytes([1]) + b),
        ),
        max_size=20,
    )
)
def test_random_bytes_never_escape(values):
    dec, _ = decoder()
    batch = kafka_batch(values)
    out = dec.decode(batch)
    assert_partitioned(batch, out)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "id": st.integers(-(2**63), 2**63 - 1),
                "channel": st.text(max_size=8),
            }
        ),
        min_size=1,
        max_size=20,
    )
)
def test_valid_records_round_trip(records):
    dec, _ = decoder()
    out = dec.decode(kafka_batch([wire(2, AVRO_V2, r) for r in records]))
    assert out.dead_letters.num_rows == 0
    assert [r["id"] for r in data_rows(out)] == [r["id"] for r in records]
