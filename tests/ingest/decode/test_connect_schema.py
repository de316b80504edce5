"""Kafka Connect / Debezium schemas -> Iceberg schemas (``connect_schema``).

Recorded payloads: ``connect_schemas/`` holds PostgreSQL-connector change events as the
JSON converter writes them (schema wrapper + payload, key and value) and the Avro writer
schemas the Avro converter registers for the same ``orders`` table; the record vectors
in ``tests/vectors/records`` were recorded earlier for the decoders, with their tables.
The derived schemas are checked against those tables and by decoding the recorded
events through the real ``DebeziumDecoder``.
"""

from __future__ import annotations

import base64
import io
import json
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.spec.schema import Schema
from calving.commit.spec.type_strings import type_text
from calving.commit.spec.types import (
    DATE,
    TIME,
    TIMESTAMP,
    TIMESTAMP_NS,
    ListType,
    MapType,
    StructType,
    decimal,
)
from calving.ingest.decode import connect_envelope, debezium
from calving.ingest.decode.connect_schema import (
    LOGICAL_TYPES,
    ConnectSchemaOptions,
    iceberg_type,
    table_schema_from_avro,
    table_schema_from_json,
)
from calving.ingest.decode.connect_types import (
    ConnectSchemaError,
    node_from_avro,
    node_from_json,
)
from calving.ingest.decode.debezium import DebeziumDecoder, DebeziumOptions
from tests.ingest.decode import data_rows, kafka_batch

DATA = Path(__file__).resolve().parent / "connect_schemas"
VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "records"


def _recorded(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def _vector_record(name: str) -> tuple[dict, dict, dict]:
    vector = json.loads((VECTORS / name).read_text())
    first = vector["records"][0]
    key = json.loads(base64.b64decode(first["key"]))
    value = json.loads(base64.b64decode(first["value"]))
    return vector["table_schema"], key, value


def _columns(schema: Schema) -> list[tuple[str, str, bool]]:
    return [(f.name, type_text(f.field_type), f.required) for f in schema.fields]


def _field_type(field: dict[str, Any]) -> str | None:
    t, _ = iceberg_type(node_from_json(field))
    return None if t is None else type_text(t)


# ---------------------------------------------------------------- recorded payloads


def test_recorded_vectors_give_exactly_their_tables():
    table, key, value = _vector_record("debezium_json_wrapped.json")
    derived = table_schema_from_json(value, key)
    assert derived.schema == Schema.from_json(table)
    assert derived.notes == () and derived.record == "dbserver1.inventory.customers.Value"
    avro = json.loads((VECTORS / "debezium_avro.json").read_text())["table_schema"]
    schemas = VECTORS / "schemas"
    derived = table_schema_from_avro(
        (schemas / "31.avsc").read_text(), (schemas / "32.avsc").read_text()
    )
    assert derived.schema == Schema.from_json(avro)
    assert derived.identifier_fields == ("id",)


def test_postgres_orders_json_maps_every_debezium_type():
    rec = _recorded("pg_orders.json")
    derived = table_schema_from_json(rec["value"], rec["key"])
    assert _columns(derived.schema) == [
        ("id", "long", True),
        ("order_uuid", "uuid", True),
        ("customer_id", "int", False),
        ("status", "string", False),  # io.debezium.data.Enum
        ("total", "decimal(12, 2)", True),
        ("discount", "decimal(38, 10)", False),  # VariableScaleDecimal
        ("attrs", "string", False),  # Json
        ("created_at", "timestamp", True),  # MicroTimestamp
        ("updated_at", "timestamptz", False),  # ZonedTimestamp
        ("ship_date", "date", False),
        ("ship_by", "time", False),  # MicroTime
        ("delivery_area", "struct<wkb: binary, srid: int>", False),  # Geometry
        ("tags", "list<string>", False),
        ("flags", "binary", False),  # Bits
        ("lead_time", "long", False),  # MicroDuration
        ("weight", "float", False),
        ("qty", "int", True),  # int16
    ]
    s = derived.schema
    assert [f.field_id for f in s.fields] == list(range(1, 18))
    area = s.find_field_by_name("delivery_area").field_type
    assert isinstance(area, StructType)
    assert [(f.field_id, f.required) for f in area.fields] == [(18, True), (19, False)]
    tags = s.find_field_by_name("tags").field_type
    assert isinstance(tags, ListType) and tags.element_id == 20 and not tags.element_required
    assert s.identifier_field_ids == (1,) and derived.identifier_fields == ("id",)
    assert derived.notes == ()
    assert derived.record == "dbserver1.inventory.orders.Value"


def test_postgres_customers_json_point_map_and_required_columns():
    rec = _recorded("pg_customers.json")
    derived = table_schema_from_json(rec["value"], rec["key"])
    assert _columns(derived.schema) == [
        ("id", "int", True),
        ("email", "string", True),
        ("first_name", "string", False),
        ("last_name", "string", False),
        ("balance", "decimal(10, 2)", False),
        ("created_at", "timestamp", False),
        ("birth", "date", False),
        ("home", "struct<x: double, y: double, wkb: binary, srid: int>", False),  # Point
        ("prefs", "map<string, string>", False),  # hstore as a map
        ("tier", "string", False),
    ]
    prefs = derived.schema.find_field_by_name("prefs").field_type
    assert isinstance(prefs, MapType) and not prefs.value_required


def test_avro_writer_schema_gives_the_same_table_as_json():
    rec = _recorded("pg_orders.json")
    from_json = table_schema_from_json(rec["value"], rec["key"])
    from_avro = table_schema_from_avro(
        (DATA / "pg_orders_value.avsc").read_text(), (DATA / "pg_orders_key.avsc").read_bytes()
    )
    assert from_avro.schema == from_json.schema
    assert from_avro.notes == ()


def test_derived_schemas_decode_the_recorded_events():
    for name in ("pg_orders.json", "pg_customers.json"):
        rec = _recorded(name)
        schema = table_schema_from_json(rec["value"], rec["key"]).schema
        value, key = json.dumps(rec["value"]).encode(), json.dumps(rec["key"]).encode()
        out = DebeziumDecoder(schema).decode(kafka_batch([value], [key], topic=rec["topic"]))
        assert out.dead_letters.num_rows == 0, out.dead_letters.to_pylist()
        row = data_rows(out)[0]
        if name == "pg_orders.json":
            assert row["total"] == Decimal("1234.50")
            assert row["discount"] == Decimal("2.5")
            assert row["delivery_area"]["srid"] == 4326
            assert row["delivery_area"]["wkb"][:5] == b"\x01\x03\x00\x00\x00"  # WKB polygon
            assert str(row["created_at"]) == "2024-03-01 12:00:00.123456"
            assert str(row["ship_by"]) == "17:00:00" and row["qty"] == 3
        else:
            assert row["email"] == "sally@example.com"  # the after image
            assert row["balance"] == Decimal("1234.56")
            assert row["home"]["x"] == 13.4 and row["home"]["srid"] is None
            assert dict(row["prefs"]) == {"lang": "en", "news": "weekly"}


class _Schemas:
    def __init__(self, texts: dict[int, str]) -> None:
        self.texts = texts

    def schema_text(self, schema_id: int) -> str:
        return self.texts[schema_id]


def _framed(schema_id: int, schema: str, obj: Any) -> bytes:
    buf = io.BytesIO()
    buf.write(b"\0" + struct.pack(">I", schema_id))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(json.loads(schema)), obj)
    return buf.getvalue()


def test_derived_avro_schema_decodes_an_avro_event():
    value_schema = (DATA / "pg_orders_value.avsc").read_text()
    key_schema = (DATA / "pg_orders_key.avsc").read_text()
    payload = dict(_recorded("pg_orders.json")["value"]["payload"])
    after = dict(payload["after"])
    after["total"] = Decimal("1234.50")
    # Debezium's ``after`` is ["null", "Value"], a named reference to ``before``'s record:
    # its VariableScaleDecimal is unwrapped only if the reference is followed.
    after["discount"] = {"scale": 2, "value": (1250).to_bytes(2, "big", signed=True)}
    after["delivery_area"] = {"wkb": base64.b64decode(after["delivery_area"]["wkb"]), "srid": 4326}
    after["flags"] = base64.b64decode(after["flags"])
    payload["after"] = after
    schema = table_schema_from_avro(value_schema, key_schema).schema
    decoder = DebeziumDecoder(
        schema,
        DebeziumOptions(value_format="avro", key_format="avro"),
        _Schemas({1: value_schema, 2: key_schema}),
    )
    batch = kafka_batch(
        [_framed(1, value_schema, payload)], [_framed(2, key_schema, {"id": 10001})]
    )
    out = decoder.decode(batch)
    assert out.dead_letters.num_rows == 0, out.dead_letters.to_pylist()
    row = data_rows(out)[0]
    assert row["id"] == 10001 and row["total"] == Decimal("1234.50") and row["flags"] == b"\x0b"
    assert row["discount"] == Decimal("12.50")
    assert str(row["updated_at"]) == "2024-03-01 12:00:05.500000+00:00"


# ---------------------------------------------------------------- one mapping


def test_logical_types_agree_with_the_decoders_epoch_units():
    """``debezium._EPOCH_UNITS`` (value decoding) and ``LOGICAL_TYPES`` (schemas) name the
    same temporal types: a date unit is a date column, a time name a time column, and a
    nanosecond timestamp a timestamp_ns column."""
    assert debezium.CONNECT_DECIMAL is connect_envelope.CONNECT_DECIMAL
    assert connect_envelope.CONNECT_DECIMAL == "org.apache.kafka.connect.data.Decimal"
    assert connect_envelope.VARIABLE_SCALE_DECIMAL == "io.debezium.data.VariableScaleDecimal"
    for name, unit in debezium._EPOCH_UNITS.items():
        mapped = LOGICAL_TYPES[name].iceberg
        if unit == "D":
            assert mapped == DATE, name
        elif name.rsplit(".", 1)[1].endswith("Time"):
            assert mapped == TIME, name
        else:
            assert mapped == (TIMESTAMP_NS if unit == "ns" else TIMESTAMP), name


def _named(kind: str, name: str, optional: bool = True, **params: str) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "optional": optional, "name": name, "field": "c"}
    if params:
        out["parameters"] = params
    return out


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ({"type": "int8"}, "int"),
        ({"type": "int16"}, "int"),
        ({"type": "int32"}, "int"),
        ({"type": "int64"}, "long"),
        ({"type": "float32"}, "float"),
        ({"type": "float64"}, "double"),
        ({"type": "boolean"}, "boolean"),
        ({"type": "string"}, "string"),
        ({"type": "bytes"}, "binary"),
        (_named("int32", "io.debezium.time.Date"), "date"),
        (_named("int32", "io.debezium.time.Time"), "time"),
        (_named("int64", "io.debezium.time.MicroTime"), "time"),
        (_named("int64", "io.debezium.time.NanoTime"), "time"),
        (_named("int64", "io.debezium.time.Timestamp"), "timestamp"),
        (_named("int64", "io.debezium.time.MicroTimestamp"), "timestamp"),
        (_named("int64", "io.debezium.time.NanoTimestamp"), "timestamp_ns"),
        (_named("string", "io.debezium.time.ZonedTimestamp"), "timestamptz"),
        (_named("string", "io.debezium.time.ZonedTime"), "string"),
        (_named("int32", "io.debezium.time.Year"), "int"),
        (_named("int64", "io.debezium.time.MicroDuration"), "long"),
        (_named("string", "io.debezium.time.Interval"), "string"),
        (_named("string", "io.debezium.data.Json"), "string"),
        (_named("string", "io.debezium.data.Xml"), "string"),
        (_named("string", "io.debezium.data.Uuid"), "uuid"),
        (_named("string", "io.debezium.data.Enum", allowed="a,b"), "string"),
        (_named("string", "io.debezium.data.EnumSet", allowed="a,b"), "string"),
        (_named("bytes", "io.debezium.data.Bits", length="12"), "binary"),
        (_named("int32", "org.apache.kafka.connect.data.Date"), "date"),
        (_named("int32", "org.apache.kafka.connect.data.Time"), "time"),
        (_named("int64", "org.apache.kafka.connect.data.Timestamp"), "timestamp"),
        (
            _named(
                "bytes",
                "org.apache.kafka.connect.data.Decimal",
                scale="3",
                **{"connect.decimal.precision": "9"},
            ),
            "decimal(9, 3)",
        ),
        ({"type": "array", "items": {"type": "int16"}}, "list<int>"),
        (
            {"type": "map", "keys": {"type": "int32"}, "values": {"type": "float64"}},
            "map<int, double>",
        ),
        (
            {"type": "struct", "fields": [{"field": "a", "type": "string"}]},
            "struct<a: string>",
        ),
    ],
)
def test_connect_types(field, expected):
    assert _field_type(field) == expected


@pytest.mark.parametrize(
    ("avro", "expected"),
    [
        ({"type": "int", "connect.type": "int8"}, "int"),
        ({"type": "int", "connect.type": "int16"}, "int"),
        ("long", "long"),
        ("float", "float"),
        ("double", "double"),
        ("bytes", "binary"),
        ({"type": "fixed", "name": "F", "size": 4}, "binary"),
        ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, "string"),
        ({"type": "map", "values": ["null", "long"]}, "map<string, long>"),
        (
            {
                "type": "array",
                "items": {"type": "long", "connect.name": "io.debezium.time.MicroTime"},
            },
            "list<time>",
        ),
        ({"type": "int", "logicalType": "date"}, "date"),
        ({"type": "int", "logicalType": "time-millis"}, "time"),
        ({"type": "long", "logicalType": "time-micros"}, "time"),
        ({"type": "long", "logicalType": "timestamp-millis"}, "timestamptz"),
        ({"type": "long", "logicalType": "timestamp-micros"}, "timestamptz"),
        ({"type": "long", "logicalType": "timestamp-nanos"}, "timestamptz_ns"),
        ({"type": "long", "logicalType": "local-timestamp-micros"}, "timestamp"),
        ({"type": "long", "logicalType": "local-timestamp-nanos"}, "timestamp_ns"),
        ({"type": "string", "logicalType": "uuid"}, "uuid"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 7, "scale": 2}, "decimal(7, 2)"),
        (
            {
                "type": "fixed",
                "name": "D",
                "size": 8,
                "logicalType": "decimal",
                "precision": 18,
                "scale": 4,
            },
            "decimal(18, 4)",
        ),
        # Kafka Connect's Timestamp through the AvroConverter: the Connect name wins over
        # the Avro logical type (Connect timestamps have no zone).
        (
            {
                "type": "long",
                "logicalType": "timestamp-millis",
                "connect.name": "org.apache.kafka.connect.data.Timestamp",
            },
            "timestamp",
        ),
        (
            {"type": {"type": "long", "connect.name": "io.debezium.time.NanoTimestamp"}},
            "timestamp_ns",
        ),
    ],
)
def test_avro_types(avro, expected):
    t, notes = iceberg_type(node_from_avro(avro))
    assert t is not None and type_text(t) == expected and notes == ()


# ---------------------------------------------------------------- decimals


def _decimal(**params: str) -> dict[str, Any]:
    return _named("bytes", "org.apache.kafka.connect.data.Decimal", **params)


def test_decimal_precision_and_scale_edges():
    cases = [
        (_decimal(scale="2"), "decimal(38, 2)", "Decimal without a precision; assumed 38"),
        (
            _decimal(scale="4", **{"connect.decimal.precision": "50"}),
            "decimal(38, 4)",
            "Decimal precision 50 capped at 38; larger values become dead letters",
        ),
        (_decimal(scale="-2", **{"connect.decimal.precision": "5"}), "decimal(7, 0)", None),
        (
            _decimal(scale="0", **{"connect.decimal.precision": "0"}),
            "decimal(38, 0)",
            "Decimal with precision 0; assumed 38",
        ),
        (_decimal(scale="5", **{"connect.decimal.precision": "2"}), "decimal(5, 5)", None),
    ]
    for field, expected, note in cases:
        t, notes = iceberg_type(node_from_json(field), path="amount")
        assert t is not None and type_text(t) == expected
        assert [n.message for n in notes] == ([note] if note else [])
        assert all(n.column == "amount" and not n.omitted for n in notes)


def test_decimals_no_type_fits_are_left_out_with_a_note():
    value = {
        "type": "struct",
        "fields": [
            {"field": "id", "type": "int32"},
            {**_decimal(scale="40", **{"connect.decimal.precision": "60"}), "field": "huge"},
            {**_decimal(), "field": "noscale"},
            {**_decimal(scale="x"), "field": "badscale"},
        ],
    }
    derived = table_schema_from_json(value)
    assert [f.name for f in derived.schema.fields] == ["id"]
    assert [(n.column, n.omitted) for n in derived.notes] == [
        ("huge", True),
        ("noscale", True),
        ("badscale", True),
    ]
    assert str(derived.notes[0]) == "huge: Decimal scale 40 exceeds Iceberg's 38 (column left out)"


def test_variable_scale_decimal_type_is_an_option():
    rec = _recorded("pg_orders.json")
    options = ConnectSchemaOptions(variable_scale_decimal=decimal(30, 6))
    derived = table_schema_from_json(rec["value"], rec["key"], options)
    assert derived.schema.find_field_by_name("discount").field_type == decimal(30, 6)


# ---------------------------------------------------------------- fallbacks


def test_unknown_or_misplaced_logical_names_fall_back_to_the_physical_type():
    value = {
        "type": "struct",
        "fields": [
            _named("string", "io.debezium.data.SomethingNew") | {"field": "a"},
            _named("string", "io.debezium.time.Date") | {"field": "b"},
            _named("int64", "org.apache.kafka.connect.data.Decimal", scale="2") | {"field": "c"},
        ],
    }
    derived = table_schema_from_json(value)
    assert _columns(derived.schema) == [
        ("a", "string", False),
        ("b", "string", False),
        ("c", "long", False),
    ]
    assert [str(n) for n in derived.notes] == [
        "a: unknown logical type io.debezium.data.SomethingNew; mapped as string",
        (
            "b: io.debezium.time.Date with physical type string is not a known encoding; "
            "mapped as string"
        ),
        (
            "c: org.apache.kafka.connect.data.Decimal with physical type int64 is not a known "
            "encoding; mapped as int64"
        ),
    ]


def test_unmappable_columns_are_left_out_and_named():
    value = {
        "type": "record",
        "name": "Row",
        "namespace": "ns",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "either", "type": ["null", "string", "long"]},
            {"name": "empty", "type": {"type": "record", "name": "Empty", "fields": []}},
            {"name": "nested", "type": {"type": "array", "items": ["int", "string"]}},
            {"name": "self", "type": ["null", "Row"]},
            {"name": "ghost", "type": "NotDefined"},
            {"name": "nothing", "type": "null"},
        ],
    }
    derived = table_schema_from_avro(value)
    assert [f.name for f in derived.schema.fields] == ["id"]
    assert {n.column: n.message for n in derived.notes} == {
        "either": "an Avro union of string, long has no single Iceberg type",
        "empty": "a struct without (mappable) fields",
        "nested.element": "an Avro union of int, string has no single Iceberg type",
        "self": "record ns.Row contains itself",
        "ghost": "Avro type 'NotDefined' is not defined before its use",
        "nothing": "a field that is always null",
    }
    assert all(n.omitted for n in derived.notes)


def test_nesting_deeper_than_the_limit_is_left_out():
    inner: dict[str, Any] = {"type": "int32"}
    for _ in range(80):
        inner = {"type": "array", "items": inner}
    derived = table_schema_from_json(
        {"type": "struct", "fields": [{"field": "id", "type": "int32"}, {**inner, "field": "d"}]}
    )
    assert [f.name for f in derived.schema.fields] == ["id"]
    assert derived.notes[0].omitted and "64 levels" in derived.notes[0].message


# ---------------------------------------------------------------- optional flags


def test_optional_flags_nested_and_absent():
    value = {
        "type": "struct",
        "fields": [
            {"field": "a", "type": "int32"},  # no "optional": required, as JsonConverter reads it
            {"field": "b", "type": "int32", "optional": True},
            {
                "field": "c",
                "type": "array",
                "optional": True,
                "items": {"type": "string", "optional": False},
            },
            {
                "field": "d",
                "type": "map",
                "keys": {"type": "string"},
                "values": {"type": "int64", "optional": True},
            },
            {
                "field": "e",
                "type": "struct",
                "optional": True,
                "fields": [
                    {"field": "x", "type": "float64", "optional": False},
                    {"field": "y", "type": "float64", "optional": True},
                ],
            },
        ],
    }
    s = table_schema_from_json(value).schema
    assert [f.required for f in s.fields] == [True, False, False, True, False]
    c, d, e = (s.find_field_by_name(n).field_type for n in "cde")
    assert isinstance(c, ListType) and c.element_required
    assert isinstance(d, MapType) and not d.value_required
    assert isinstance(e, StructType) and [f.required for f in e.fields] == [True, False]


# ---------------------------------------------------------------- envelopes and keys


def test_rows_without_an_envelope_and_columns_named_after():
    # After ExtractNewRecordState the value is the row; a table may have a column "after".
    row = {
        "type": "struct",
        "name": "plain",
        "fields": [
            {"field": "id", "type": "int64"},
            {"field": "after", "type": "struct", "fields": [{"field": "z", "type": "string"}]},
        ],
    }
    derived = table_schema_from_json({"schema": row, "payload": None})
    assert _columns(derived.schema) == [("id", "long", True), ("after", "struct<z: string>", True)]
    # An envelope whose after is null-only still has before.
    envelope = {
        "type": "struct",
        "fields": [
            {"field": "before", "type": "struct", "optional": True, "fields": row["fields"]},
            {"field": "op", "type": "string"},
        ],
    }
    assert table_schema_from_json(envelope).schema == derived.schema


def test_schema_errors_name_the_record_and_column():
    rec = _recorded("pg_orders.json")
    value = rec["value"]["schema"]
    label = "dbserver1.inventory.orders.Value"

    def key(*fields: dict[str, Any]) -> dict[str, Any]:
        return {"type": "struct", "name": "k", "fields": list(fields)}

    cases = [
        (key({"field": "nope", "type": "int64"}), f"{label}: key column 'nope' is not a column"),
        (key({"field": "customer_id", "type": "int32"}), "'customer_id' is optional"),
        (key({"field": "id", "type": "int32"}), "'id' is int in the key but long in the row"),
        (key({"field": "tags", "type": "string"}), "'tags' is not a primitive"),
        ({"type": "int64"}, f"{label}: the key schema is int64, not a struct"),
    ]
    for key_schema, message in cases:
        with pytest.raises(ConnectSchemaError, match=message.replace("(", r"\(")):
            table_schema_from_json(value, key_schema)
    doubled = {"type": "struct", "fields": [{"field": "w", "type": "float64"}]}
    with pytest.raises(ConnectSchemaError, match="'w' is double, which Iceberg does not allow"):
        table_schema_from_json(doubled, doubled)
    with pytest.raises(ConnectSchemaError, match="is string, not a struct of columns"):
        table_schema_from_json({"type": "string"})
    bare = {"type": "struct", "name": "x.Envelope", "fields": [{"field": "op", "type": "string"}]}
    with pytest.raises(ConnectSchemaError, match="x.Envelope is a Debezium envelope without"):
        table_schema_from_json(bare)
    twice = {"type": "struct", "name": "t", "fields": [{"field": "a", "type": "int8"}] * 2}
    with pytest.raises(ConnectSchemaError, match="record t has field 'a' twice"):
        table_schema_from_json(twice)
    with pytest.raises(ConnectSchemaError, match="must be a JSON object"):
        table_schema_from_json([1, 2])


def test_composite_keys_keep_the_key_schema_order():
    value = {
        "type": "struct",
        "fields": [
            {"field": "region", "type": "string"},
            {"field": "id", "type": "int64"},
            {"field": "v", "type": "string", "optional": True},
        ],
    }
    key = {"type": "struct", "fields": [{"field": "id", "type": "int64"}, value["fields"][0]]}
    derived = table_schema_from_json(value, key)
    assert derived.identifier_fields == ("id", "region")
    assert derived.schema.identifier_field_ids == (2, 1)


# ---------------------------------------------------------------- robustness

_leaf = st.fixed_dictionaries(
    {"type": st.sampled_from(["int8", "int64", "string", "bytes", "bogus", "struct", "array"])},
    optional={
        "optional": st.booleans(),
        "name": st.sampled_from(
            [
                "io.debezium.time.Date",
                "org.apache.kafka.connect.data.Decimal",
                "io.debezium.data.VariableScaleDecimal",
                "x.y",
            ]
        ),
        "parameters": st.dictionaries(
            st.sampled_from(["scale", "connect.decimal.precision"]),
            st.sampled_from(["0", "2", "38", "90", "-3", "z"]),
        ),
    },
)
_schemas = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.builds(lambda i: {"type": "array", "items": i}, inner),
        st.builds(lambda k, v: {"type": "map", "keys": k, "values": v}, inner, inner),
        st.builds(
            lambda fs: {
                "type": "struct",
                "fields": [{**f, "field": f"f{i}"} for i, f in enumerate(fs)],
            },
            st.lists(inner, max_size=4),
        ),
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_schemas, min_size=1, max_size=5))
def test_random_connect_schemas_map_or_fail_with_a_schema_error(columns):
    value = {"type": "struct", "fields": [{**c, "field": f"c{i}"} for i, c in enumerate(columns)]}
    try:
        derived = table_schema_from_json(value)
    except ConnectSchemaError:
        return
    s = derived.schema
    ids = [f.field_id for f in s.all_fields()]
    assert sorted(ids) == list(range(1, len(ids) + 1))
    kept = {f.name for f in s.fields}
    omitted = {n.column.split(".")[0] for n in derived.notes if n.omitted}
    assert kept | omitted == {f"c{i}" for i in range(len(columns))}
    assert Schema.from_json(s.to_json()) == s


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"schema": {"type": "int32"}, "payload": 1}, True),
        ({"schema": None, "payload": None}, True),
        ({"payload": {"id": 1}}, False),
        ({"schema": {"type": "int32"}}, False),
        ({"id": 1}, False),
        (["schema", "payload"], False),
        ("schema payload", False),
        (None, False),
    ],
)
def test_connect_envelope_is_recognised_by_its_two_keys_only(doc, expected):
    assert connect_envelope.is_connect_envelope(doc) is expected
