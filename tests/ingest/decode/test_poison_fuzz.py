"""Byte-level fuzz of the decoders: valid records mutated (bytes flipped, inserted or
cut, strings made invalid UTF-8 or lone surrogates, numbers made non-finite) and mixed
into valid batches, through the vectorized and the per-record path of the ``json``,
``debezium-json`` and Confluent ``avro`` decoders.

For every batch and every path: decoding never raises, rows + dead letters = records
(each offset exactly once), every unmutated record is a row, the rows are valid Arrow
(UTF-8 checked) that the Parquet writer and its footer metrics accept, JSON rows hold
no NaN or infinity, and the two paths give the same rows and the same dead letters.
Bounded (a few dozen examples per decoder) to stay well under a minute.
"""

from __future__ import annotations

import json
import math
import tempfile
import uuid
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calving.commit.io import FileIO
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import (
    DOUBLE,
    INT,
    LONG,
    STRING,
    ListType,
    NestedField,
    StructType,
)
from calving.ingest.decode.avro_confluent import AvroOptions, ConfluentAvroDecoder
from calving.ingest.decode.batch import META_COLUMNS, DecodedBatch
from calving.ingest.decode.debezium import DebeziumDecoder, DebeziumOptions
from calving.ingest.decode.json_values import JsonOptions, JsonValueDecoder
from calving.ingest.write.parquet_writer import write_data_file
from tests.ingest.decode import assert_partitioned, kafka_batch
from tests.ingest.decode.test_avro_confluent import DictSource, wire

SCHEMA = Schema(
    (
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "name", STRING),
        NestedField(3, "score", DOUBLE),
        NestedField(4, "n", INT),
        NestedField(5, "tags", ListType(7, STRING)),
        NestedField(
            6, "addr", StructType((NestedField(8, "city", STRING), NestedField(9, "zip", INT)))
        ),
    ),
    identifier_field_ids=(1,),
)
FLAT = Schema(
    (
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "name", STRING),
        NestedField(3, "score", DOUBLE),
    ),
    identifier_field_ids=(1,),
)
AVRO = {
    "type": "record",
    "name": "Row",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"]},
        {"name": "score", "type": ["null", "double"]},
    ],
}
MARK = "ZZZZ"  # every valid record's name holds it: the place invalid text goes
BAD_TEXT = [
    b"\xff\xfe\xfd\xfc",  # invalid start bytes
    b"\xed\xa0\x80Z",  # an encoded surrogate (not UTF-8)
    b"\xc0\xafZZ",  # an overlong encoding
    b"Z\xe2\x82Z",  # a truncated sequence
]
NON_FINITE = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"1E+999"]
_DIR = tempfile.mkdtemp(prefix="calving-fuzz-")

texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=5)
records = st.fixed_dictionaries(
    {
        "id": st.integers(-(2**63), 2**63 - 1),
        "name": texts.map(lambda t: t + MARK),
        "score": st.none() | st.floats(allow_nan=False, allow_infinity=False),
        "n": st.none() | st.integers(-(2**31), 2**31 - 1),
        "tags": st.none() | st.lists(st.none() | texts, max_size=3),
        "addr": st.none()
        | st.fixed_dictionaries({"city": st.none() | texts, "zip": st.integers(0, 99999)}),
    }
)
mutations = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.binary(min_size=1, max_size=3)),
    st.tuples(st.just("cut"), st.integers(0, 10_000), st.just(0)),
    st.tuples(st.just("text"), st.sampled_from(BAD_TEXT), st.just(0)),
    st.tuples(st.just("surrogate"), st.just(0), st.just(0)),
    st.tuples(
        st.just("number"), st.sampled_from(["score", "id", "n"]), st.sampled_from(NON_FINITE)
    ),
)
#: A batch: records, each with a mutation or None (more good than bad, and enough
#: records that the vectorized readers take chunks rather than leave them per record).
batches = st.lists(
    st.tuples(records, st.none() | mutations).map(lambda t: t if t[1] else (t[0], None)),
    min_size=12,
    max_size=40,
)


def mutate(raw: bytes, mutation: tuple[str, Any, Any], *, json_text: bool) -> bytes:
    kind, a, b = mutation
    if kind == "flip":
        pos = a % len(raw)
        return raw[:pos] + bytes([b]) + raw[pos + 1 :]
    if kind == "insert":
        pos = a % (len(raw) + 1)
        return raw[:pos] + b + raw[pos:]
    if kind == "cut":
        return raw[: a % len(raw)]
    if kind == "text":
        return raw.replace(MARK.encode(), a, 1)
    if kind == "surrogate":
        return raw.replace(MARK.encode(), b"\\ud800ZZ" if json_text else b"\xed\xb0\x80Z", 1)
    field = f'"{a}": '.encode()
    start = raw.find(field)
    if start < 0 or not json_text:
        return raw[:-1] if kind == "number" and not json_text else raw
    start += len(field)
    end = start
    while end < len(raw) and raw[end : end + 1] not in (b",", b"}"):
        end += 1
    return raw[:start] + b + raw[end:]


def check(batch: pa.Table, fast: DecodedBatch, slow: DecodedBatch, good: set[int], schema):
    for out in (fast, slow):
        assert_partitioned(batch, out)
        assert good <= set(out.rows.column("_offset").to_pylist())
        out.rows.validate(full=True)  # strings are valid UTF-8
        data = out.rows.drop_columns(list(META_COLUMNS))
        if "score" in data.column_names:
            scores = [v for v in data.column("score").to_pylist() if v is not None]
            assert all(math.isfinite(v) for v in scores)
        if data.num_rows:  # the Parquet writer and its footer metrics take them
            location = f"{_DIR}/{uuid.uuid4().hex}.parquet"
            write_data_file(FileIO({}), location, data, schema)
    assert fast.rows.equals(slow.rows), (fast.rows.to_pylist()[:3], slow.rows.to_pylist()[:3])
    columns = ["offset", "error_type", "error"]
    assert fast.dead_letters.select(columns).equals(slow.dead_letters.select(columns)), (
        fast.dead_letters.select(columns).to_pylist(),
        slow.dead_letters.select(columns).to_pylist(),
    )


FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(batches)
def test_json_values_never_fail_a_batch_and_both_paths_agree(items):
    values, good = [], set()
    for i, (rec, mutation) in enumerate(items):
        raw = json.dumps(rec).encode()
        if mutation is None:
            good.add(100 + i)
        else:
            raw = mutate(raw, mutation, json_text=True)
        values.append(raw)
    batch = kafka_batch(values)
    fast = JsonValueDecoder(SCHEMA, JsonOptions(vectorized=True)).decode(batch)
    slow = JsonValueDecoder(SCHEMA, JsonOptions(vectorized=False)).decode(batch)
    check(batch, fast, slow, good, SCHEMA)


@FUZZ
@given(batches, st.lists(st.sampled_from("crud"), min_size=40, max_size=40))
def test_debezium_json_never_fails_a_batch_and_both_paths_agree(items, ops):
    values, keys, good = [], [], set()
    for i, ((rec, mutation), op) in enumerate(zip(items, ops)):
        key = json.dumps({"id": rec["id"]}).encode()
        before = {"id": rec["id"]} if op == "d" else None
        after = None if op == "d" else rec
        event = {"before": before, "after": after, "op": op, "source": {"ts_ms": 1, "lsn": 5}}
        raw = json.dumps(event).encode()
        if mutation is None:
            good.add(100 + i)
        else:
            raw = mutate(raw, mutation, json_text=True)
        values.append(raw)
        keys.append(key)
    batch = kafka_batch(values, keys)
    fast = DebeziumDecoder(SCHEMA, DebeziumOptions(vectorized=True)).decode(batch)
    slow = DebeziumDecoder(SCHEMA, DebeziumOptions(vectorized=False)).decode(batch)
    check(batch, fast, slow, good, SCHEMA)


@FUZZ
@given(batches)
def test_avro_never_fails_a_batch_and_both_paths_agree(items):
    values, good = [], set()
    for i, (rec, mutation) in enumerate(items):
        raw = wire(1, AVRO, {"id": rec["id"], "name": rec["name"], "score": rec["score"]})
        if mutation is None:
            good.add(100 + i)
        else:
            raw = mutate(raw, mutation, json_text=False)
        values.append(raw)
    batch = kafka_batch(values)
    source = DictSource({1: AVRO})
    fast = ConfluentAvroDecoder(FLAT, source, AvroOptions(vectorized=True)).decode(batch)
    slow = ConfluentAvroDecoder(FLAT, source, AvroOptions(vectorized=False)).decode(batch)
    check(batch, fast, slow, good, FLAT)


def test_invalid_utf8_in_a_vectorized_json_batch_is_a_dead_letter_naming_its_offset():
    """The issue's reproduction: ten good records and one with invalid UTF-8 in a string.
    Before the fix the vectorized path made it a row the Parquet footer then refused."""
    values = [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(10)]
    values.append(b'{"id": 100, "name": "\xff\xfe"}')
    batch = kafka_batch(values, topic="events", first_offset=0)
    for decoder in (
        JsonValueDecoder(FLAT, JsonOptions(vectorized=True)),
        DebeziumDecoder(FLAT, DebeziumOptions(vectorized=True)),
    ):
        if isinstance(decoder, DebeziumDecoder):
            batch = kafka_batch(
                [
                    b'{"before": null, "op": "c", "after": ' + v + b"}"
                    for v in [*values[:10], values[10]]
                ],
                [b'{"id": 1}'] * 11,
                topic="events",
                first_offset=0,
            )
        out = decoder.decode(batch)
        assert out.rows.num_rows == 10
        out.rows.validate(full=True)
        dead = out.dead_letters.to_pylist()
        assert [(d["topic"], d["partition"], d["offset"]) for d in dead] == [("events", 0, 10)]
        assert dead[0]["error_type"] == "MalformedRecordError"
        assert "events/0@10" in dead[0]["error"] and "UTF-8" in dead[0]["error"]


def test_non_finite_json_numbers_are_dead_letters_for_every_column_type():
    """One rule (docs/formats.md): NaN, Infinity and numbers beyond the double range are
    dead letters whether the column is a double, a long or absent; 1e-400 reads as 0."""
    bodies = [f'{{"id": {i}, "score": 1.5}}' for i in range(10)] + [
        '{"id": 20, "score": NaN}',
        '{"id": 21, "score": Infinity}',
        '{"id": 22, "score": 1e400}',
        '{"id": 1e400}',
        '{"id": 24, "other": -Infinity}',
        '{"id": 25, "score": 1e-400}',
    ]
    batch = kafka_batch([b.encode() for b in bodies], first_offset=0)
    for vectorized in (True, False):
        out = JsonValueDecoder(FLAT, JsonOptions(vectorized=vectorized)).decode(batch)
        assert out.dead_letters.column("offset").to_pylist() == [10, 11, 12, 13, 14]
        assert set(out.dead_letters.column("error_type").to_pylist()) == {"MalformedRecordError"}
        rows = out.rows.to_pylist()
        assert [r["score"] for r in rows][-1] == 0.0 and len(rows) == 11


def test_a_json_error_message_says_at_once():
    out = JsonValueDecoder(FLAT).decode(kafka_batch([b'{"id": 1, "name": "abc'], first_offset=0))
    error = out.dead_letters.column("error").to_pylist()[0]
    assert "at at" not in error
    assert "Unterminated string starting at line 1 column" in error
