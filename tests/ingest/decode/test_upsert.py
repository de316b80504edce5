"""Key-upsert mode: Kafka key = primary key, null value = delete."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.errors import ConfigError
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import INT, LONG, STRING, NestedField
from calving.ingest.decode.upsert import KeyUpsertDecoder
from tests.ingest.decode import assert_partitioned, data_rows, kafka_batch

ONE_KEY = Schema(
    (NestedField(1, "id", LONG, required=True), NestedField(2, "name", STRING)),
    identifier_field_ids=(1,),
)
TWO_KEYS = Schema(
    (
        NestedField(1, "region", STRING, required=True),
        NestedField(2, "n", INT, required=True),
        NestedField(3, "v", STRING),
    ),
    identifier_field_ids=(1, 2),
)


def test_scalar_and_object_keys_upsert_and_delete():
    values = [b'{"name":"a"}', b'{"id":2,"name":"b"}', None, b'{"id":4}']
    keys = [b"1", b'{"id":2}', b"3", b"5"]
    batch = kafka_batch(values, keys)
    out = KeyUpsertDecoder(ONE_KEY).decode(batch)
    assert_partitioned(batch, out)
    assert data_rows(out) == [
        {"id": 1, "name": "a"},
        {"id": 2, "name": "b"},
        {"id": 3, "name": None},
    ]
    assert out.rows.column("_op").to_pylist() == [0, 0, 1]
    assert "is 5 in the Kafka key but 4 in the value" in out.dead_letters.column("error")[0].as_py()


def test_composite_keys():
    values = [b'{"v":"x"}', None, b'{"v":"y"}', b'{"v":"z"}']
    keys = [b'{"region":"eu","n":1}', b'{"region":"eu","n":2}', b'"eu"', b'{"region":"eu"}']
    out = KeyUpsertDecoder(TWO_KEYS).decode(kafka_batch(values, keys))
    assert data_rows(out) == [
        {"region": "eu", "n": 1, "v": "x"},
        {"region": "eu", "n": 2, "v": None},
    ]
    assert out.dead_letters.column("error_type").to_pylist() == ["MissingKeyError"] * 2


def test_missing_or_bad_keys_are_dead_letters():
    out = KeyUpsertDecoder(ONE_KEY).decode(
        kafka_batch([b"{}", b"{}", b"{}"], [None, b"x", b"null"])
    )
    assert out.rows.num_rows == 0
    assert out.dead_letters.column("error_type").to_pylist() == ["MissingKeyError"] * 3


def test_needs_identifier_fields():
    with pytest.raises(ConfigError):
        KeyUpsertDecoder(Schema((NestedField(1, "a", LONG),)))


_maybe = st.one_of(st.none(), st.binary(max_size=30), st.integers().map(lambda i: str(i).encode()))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(_maybe, _maybe), max_size=25))
def test_random_input_never_escapes(pairs):
    batch = kafka_batch([v for _, v in pairs], [k for k, _ in pairs])
    out = KeyUpsertDecoder(ONE_KEY).decode(batch)
    assert_partitioned(batch, out)
