"""Debezium envelope decoder: ops, tombstones, keys, encodings, never losing a record."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.errors import ConfigError
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import LONG, STRING, TIME, TIMESTAMP, NestedField, decimal
from calving.ingest.decode.debezium import DebeziumDecoder, DebeziumOptions
from tests.ingest.decode import assert_partitioned, data_rows, kafka_batch

TABLE = Schema(
    (
        NestedField(1, "tenant", STRING, required=True),
        NestedField(2, "id", LONG, required=True),
        NestedField(3, "price", decimal(6, 3)),
        NestedField(4, "at", TIMESTAMP),
        NestedField(5, "t", TIME),
    ),
    identifier_field_ids=(1, 2),
)


def event(op, before=None, after=None) -> bytes:
    return json.dumps({"op": op, "before": before, "after": after, "source": {"lsn": 1}}).encode()


def b64_unscaled(n: int) -> str:
    return base64.b64encode(n.to_bytes(8, "big", signed=True)).decode()


def test_ops_map_to_upserts_and_deletes():
    after = {"tenant": "a", "id": 1, "price": b64_unscaled(1500), "at": 1_000, "t": 5}
    values = [
        event("c", after=after),
        event("u", before=after, after={**after, "id": 2}),
        event("d", before={"tenant": "a", "id": 1}),
        event("r", after=after),
        event("d"),
        event("m"),
        event("x", after=after),
        event("u"),
    ]
    keys = [None, None, None, None, b'{"tenant":"a","id":3}', None, None, None]
    batch = kafka_batch(values, keys)
    out = DebeziumDecoder(TABLE).decode(batch)
    assert_partitioned(batch, out)
    rows = data_rows(out)
    assert out.rows.column("_op").to_pylist() == [0, 0, 1, 0, 1]
    assert str(rows[0]["price"]) == "1.500"
    assert rows[0]["at"].isoformat() == "1970-01-01T00:00:01"  # auto: millis
    assert rows[0]["t"].isoformat() == "00:00:00.000005"  # auto: micros for times
    assert rows[2] == {"tenant": "a", "id": 1, "price": None, "at": None, "t": None}
    assert rows[4]["id"] == 3
    types = out.dead_letters.column("error_type").to_pylist()
    assert types == ["UnsupportedOperationError", "MalformedRecordError", "MalformedRecordError"]


def test_tombstones_need_a_key():
    values = [None, None, None, None, None]
    keys = [b'{"tenant":"a","id":5}', None, b"5", b'{"tenant":"a"}', b"\xff"]
    out = DebeziumDecoder(TABLE).decode(kafka_batch(values, keys))
    assert data_rows(out) == [{"tenant": "a", "id": 5, "price": None, "at": None, "t": None}]
    errors = out.dead_letters.column("error").to_pylist()
    assert out.dead_letters.column("error_type").to_pylist() == ["MissingKeyError"] * 3 + [
        "MalformedRecordError"
    ]
    assert "without a Kafka key" in errors[0]
    assert "expected an object with ['tenant', 'id']" in errors[1]
    assert "field 'id'" in errors[2]
    assert "tombstone: Kafka key: invalid UTF-8" in errors[3]


def test_schema_wrapper_names_decide_units_and_decimals():
    schema = {
        "type": "struct",
        "fields": [
            {
                "type": "struct",
                "field": "after",
                "fields": [
                    {"type": "int64", "field": "at", "name": "io.debezium.time.NanoTimestamp"},
                    {"type": "int64", "field": "t", "name": "io.debezium.time.Time"},
                    {
                        "type": "bytes",
                        "field": "price",
                        "name": "org.apache.kafka.connect.data.Decimal",
                        "parameters": {"scale": "3"},
                    },
                ],
            }
        ],
    }
    payload = {
        "op": "c",
        "after": {
            "tenant": "a",
            "id": 1,
            "at": 2_000_000_000,
            "t": 1000,
            "price": b64_unscaled(-7),
        },
    }
    value = json.dumps({"schema": schema, "payload": payload}).encode()
    out = DebeziumDecoder(TABLE).decode(kafka_batch([value]))
    row = data_rows(out)[0]
    assert row["at"].isoformat() == "1970-01-01T00:00:02"
    assert row["t"].isoformat() == "00:00:01"
    assert str(row["price"]) == "-0.007"


def test_decimal_handling_modes_without_schema():
    after = {"tenant": "a", "id": 1, "price": "1.25"}
    as_string = DebeziumDecoder(TABLE, DebeziumOptions(decimal_handling_mode="string"))
    assert (
        str(data_rows(as_string.decode(kafka_batch([event("c", after=after)])))[0]["price"])
        == "1.250"
    )
    precise = DebeziumDecoder(TABLE).decode(kafka_batch([event("c", after=after)]))
    assert precise.dead_letters.column("error_type").to_pylist() == ["SchemaMismatchError"]
    variable = {
        "tenant": "a",
        "id": 1,
        "price": {"scale": 1, "value": base64.b64encode(b"\x0c").decode()},
    }
    assert (
        str(
            data_rows(DebeziumDecoder(TABLE).decode(kafka_batch([event("c", after=variable)])))[0][
                "price"
            ]
        )
        == "1.200"
    )


def test_configuration_errors():
    with pytest.raises(ConfigError, match="identifier fields"):
        DebeziumDecoder(Schema((NestedField(1, "a", LONG),)))
    with pytest.raises(ConfigError, match="schema source"):
        DebeziumDecoder(TABLE, DebeziumOptions(value_format="avro"))
    with pytest.raises(ConfigError):
        DebeziumOptions(decimal_handling_mode="float")


_maybe_bytes = st.one_of(st.none(), st.binary(max_size=40))
_json_events = st.builds(
    lambda op, before, after: event(op, before, after),
    st.sampled_from(["c", "r", "u", "d", "t", "z"]),
    st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {
                "tenant": st.one_of(st.text(max_size=3), st.integers()),
                "id": st.integers(-(2**64), 2**64),
            }
        ),
    ),
    st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(["tenant", "id", "price", "at", "t"]),
            st.one_of(st.none(), st.integers(), st.text(max_size=4), st.floats()),
            max_size=5,
        ),
    ),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(_maybe_bytes, st.one_of(_maybe_bytes, _json_events)), max_size=25))
def test_random_input_never_escapes(pairs):
    batch = kafka_batch([v for _, v in pairs], [k for k, _ in pairs])
    out = DebeziumDecoder(TABLE).decode(batch)
    assert_partitioned(batch, out)
    assert set(out.rows.column("_op").to_pylist()) <= {0, 1}
