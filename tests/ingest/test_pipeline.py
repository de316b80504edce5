"""A pipeline built from config (``calving.ingest.pipeline``): Confluent Avro with local schema
files, poison records of every kind sent to a dead-letter table and a dead-letter topic at
once, and the table read back by the oracles."""

from __future__ import annotations

import io
import json
import struct

import fastavro
import pytest

from calving.ingest.config.loader import parse_config
from calving.ingest.kafka.producer import produce
from calving.ingest.pipeline import build_pipeline
from tests.support.oracles import duckdb_rows, pyiceberg_rows

pytestmark = pytest.mark.integration

ORDER = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "customer", "type": "string"},
    {"name": "amount", "type": "double"}]}  # fmt: skip
# Registered, valid Avro, but ``customer`` is a long where the table has a string column.
MISFIT = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "customer", "type": "long"},
    {"name": "amount", "type": "double"}]}  # fmt: skip


def _wire(schema_id: int, schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    out.write(b"\x00" + struct.pack(">I", schema_id))
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def _good(i: int) -> dict:
    return {"id": i, "customer": f"c{i % 13}", "amount": i / 4}


POISON = {
    3: b"\x00" + struct.pack(">I", 999) + b"\x02\x04",  # unknown schema id
    10: b"\x07not-confluent",  # wrong magic byte
    17: _wire(7, ORDER, _good(17))[:7],  # truncated body
    24: _wire(8, MISFIT, {"id": 24, "customer": 5, "amount": 1.0}),  # does not fit the table
    31: b"",  # empty value
}


def test_avro_with_dead_letters_to_a_table_and_a_topic(spark, broker, make_topic, tmp_path):
    topic, dead_topic = make_topic(partitions=2), make_topic(partitions=1, prefix="dlq")
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "7.avsc").write_text(json.dumps(ORDER))
    (schemas / "8.avsc").write_text(json.dumps(MISFIT))
    n = 300
    records = [
        (i % 2, None, POISON[i] if i in POISON else _wire(7, ORDER, _good(i)), None)
        for i in range(n)
    ]
    ends = produce(broker.bootstrap_servers, topic, records)
    config = parse_config(
        {
            "source": {
                "bootstrap_servers": broker.bootstrap_servers,
                "topics": [topic],
                "max_offsets_per_trigger": 120,
            },
            "format": {"type": "avro", "schema_dir": str(schemas)},
            "table": {
                "catalog": f"sqlite:///{tmp_path}/catalog.db",
                "warehouse": str(tmp_path / "warehouse"),
                "name": "shop.orders",
                "columns": [
                    {"name": "id", "type": "long"},
                    {"name": "customer", "type": "string"},
                    {"name": "amount", "type": "double"},
                ],
            },
            "sink": {
                "writer_id": "avro-orders",
                "checkpoint": str(tmp_path / "ckpt"),
                "dead_letter_table": "orders_dead_letters",
                "dead_letter_topic": dead_topic,
            },
        },
        "test",
    )
    pipeline = build_pipeline(config, spark)
    pipeline.run(available_now=True, timeout=300)

    table = pipeline.table.refresh()
    expected = sorted((i, f"c{i % 13}", i / 4) for i in range(n) if i not in POISON)
    cols = ["id", "customer", "amount"]
    assert pyiceberg_rows(table.metadata_location, cols) == expected
    assert duckdb_rows(table.metadata_location, cols) == expected
    assert table.ledger("avro-orders") == {(topic, p): e for p, e in ends.items()}

    dlq = pipeline.sink.coordinator.dead_letter_table.refresh()
    dead = pyiceberg_rows(dlq.metadata_location, ["partition", "offset", "error_type", "value"])
    # Record i went to partition i % 2 at offset i // 2; raw bytes are kept.
    assert [(d[0], d[1], d[3]) for d in dead] == sorted(
        (i % 2, i // 2, v) for i, v in POISON.items()
    )
    assert all(d[2] for d in dead)
    assert len(expected) + len(dead) == n

    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "dlq-check",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([dead_topic])
    sent = []
    for _ in range(60):
        for message in consumer.consume(50, timeout=0.5):
            if message.error() is None:
                headers = dict(message.headers() or [])
                sent.append((int(headers["calving.partition"]), int(headers["calving.offset"]),
                             message.value() or b""))  # fmt: skip
        # Distinct ones: a consumer-group rebalance may deliver a message twice.
        if len(set(sent)) >= len(POISON):
            break
    consumer.close()
    # At least once to the topic: every dead letter arrives, with its coordinates.
    assert set(sent) == {(i % 2, i // 2, v) for i, v in POISON.items()}
