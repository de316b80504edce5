"""Dead-letter rules on the embedded broker: a record too large for the dead-letter
topic does not stop the stream (the table keeps it whole, the topic gets a truncated
copy flagged as such), a batch that evolves the schema sends its dead letters once,
and a dead letter's unknown fields never become columns."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from calving.commit.table.table import create_table
from calving.ingest.kafka.producer import produce
from calving.ingest.sink.dead_letters import DEAD_LETTER_TABLE_SCHEMA
from tests.ingest.sink.test_append_stream import SCHEMA, _sink
from tests.support.oracles import pyiceberg_rows
from tests.support.streams import drain

pytestmark = pytest.mark.integration


def _topic_messages(bootstrap: str, topic: str, timeout: float = 60) -> list[Any]:
    """Every message on partition 0 of ``topic`` (read by assignment, no group: no
    rebalance can deliver one twice), up to its high watermark."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "fetch.message.max.bytes": 5_000_000,
        }
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: dict[int, Any] = {}
        deadline = time.monotonic() + timeout
        while len(got) < high and time.monotonic() < deadline:
            for m in consumer.consume(100, timeout=0.5):
                if m.error() is None:
                    got[m.offset()] = m
        assert len(got) == high, f"read {len(got)} of {high} messages of {topic}"
        return [got[o] for o in sorted(got)]
    finally:
        consumer.close()


def _coordinates(message: Any) -> tuple[int, int]:
    headers = dict(message.headers() or [])
    return int(headers["calving.partition"]), int(headers["calving.offset"])


def test_a_batch_that_evolves_the_schema_sends_its_dead_letters_once_and_adds_only_live_columns(
    spark, broker, make_topic, sqlite_catalog, tmp_path
):
    """Good records bring a new field ``extra`` (the schema evolves and the batch is
    decoded again); poison records bring ``ghost`` and must neither add it nor reach the
    topic or the table twice."""
    topic, dead_topic = make_topic(partitions=2), make_topic(partitions=1)
    n = 120
    poison = {7: {"id": "seven", "ghost": 1}, 50: {"id": 2**70, "ghost": 2}, 93: {"ghost": 3}}
    records = []
    for i in range(n):
        value = poison.get(i) or {"id": i, "name": f"n{i}", "amount": 1.5, "extra": i}
        records.append((i % 2, str(i).encode(), json.dumps(value).encode(), None))
    produce(broker.bootstrap_servers, topic, records)
    table = create_table(sqlite_catalog, ("db", "evolving"), SCHEMA)
    dlq = create_table(sqlite_catalog, ("db", "evolving_dead"), DEAD_LETTER_TABLE_SCHEMA)
    sink = _sink(
        table,
        dead_letter_table=dlq,
        dead_letter_topic=dead_topic,
        kafka_config={"bootstrap.servers": broker.bootstrap_servers},
    )
    drain(spark, broker.bootstrap_servers, topic, sink, str(tmp_path / "ckpt"))

    table.refresh()
    columns = [f.name for f in table.metadata.schema.fields]
    assert "extra" in columns and "ghost" not in columns
    rows = pyiceberg_rows(table.metadata_location, ["id", "extra"])
    assert rows == [(i, i) for i in range(n) if i not in poison]
    expected = sorted((i % 2, i // 2) for i in poison)
    dead = pyiceberg_rows(dlq.refresh().metadata_location, ["partition", "offset"])
    assert sorted(dead) == expected
    sent = _topic_messages(broker.bootstrap_servers, dead_topic)
    assert sorted(_coordinates(m) for m in sent) == expected  # each exactly once
    assert sum(s.dead_letters for s in sink.coordinator.history) == len(poison)


def _large_poison(n: int, size: int) -> tuple[list, dict[int, bytes]]:
    big = {3: b"{" + b"x" * size, 11: b"[" + b"y" * size}
    records = []
    for i in range(n):
        value = big.get(i) or json.dumps({"id": i, "name": "n", "amount": 1.0}).encode()
        records.append((0, str(i).encode(), value, None))
    return records, big


@pytest.mark.parametrize(
    "limit",
    [
        # The producer refuses the whole record (message.max.bytes): the copy goes out
        # once more without its value.
        {"kafka": {"message.max.bytes": "20000", "batch.size": "20000"}, "sink": {}},
        # calving's own cap cuts the value to fit before sending.
        {"kafka": {}, "sink": {"dead_letter_max_bytes": 30_000}},
    ],
    ids=["producer-limit", "calving-limit"],
)
def test_a_dead_letter_too_large_for_the_topic_goes_truncated_and_whole_to_the_table(
    spark, broker, make_topic, sqlite_catalog, tmp_path, limit
):
    topic, dead_topic = make_topic(partitions=1), make_topic(partitions=1)
    n, size = 20, 200_000
    records, big = _large_poison(n, size)
    produce(broker.bootstrap_servers, topic, records, config={"message.max.bytes": 5_000_000})
    table = create_table(sqlite_catalog, ("db", "big"), SCHEMA)
    dlq = create_table(sqlite_catalog, ("db", "big_dead"), DEAD_LETTER_TABLE_SCHEMA)
    sink = _sink(
        table,
        dead_letter_table=dlq,
        dead_letter_topic=dead_topic,
        kafka_config={"bootstrap.servers": broker.bootstrap_servers, **limit["kafka"]},
        **limit["sink"],
    )
    drain(spark, broker.bootstrap_servers, topic, sink, str(tmp_path / "ckpt"))

    assert table.ledger("w1") == {(topic, 0): n}  # the stream went past them
    good = pyiceberg_rows(table.refresh().metadata_location, ["id"])
    assert good == [(i,) for i in range(n) if i not in big]
    dead = pyiceberg_rows(dlq.refresh().metadata_location, ["offset", "value"])
    assert dead == sorted(big.items())  # the table keeps every byte
    sent = _topic_messages(broker.bootstrap_servers, dead_topic)
    assert sorted(_coordinates(m)[1] for m in sent) == sorted(big)
    cap = int(limit["kafka"].get("message.max.bytes", 0)) or limit["sink"]["dead_letter_max_bytes"]
    for m in sent:
        headers = dict(m.headers())
        original = big[_coordinates(m)[1]]
        assert headers["calving.truncated"] == b"true"
        assert int(headers["calving.value_size"]) == len(original)
        value = m.value() or b""
        assert original.startswith(value) and len(value) < cap
        if not limit["kafka"]:
            assert len(value) > cap // 2  # cut to fit, not dropped
