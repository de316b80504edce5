"""The embedded Tansu broker and the bulk producer."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from calving.ingest.kafka.broker import BrokerStartError, EmbeddedBroker
from calving.ingest.kafka.producer import Record, produce

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its /proc state says it is dead.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"


def test_broker_starts_and_stops_without_leaving_a_process(tmp_path) -> None:
    log = tmp_path / "tansu.log"
    with EmbeddedBroker(log_path=log) as broker:
        pid = broker.pid
        assert pid is not None and _alive(pid)
        host, port = broker.bootstrap_servers.split(":")
        assert host == "127.0.0.1" and int(port) > 0
        broker.create_topic("lifecycle", 3)
    assert not broker.is_running()
    assert not os.path.exists(f"/proc/{pid}") or not _alive(pid)
    assert "listening on" in log.read_text()
    broker.stop()  # idempotent


def test_bootstrap_servers_needs_a_started_broker() -> None:
    with pytest.raises(BrokerStartError, match="not been started"):
        _ = EmbeddedBroker().bootstrap_servers


def test_a_broker_that_cannot_start_fails_clearly(tmp_path) -> None:
    broken = EmbeddedBroker(binary="/bin/false", log_path=tmp_path / "b.log", startup_timeout=5)
    with pytest.raises(BrokerStartError, match="exited with code 1 during startup; see"):
        broken.start()
    assert not broken.is_running()


def test_produce_round_trip_and_watermarks_cover_every_record(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = make_topic(partitions=3)
    records: list[Record] = [
        (i % 3, f"k{i}".encode(), f"v{i}".encode() if i % 7 else None, [("n", str(i).encode())])
        for i in range(3_000)
    ]
    ends = produce(broker.bootstrap_servers, topic, records)
    assert ends == {0: 1_000, 1: 1_000, 2: 1_000}

    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "rt"})
    try:
        for partition in range(3):
            # Tansu's quirk would leave the watermark at the last batch's base offset + 1;
            # the producer's single-record tail batch makes it cover everything.
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)
            assert (low, high) == (0, 1_000)
        consumer.assign([TopicPartition(topic, 1, 0)])
        seen: list[tuple] = []
        deadline = time.monotonic() + 30
        while len(seen) < 1_000 and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=1):
                assert message.error() is None
                seen.append((message.offset(), message.key(), message.value(), message.headers()))
    finally:
        consumer.close()
    expected = [
        (n, key, value, headers)
        for n, (_, key, value, headers) in enumerate(r for r in records if r[0] == 1)
    ]
    assert seen == expected


def test_pause_freezes_the_broker_until_resume(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    topic = make_topic()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    broker.pause()
    try:
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=1.0)
    finally:
        broker.resume()
    assert topic in admin.list_topics(timeout=10).topics
