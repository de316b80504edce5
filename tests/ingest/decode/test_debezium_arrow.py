"""The Debezium decoder's vectorized path gives exactly what the per-event path gives:
rows (values, ops, coordinates, order), dead letters (reasons and coordinates) and
unknown fields, over generated streams of creates, snapshot reads, updates, deletes,
tombstones, truncates, schema-wrapped events, new fields and poison values, and it takes
most records itself."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow as pa
import pytest

from calving.commit.spec.schema import Schema
from calving.commit.spec.types import (
    BOOLEAN,
    DATE,
    DOUBLE,
    INT,
    LONG,
    STRING,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    ListType,
    NestedField,
)
from calving.ingest.decode.debezium import DebeziumDecoder, DebeziumOptions
from tests.ingest.decode import assert_partitioned, kafka_batch

TABLE = Schema(
    (
        NestedField(1, "tenant", STRING, required=True),
        NestedField(2, "id", LONG, required=True),
        NestedField(3, "qty", INT),
        NestedField(4, "ratio", DOUBLE),
        NestedField(5, "ok", BOOLEAN),
        NestedField(6, "day", DATE),
        NestedField(7, "at", TIMESTAMP),
        NestedField(8, "seen", TIMESTAMPTZ),
        NestedField(9, "t", TIME),
        NestedField(10, "note", STRING),
        NestedField(11, "tags", ListType(12, STRING)),
    ),
    identifier_field_ids=(1, 2),
)


def _row(rng: random.Random, k: int, ints: bool) -> dict[str, Any]:
    row: dict[str, Any] = {"tenant": f"t{k % 3}", "id": k}
    row["qty"] = rng.choice([None, rng.randint(-(2**31), 2**31 - 1), 7])
    row["ratio"] = rng.choice([None, rng.random() * 1e6, 0, -1.5])
    row["ok"] = rng.choice([None, True, False])
    # Temporal values as ISO strings (epoch integers send a chunk the per-event way; the
    # ``ints`` streams check that too); "2023-02-30" is a poison value.
    row["day"] = rng.choice([None, "2024-02-29", "2023-02-30", "0001-01-01"])
    row["at"] = rng.choice([None, "2024-01-02T03:04:05.123456", "2024-01-02 03:04:05"])
    row["seen"] = rng.choice([None, "2024-01-02T03:04:05Z", "2024-01-02 03:04:05+02:00"])
    row["t"] = rng.choice([None, "12:34:56.789", "23:59:59"])
    if ints:  # Debezium's default: epoch integers, zoned timestamps stay strings
        row["at"] = rng.choice([None, 1_700_000_000_123, 5, 1_700_000_000_123_456])
        row["day"] = rng.choice([None, 19000, -1])
        row["t"] = rng.choice([None, 5, 86_399_000_000, 86_400_000_000])  # the last: poison
    row["note"] = rng.choice([None, "", "héllo ☃", "x" * 50, "tab\\there"])
    row["tags"] = rng.choice([None, [], ["a", "b"], ["ü"]])
    return row


def _stream(
    seed: int, n: int, odd: float, ints: bool
) -> tuple[list[bytes | None], list[bytes | None]]:
    """Change events; ``odd``: the share of events that are not plain c/r/u upserts."""
    rng = random.Random(seed)
    values: list[bytes | None] = []
    keys: list[bytes | None] = []
    for _ in range(n):
        k = rng.randrange(200)
        key = json.dumps({"tenant": f"t{k % 3}", "id": k}).encode()
        kind = rng.random()
        after = _row(rng, k, ints)
        if kind >= odd:
            kind = 0.0
        else:
            kind = 0.55 + kind / odd * 0.45
        if kind < 0.55:
            event = {"op": rng.choice("cru"), "before": None, "after": after, "source": {"lsn": k}}
        elif kind < 0.65:
            event = {"op": "d", "before": {"tenant": f"t{k % 3}", "id": k}, "after": None}
        elif kind < 0.70:
            values.append(None)  # tombstone
            keys.append(key)
            continue
        elif kind < 0.75:
            event = {"schema": {"type": "struct"}, "payload": {"op": "c", "after": after}}
        elif kind < 0.80:
            event = {"op": "c", "after": {**after, "brand_new": rng.randint(0, 9)}}
        elif kind < 0.85:
            event = {"op": rng.choice(["t", "m", "x"]), "after": after}
        elif kind < 0.90:
            event = {"op": "c", "after": {**after, "id": "not-a-number"}}
        else:
            values.append(rng.choice([b"{not json", b"[1, 2]", b'"s"', b'{"op": "c"}']))
            keys.append(key)
            continue
        values.append(json.dumps(event).encode())
        keys.append(key)
    return values, keys


def _same(a: pa.Table, b: pa.Table) -> None:
    assert a.schema == b.schema
    assert a.to_pylist() == b.to_pylist()


@pytest.mark.parametrize(
    ("seed", "odd", "ints"), [(1, 0.1, False), (2, 0.1, False), (3, 0.45, False), (4, 0.1, True)]
)
def test_vectorized_equals_per_event(seed, odd, ints):
    values, keys = _stream(seed, 3000, odd, ints)
    batch = kafka_batch(values, keys)
    fast = DebeziumDecoder(TABLE)
    slow = DebeziumDecoder(TABLE, DebeziumOptions(vectorized=False))
    got, want = fast.decode(batch), slow.decode(batch)
    assert_partitioned(batch, got)
    _same(got.rows, want.rows)
    _same(got.dead_letters, want.dead_letters)
    assert got.unknown_fields == want.unknown_fields
    assert fast.vector is not None and slow.vector is None
    if odd <= 0.1:  # Arrow reads most plain events, epoch integers or ISO strings
        assert fast.vector.decoded >= 0.4 * len(values)


def test_a_clean_stream_is_read_entirely_by_arrow():
    rng = random.Random(9)
    values = [
        json.dumps(
            {"op": "c", "after": {"tenant": "a", "id": i, "note": rng.choice(["x", None])}}
        ).encode()
        for i in range(500)
    ]
    values += [
        json.dumps({"op": "d", "before": {"tenant": "a", "id": i, "note": "x"}}).encode()
        for i in range(100)
    ]
    decoder = DebeziumDecoder(TABLE)
    out = decoder.decode(kafka_batch(values))
    assert out.rows.num_rows == 600 and out.dead_letters.num_rows == 0
    assert decoder.vector is not None and decoder.vector.decoded == 600
    assert out.rows.column("_op").to_pylist() == [0] * 500 + [1] * 100
    deleted = out.rows.slice(500).to_pylist()
    assert deleted[7]["id"] == 7 and deleted[7]["note"] is None  # keys only


def test_one_poison_value_does_not_send_the_chunk_the_slow_way():
    values = [
        json.dumps({"op": "u", "after": {"tenant": "a", "id": i}}).encode() for i in range(400)
    ]
    values[200] = json.dumps({"op": "u", "after": {"tenant": "a", "id": [1]}}).encode()
    decoder = DebeziumDecoder(TABLE)
    out = decoder.decode(kafka_batch(values))
    assert out.rows.num_rows == 399 and out.dead_letters.num_rows == 1
    assert decoder.vector is not None and decoder.vector.decoded >= 380


def test_a_realistic_stream_is_mostly_read_by_arrow():
    """1 event in 200 odd (a new field, a poison value): Arrow still reads most events."""
    rng = random.Random(4)
    values = []
    for i in range(4000):
        after = {"tenant": "a", "id": i, "qty": i % 100, "note": "n"}
        if rng.random() < 0.005:
            after["brand_new"] = 1
        values.append(json.dumps({"op": "u", "after": after}).encode())
    decoder = DebeziumDecoder(TABLE)
    got = decoder.decode(kafka_batch(values))
    want = DebeziumDecoder(TABLE, DebeziumOptions(vectorized=False)).decode(kafka_batch(values))
    _same(got.rows, want.rows)
    assert got.unknown_fields == want.unknown_fields == {"brand_new": frozenset({"long"})}
    assert decoder.vector is not None and decoder.vector.decoded >= 0.9 * len(values)


def test_decimal_tables_and_avro_use_the_per_event_path():
    from calving.commit.spec.types import decimal

    with_decimal = Schema(
        (NestedField(1, "id", LONG, required=True), NestedField(2, "price", decimal(6, 2))),
        identifier_field_ids=(1,),
    )
    assert DebeziumDecoder(with_decimal).vector is None
    assert DebeziumDecoder(TABLE, DebeziumOptions(case_insensitive=True)).vector is None


def test_a_small_batch_decodes_per_event():
    """Below ``MIN_VECTOR_ROWS`` records the bulk path's fixed cost is not worth it."""
    from calving.ingest.decode.debezium import MIN_VECTOR_ROWS

    values = [
        json.dumps({"op": "c", "after": {"tenant": "a", "id": i}}).encode()
        for i in range(MIN_VECTOR_ROWS)
    ]
    decoder = DebeziumDecoder(TABLE)
    assert decoder.vector is not None
    small = decoder.decode(kafka_batch(values[:-1]))
    assert decoder.vector.decoded == 0 and small.rows.num_rows == MIN_VECTOR_ROWS - 1
    decoder.decode(kafka_batch(values))
    assert decoder.vector.decoded == MIN_VECTOR_ROWS
