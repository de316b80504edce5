"""Recorded record vectors (tests/vectors/records) decode to the recorded outcomes."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pytest

from calving.commit.spec.schema import Schema
from calving.ingest.decode.avro_confluent import ConfluentAvroDecoder
from calving.ingest.decode.debezium import DebeziumDecoder, DebeziumOptions
from calving.ingest.decode.json_values import JsonValueDecoder
from calving.ingest.decode.schema_registry import LocalSchemaDirectory
from tests.ingest.decode import assert_partitioned, kafka_batch

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "records"
SCHEMAS = LocalSchemaDirectory(VECTORS / "schemas")


def _decoder(name: str, schema: Schema):
    if name == "json_events.json":
        return JsonValueDecoder(schema)
    if name == "confluent_avro_events.json":
        return ConfluentAvroDecoder(schema, SCHEMAS)
    if name == "debezium_avro.json":
        return DebeziumDecoder(
            schema, DebeziumOptions(value_format="avro", key_format="avro"), SCHEMAS
        )
    return DebeziumDecoder(schema)


def _plain(value):
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@pytest.mark.parametrize("name", sorted(p.name for p in VECTORS.glob("*.json")))
def test_vector(name):
    doc = json.loads((VECTORS / name).read_text())
    schema = Schema.from_json(doc["table_schema"])

    def raw(b):
        return None if b is None else base64.b64decode(b)

    batch = kafka_batch(
        [raw(r["value"]) for r in doc["records"]], [raw(r["key"]) for r in doc["records"]]
    )
    out = _decoder(name, schema).decode(batch)
    assert_partitioned(batch, out)
    rows = {r.pop("_offset"): r for r in out.rows.to_pylist()}
    dead = dict(
        zip(
            out.dead_letters.column("offset").to_pylist(),
            out.dead_letters.column("error_type").to_pylist(),
        )
    )
    for offset, want in enumerate(doc["expected"], start=100):
        if "dead" in want:
            assert dead.get(offset) == want["dead"], (offset, rows.get(offset))
            continue
        got = rows[offset]
        assert got.pop("_op") == want["op"]
        got.pop("_partition"), got.pop("_topic")
        assert _plain(got) == want["row"], offset


@pytest.mark.parametrize("name", sorted(p.name for p in VECTORS.glob("*.json")))
def test_decoders_survive_pickling(name):
    """Decoders travel to Spark executors by pickle."""
    import pickle

    doc = json.loads((VECTORS / name).read_text())
    decoder = pickle.loads(pickle.dumps(_decoder(name, Schema.from_json(doc["table_schema"]))))
    batch = kafka_batch(
        [base64.b64decode(r["value"]) if r["value"] else None for r in doc["records"]]
    )
    out = decoder.decode(batch)
    assert out.rows.num_rows + out.dead_letters.num_rows == len(doc["records"])


@pytest.mark.parametrize(
    "name",
    sorted(p.name for p in VECTORS.glob("debezium*.json") if "avro" not in p.name),
)
def test_a_worker_unpickles_one_debezium_decoder_per_plan_and_reuses_it(name):
    """A Python worker gets the same plan batch after batch: unpickling the same JSON
    decoder again gives the decoder it built the first time (its converters and the
    schemas it learnt kept), one with other options a decoder of its own, and a reused
    decoder decodes a batch as a fresh one does."""
    import dataclasses
    import pickle

    doc = json.loads((VECTORS / name).read_text())
    fresh = _decoder(name, Schema.from_json(doc["table_schema"]))
    blob = pickle.dumps(fresh)
    first, again = pickle.loads(blob), pickle.loads(blob)
    assert first is again and first is not fresh
    other = dataclasses.replace(fresh.options, naive_timestamps_as_utc=True)
    assert pickle.loads(pickle.dumps(type(fresh)(fresh.converter.schema, other))) is not first
    batch = kafka_batch(
        [base64.b64decode(r["value"]) if r["value"] else None for r in doc["records"]]
    )
    once, twice = first.decode(batch), again.decode(batch)
    want = fresh.decode(batch)
    for got in (once, twice):
        assert got.rows.equals(want.rows) and got.dead_letters.equals(want.dead_letters)
