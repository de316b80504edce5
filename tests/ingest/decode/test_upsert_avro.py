"""``upsert-avro``: Confluent Avro values keyed by the Kafka key (an Avro record, an Avro
primitive, or JSON with ``key_format = "json"``); tombstones delete; wire-format and
key/value disagreements are dead letters naming the record; and a pipeline streams such
a topic into a keyed table that the three readers read back exactly."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from calving.commit.spec.schema import Schema
from calving.commit.spec.types import LONG, STRING, TIMESTAMP_NS, NestedField
from calving.ingest.config.loader import parse_config
from calving.ingest.decode.upsert import KeyUpsertDecoder
from calving.ingest.kafka.producer import produce
from calving.ingest.pipeline import build_pipeline
from tests.ingest.decode import assert_partitioned, data_rows, kafka_batch
from tests.ingest.decode.test_avro_confluent import DictSource, wire
from tests.support.oracles import ALL_READERS

SCHEMA = Schema(
    (
        NestedField(1, "id", LONG, True),
        NestedField(2, "name", STRING),
        NestedField(3, "at", TIMESTAMP_NS),
    ),
    identifier_field_ids=(1,),
)
VALUE = {"type": "record", "name": "Row", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]},
    {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-nanos"}]}]}  # fmt: skip
VALUE_NO_ID = {"type": "record", "name": "Row2", "fields": [{"name": "name", "type": "string"}]}
KEY = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]}
SOURCE = {1: VALUE, 2: KEY, 3: '"long"', 4: VALUE_NO_ID}  # a bare primitive: JSON text


def test_avro_keys_and_values_upsert_and_delete() -> None:
    values = [
        wire(1, VALUE, {"id": 1, "name": "a", "at": 1_000_000_001}),
        wire(4, VALUE_NO_ID, {"name": "b"}),  # the id comes from the key
        None,  # a tombstone
        wire(1, VALUE, {"id": 5, "name": "x", "at": None}),  # key says 4
        b"\x01garbage",
    ]
    keys = [wire(2, KEY, {"id": 1}), wire(3, "long", 2), wire(2, KEY, {"id": 3}),
            wire(2, KEY, {"id": 4}), wire(2, KEY, {"id": 9})]  # fmt: skip
    batch = kafka_batch(values, keys)
    decoder = KeyUpsertDecoder(SCHEMA, None, "avro", "avro", DictSource(SOURCE))
    out = decoder.decode(batch)
    assert_partitioned(batch, out)
    rows = [
        (r["id"], r["name"], None if r["at"] is None else r["at"].value) for r in data_rows(out)
    ]
    assert rows == [(1, "a", 1_000_000_001), (2, "b", None), (3, None, None)]
    assert out.rows.column("_op").to_pylist() == [0, 0, 1]
    errors = out.dead_letters.column("error").to_pylist()
    assert "is 4 in the Kafka key but 5 in the value" in errors[0]
    assert "starts with byte 1, not magic byte 0" in errors[1]


def test_json_keys_with_avro_values() -> None:
    values = [wire(1, VALUE, {"id": 7, "name": "j", "at": None})]
    decoder = KeyUpsertDecoder(SCHEMA, None, "avro", "json", DictSource(SOURCE))
    out = decoder.decode(kafka_batch(values, [b'{"id": 7}']))
    assert [r["name"] for r in data_rows(out)] == ["j"]


@pytest.mark.integration
@pytest.mark.slow
def test_an_upsert_avro_topic_streams_into_a_keyed_table(
    spark: Any, broker: Any, make_topic: Any, tmp_path: Path
) -> None:
    import json

    schemas = tmp_path / "schemas"
    schemas.mkdir()
    for sid, schema in SOURCE.items():
        (schemas / f"{sid}.avsc").write_text(
            schema if isinstance(schema, str) else json.dumps(schema)
        )
    topic = make_topic(partitions=2)
    rng = random.Random(3)
    final: dict[int, tuple[int, str, int | None]] = {}
    records = []
    for n in range(400):
        k = rng.randrange(60)
        key = wire(2, KEY, {"id": k})
        if k in final and rng.random() < 0.2:
            del final[k]
            records.append((k % 2, key, None, None))
            continue
        row = {"id": k, "name": f"v{n}", "at": n * 1_000 + 1}
        final[k] = (k, row["name"], row["at"])
        records.append((k % 2, key, wire(1, VALUE, row), None))
    produce(broker.bootstrap_servers, topic, records)
    config = parse_config(
        {
            "source": {"bootstrap_servers": broker.bootstrap_servers, "topics": [topic]},
            "format": {"type": "upsert-avro", "schema_dir": str(schemas)},
            "table": {
                "catalog": f"sqlite:///{tmp_path}/catalog.db",
                "warehouse": str(tmp_path / "warehouse"),
                "name": "shop.upserts",
                "identifier_fields": ["id"],
                "columns": [
                    {"name": "id", "type": "long"},
                    {"name": "name", "type": "string"},
                    {"name": "at", "type": "timestamp_ns"},
                ],
            },
            "sink": {"writer_id": "upserts", "checkpoint": str(tmp_path / "ckpt")},
        },
        "test",
    )
    pipeline = build_pipeline(config, spark)
    pipeline.run(available_now=True, timeout=300)
    location = pipeline.table.refresh().metadata_location
    want = sorted(final.values())
    for name, reader in ALL_READERS.items():
        rows = reader(location, ["id", "name", "at"])
        assert [(i, n, a.value) for i, n, a in rows] == want, name
