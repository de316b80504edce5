"""JSON values decoder: rows, typed dead letters, unknown fields; vectorized == per record."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calving.commit.spec.schema import Schema
from calving.commit.spec.types import (
    BINARY,
    BOOLEAN,
    DATE,
    DOUBLE,
    FLOAT,
    INT,
    LONG,
    STRING,
    TIMESTAMPTZ,
    ListType,
    MapType,
    NestedField,
    StructType,
    decimal,
)
from calving.ingest.decode.batch import DEAD_LETTER_SCHEMA
from calving.ingest.decode.json_values import JsonOptions, JsonValueDecoder
from calving.ingest.write.arrow_schema import schema_to_arrow
from tests.ingest.decode import assert_partitioned, data_rows, kafka_batch

SCHEMA = Schema(
    (
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "name", STRING),
        NestedField(3, "score", DOUBLE),
        NestedField(4, "at", TIMESTAMPTZ),
        NestedField(5, "day", DATE),
        NestedField(6, "price", decimal(9, 2)),
        NestedField(7, "tags", ListType(8, STRING)),
        NestedField(
            9,
            "addr",
            StructType(
                (NestedField(10, "city", STRING, required=True), NestedField(11, "zip", INT))
            ),
        ),
        NestedField(12, "blob", BINARY),
        NestedField(13, "ratio", FLOAT),
        NestedField(14, "ok", BOOLEAN),
    ),
    identifier_field_ids=(1,),
)

GOOD = {
    "id": 1,
    "name": "Ada",
    "score": 2,
    "at": "2024-05-01T10:00:00.5+02:00",
    "day": "2024-05-01",
    "price": 12.5,
    "tags": ["a", None],
    "addr": {"city": "Oslo", "zip": 150},
    "blob": "AAEC",
    "ratio": 0.5,
    "ok": True,
}


def decoders():
    return [
        JsonValueDecoder(SCHEMA, JsonOptions(vectorized=True)),
        JsonValueDecoder(SCHEMA, JsonOptions(vectorized=False)),
    ]


def enc(obj) -> bytes:
    return json.dumps(obj).encode()


@pytest.mark.parametrize("decoder", decoders(), ids=["vectorized", "per-record"])
def test_good_records_become_rows_in_the_table_schema(decoder):
    batch = kafka_batch([enc(GOOD)] * 20 + [enc({"id": 2})] * 5)
    out = decoder.decode(batch)
    assert out.dead_letters.num_rows == 0
    assert out.rows.schema.remove_metadata() == out.rows.schema.remove_metadata()
    target = schema_to_arrow(SCHEMA)
    for f in target:
        assert out.rows.schema.field(f.name).equals(f, check_metadata=True)
    row = data_rows(out)[0]
    assert row["price"].as_tuple().exponent == -2 and str(row["price"]) == "12.50"
    assert row["at"].isoformat() == "2024-05-01T08:00:00.500000+00:00"
    assert row["day"].isoformat() == "2024-05-01"
    assert row["tags"] == ["a", None]
    assert row["addr"] == {"city": "Oslo", "zip": 150}
    assert row["blob"] == b"\x00\x01\x02"
    assert data_rows(out)[-1] == {f.name: (2 if f.name == "id" else None) for f in target}
    assert out.rows.column("_op").to_pylist() == [0] * 25
    assert out.rows.column("_offset").to_pylist() == list(range(100, 125))
    assert set(out.rows.column("_topic").to_pylist()) == {"orders"}


BAD = [
    (b'{"id": "1"}', "SchemaMismatchError", "field 'id': expected long"),
    (b'{"name": "x"}', "SchemaMismatchError", "field 'id': required field is missing"),
    (b'{"id": 1, "addr": {"zip": 1}}', "SchemaMismatchError", "field 'addr.city'"),
    (b'{"id": 1, "price": 1.234}', "SchemaMismatchError", "more than 2 decimal places"),
    (b'{"id": 1, "at": "2024-01-01T00:00:00"}', "SchemaMismatchError", "no UTC offset"),
    (b'{"id": 1, "day": "2023-02-29"}', "SchemaMismatchError", "day 29 out of range"),
    (b'{"id": 1, "blob": "***"}', "SchemaMismatchError", "base64"),
    (b'{"id": 1, "name": "\\ud800"}', "SchemaMismatchError", "field 'name'"),
    (b'{"id": 1', "MalformedRecordError", "invalid JSON"),
    (b'\xff{"id": 1}', "MalformedRecordError", "invalid UTF-8 at byte 0"),
    (b'{"id": 1, "name": "\xc3\x28"}', "MalformedRecordError", "invalid UTF-8"),
    (b"[1, 2]", "MalformedRecordError", "expected a JSON object, got list"),
    (b"", "MalformedRecordError", "invalid JSON"),
    (b'{"id": 1}{"id": 2}', "MalformedRecordError", "Extra data"),
    (None, "NullValueError", "no value"),
]


@pytest.mark.parametrize("decoder", decoders(), ids=["vectorized", "per-record"])
def test_bad_records_are_typed_dead_letters_with_coordinates(decoder):
    values = [enc(GOOD)] * 30 + [v for v, _, _ in BAD] + [enc(GOOD)] * 30
    batch = kafka_batch(values, keys=[b"k%d" % i for i in range(len(values))], partition=3)
    out = decoder.decode(batch)
    assert_partitioned(batch, out)
    assert out.rows.num_rows == 60
    dead = out.dead_letters
    assert dead.schema == DEAD_LETTER_SCHEMA
    assert dead.num_rows == len(BAD)
    for row, (value, error_type, text) in zip(dead.to_pylist(), BAD):
        assert row["error_type"] == error_type
        assert text in row["error"]
        assert row["error"].startswith(f"orders/3@{row['offset']}: ")
        assert row["value"] == value
        assert row["key"] == b"k%d" % (row["offset"] - 100)
        assert row["decoder"] == "json"
        assert row["partition"] == 3 and row["timestamp"] is not None


@pytest.mark.parametrize("decoder", decoders(), ids=["vectorized", "per-record"])
def test_unknown_fields_are_reported(decoder):
    values = [
        enc({**GOOD, "extra": 1}),
        enc({**GOOD, "extra": 2.5, "addr": {"city": "x", "floor": "3"}}),
        enc({**GOOD, "nested": {"a": [1]}}),
    ] * 10
    out = decoder.decode(kafka_batch(values))
    assert out.rows.num_rows == 30
    assert out.unknown_fields["extra"] <= {"long", "double"}
    assert out.unknown_fields["addr.floor"] == {"string"}
    assert out.unknown_fields["nested"] == {"struct"}


def test_unknown_fields_with_conflicting_types_do_not_defeat_the_fast_path():
    values = [enc({"id": i, "extra": i if i % 2 else "s"}) for i in range(50)]
    out = JsonValueDecoder(SCHEMA).decode(kafka_batch(values))
    assert out.rows.num_rows == 50
    assert out.unknown_fields["extra"] == {"long", "string"}


def test_case_insensitive_option():
    out = JsonValueDecoder(SCHEMA, JsonOptions(case_insensitive=True)).decode(
        kafka_batch([b'{"ID": 4, "Name": "x"}'])
    )
    assert data_rows(out)[0]["id"] == 4 and data_rows(out)[0]["name"] == "x"
    strict = JsonValueDecoder(SCHEMA).decode(kafka_batch([b'{"ID": 4}']))
    assert strict.dead_letters.num_rows == 1
    # A dead letter's unknown fields are named in its error, never offered as columns.
    assert "fields not in the table: ID" in strict.dead_letters.column("error")[0].as_py()
    assert strict.unknown_fields == {}


def test_unknown_fields_of_dead_letters_are_not_reported_as_new_columns():
    # Every path that refuses a record after seeing its unknown fields: a wrong type on
    # a known column (per record), a value past the vectorized reader's range checks,
    # and many good records sharing a chunk with the poison one.
    good = [json.dumps({"id": i, "name": "n", "live": i}).encode() for i in range(200)]
    poison = [
        json.dumps({"id": "not a number", "dead_a": 1}).encode(),
        json.dumps({"id": 2**70, "dead_b": "x"}).encode(),
        json.dumps({"name": "no id", "dead_c": True}).encode(),
    ]
    out = JsonValueDecoder(SCHEMA).decode(kafka_batch(good[:100] + poison + good[100:]))
    assert out.rows.num_rows == 200 and out.dead_letters.num_rows == 3
    assert set(out.unknown_fields) == {"live"}
    only_dead = JsonValueDecoder(SCHEMA).decode(kafka_batch(poison))
    assert only_dead.unknown_fields == {} and only_dead.dead_letters.num_rows == 3


def test_maps_decode_per_record():
    schema = Schema(
        (
            NestedField(1, "id", LONG, required=True),
            NestedField(2, "m", MapType(3, STRING, 4, LONG)),
        )
    )
    out = JsonValueDecoder(schema).decode(kafka_batch([b'{"id": 1, "m": {"a": 1, "b": null}}']))
    assert data_rows(out) == [{"id": 1, "m": [("a", 1), ("b", None)]}]


def test_oversized_and_deep_values():
    big = enc({"id": 1, "name": "x" * (5 * 1024 * 1024)})
    deep = b'{"id": 1, "x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    moderately_deep = b'{"id": 2, "x": ' + b"[" * 300 + b"]" * 300 + b"}"
    too_deep = b'{"id": 4, "x": ' + b"[" * 2000 + b"]" * 2000 + b"}"
    deep_known = b'{"id": 3, "tags": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    for decoder in decoders():
        padding = [enc({**GOOD, "id": 9})] * 20
        batch = kafka_batch([big, deep, moderately_deep, deep_known, too_deep] + padding)
        out = decoder.decode(batch)
        assert_partitioned(batch, out)
        rows = {r["id"]: r for r in data_rows(out)}
        assert len(rows[1]["name"]) == 5 * 1024 * 1024
        assert 2 in rows
        types = dict(
            zip(
                out.dead_letters.column("offset").to_pylist(),
                out.dead_letters.column("error").to_pylist(),
            )
        )
        assert "nested too deeply" in types[101]
        assert "nested too deeply" in types[104]
        assert 103 in types
        assert len(rows) == 3


def test_empty_batch():
    out = JsonValueDecoder(SCHEMA).decode(kafka_batch([]))
    assert out.rows.num_rows == 0 and out.dead_letters.num_rows == 0


def test_record_batch_input_and_chunked_table():
    batch = kafka_batch([enc(GOOD)] * 10)
    rb = batch.to_batches()[0]
    chunked = pa.concat_tables([batch.slice(0, 4), batch.slice(4)])
    for data in (rb, chunked):
        assert JsonValueDecoder(SCHEMA).decode(data).rows.num_rows == 10


# ---------------------------------------------------------------- properties

_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["2024-01-01T00:00:00Z", "2024-01-01", "2023-02-29", "AAE=", "1.25"]),
)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["id", "name", "city", "zip", "x"]), inner, max_size=4),
    ),
    max_leaves=12,
)
_records = st.one_of(
    st.fixed_dictionaries(
        {"id": st.integers(-5, 2**64)},
        optional={
            "name": st.one_of(st.text(max_size=5), st.integers()),
            "score": st.one_of(st.floats(allow_nan=False), st.integers(-(2**60), 2**60)),
            "at": st.sampled_from(
                [
                    "2024-01-01T00:00:00Z",
                    "2024-01-01T00:00:00",
                    "2024-13-01T00:00:00Z",
                    "1999-12-31 23:59:59.999999-05:00",
                    "2024-02-29T00:00:00.1234567+01:00",
                ]
            ),
            "day": st.sampled_from(["2024-02-29", "2023-02-29", "0000-01-01", "x"]),
            "price": st.one_of(
                st.decimals(
                    places=3,
                    allow_nan=False,
                    allow_infinity=False,
                    min_value=-(10**8),
                    max_value=10**8,
                ).map(str),
                st.integers(-(10**8), 10**8),
            ),
            "tags": st.lists(st.one_of(st.none(), st.text(max_size=3), st.integers()), max_size=3),
            "addr": st.one_of(
                st.none(),
                st.fixed_dictionaries(
                    {},
                    optional={
                        "city": st.one_of(st.none(), st.text(max_size=3)),
                        "zip": st.integers(-(2**33), 2**33),
                    },
                ),
            ),
            "ratio": st.floats(width=32, allow_nan=False),
            "unknown": _json_values,
        },
    ).map(lambda d: json.dumps(d).encode()),
    _json_values.map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=40),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.none(), _records), min_size=1, max_size=40))
def test_vectorized_equals_per_record_and_no_record_is_lost(values):
    batch = kafka_batch(values)
    fast = JsonValueDecoder(SCHEMA, JsonOptions(vectorized=True)).decode(batch)
    slow = JsonValueDecoder(SCHEMA, JsonOptions(vectorized=False)).decode(batch)
    assert_partitioned(batch, fast)
    assert fast.rows.to_pylist() == slow.rows.to_pylist()
    assert (
        fast.dead_letters.column("offset").to_pylist()
        == slow.dead_letters.column("offset").to_pylist()
    )
    assert (
        fast.dead_letters.column("error").to_pylist()
        == slow.dead_letters.column("error").to_pylist()
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=64)), max_size=30))
def test_random_bytes_never_escape(values):
    batch = kafka_batch(values)
    out = JsonValueDecoder(SCHEMA).decode(batch)
    assert_partitioned(batch, out)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"id": st.integers(-(2**63), 2**63 - 1)},
            optional={
                "name": st.text(max_size=10),
                "score": st.floats(allow_nan=False, allow_infinity=False),
                "tags": st.lists(st.text(max_size=3), max_size=3),
                "ok": st.booleans(),
            },
        ),
        min_size=1,
        max_size=30,
    )
)
def test_valid_records_round_trip(objs):
    out = JsonValueDecoder(SCHEMA).decode(kafka_batch([enc(o) for o in objs]))
    assert out.dead_letters.num_rows == 0
    for got, want in zip(data_rows(out), objs):
        for name, value in want.items():
            assert got[name] == value
