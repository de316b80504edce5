"""Executor-side reading of one offset range into Arrow, against the embedded broker."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pyarrow as pa
import pytest

from calving.ingest.kafka import range_reader
from calving.ingest.kafka.broker import EmbeddedBroker
from calving.ingest.kafka.offsets import OffsetRange
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.kafka.producer import produce
from calving.ingest.kafka.range_reader import KafkaReadTimeoutError, RangeReader, read_range
from calving.ingest.kafka.source import kafka_arrow_schema

pytestmark = pytest.mark.integration


def options(broker: EmbeddedBroker, **extra: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse(
        {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": "unused", **extra}
    )


def read(opts: KafkaSourceOptions, offset_range: OffsetRange) -> pa.Table:
    schema = kafka_arrow_schema(opts.include_headers)
    batches = list(read_range(opts, offset_range, schema))
    for batch in batches:
        assert batch.schema.equals(schema)
    return pa.Table.from_batches(batches, schema)


def test_reads_exactly_the_range_with_spark_columns(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=2)
    before = dt.datetime.now(dt.timezone.utc)
    produce(
        broker.bootstrap_servers,
        topic,
        [(1, f"k{i}".encode(), None if i == 5 else f"v{i}".encode(), None) for i in range(30_000)],
    )
    table = read(options(broker), OffsetRange(topic, 1, 3, 25_003))
    assert table.num_rows == 25_000
    assert table.column("offset").to_pylist() == list(range(3, 25_003))
    assert table.column("key").to_pylist()[:3] == [b"k3", b"k4", b"k5"]
    assert table.column("value").to_pylist()[2] is None
    assert set(table.column("topic").to_pylist()) == {topic}
    assert set(table.column("partition").to_pylist()) == {1}
    assert set(table.column("timestampType").to_pylist()) == {0}  # CreateTime
    first = table.column("timestamp")[0].as_py()
    assert before - dt.timedelta(seconds=5) <= first <= dt.datetime.now(dt.timezone.utc)


def test_headers_column(broker: EmbeddedBroker, make_topic: Callable[..., str]) -> None:
    topic = make_topic()
    produce(
        broker.bootstrap_servers,
        topic,
        [
            (0, None, b"a", [("trace", b"1"), ("empty", None)]),
            (0, None, b"b", None),
            (0, None, b"c", [("trace", b"3")]),
        ],
    )
    table = read(options(broker, includeHeaders="true"), OffsetRange(topic, 0, 0, 3))
    assert table.column("headers").to_pylist() == [
        [{"key": "trace", "value": b"1"}, {"key": "empty", "value": None}],
        None,
        [{"key": "trace", "value": b"3"}],
    ]


def test_a_range_ending_in_an_offset_gap_terminates(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    """A transaction's commit marker takes an offset no consumer ever sees: the read must
    stop at the end of the range anyway (the partition-end event says it is past it)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = make_topic()
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": topic})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    producer.commit_transaction(10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "gap"})
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), 10)
    consumer.close()
    assert high == 6  # five records and the commit marker

    for isolation in ("read_uncommitted", "read_committed"):
        opts = options(broker, **{"kafka.isolation.level": isolation})
        table = read(opts, OffsetRange(topic, 0, 0, high))
        assert table.column("offset").to_pylist() == [0, 1, 2, 3, 4]


def test_a_frozen_broker_times_out_with_a_typed_error(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic()
    produce(broker.bootstrap_servers, topic, [(0, None, b"x", None)] * 10)
    opts = options(broker, **{"kafkaConsumer.pollTimeoutMs": "1500"})
    broker.pause()
    try:
        with pytest.raises(KafkaReadTimeoutError) as raised:
            read(opts, OffsetRange(topic, 0, 0, 10))
    finally:
        broker.resume()
    assert (raised.value.topic, raised.value.partition, raised.value.offset) == (topic, 0, 0)
    assert "kafkaConsumer.pollTimeoutMs" in str(raised.value)
    # Once the broker answers again the same range reads fine.
    assert read(opts, OffsetRange(topic, 0, 0, 10)).num_rows == 10


def test_an_empty_range_reads_nothing_without_connecting(broker: EmbeddedBroker) -> None:
    assert read(options(broker), OffsetRange("never-created", 0, 7, 7)).num_rows == 0


def test_one_consumer_reads_many_ranges_in_turn(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    """``RangeReader`` (a many-table task's reader): ranges of two topics, both partitions,
    the same partition twice (backwards too), an empty range and a large one, on one
    consumer; each read holds exactly its range, nothing of the range read before."""
    a, b = make_topic(partitions=2), make_topic()
    for partition in (0, 1):
        produce(broker.bootstrap_servers, a,
                [(partition, None, f"a{partition}-{i}".encode(), None) for i in range(12_000)])  # fmt: skip
    produce(broker.bootstrap_servers, b, [(0, None, f"b{i}".encode(), None) for i in range(50)])
    opts = options(broker)
    schema = kafka_arrow_schema(False)
    ranges = [
        OffsetRange(a, 0, 0, 10_000),  # leaves records of a/0 fetched past its end
        OffsetRange(b, 0, 10, 20),
        OffsetRange(a, 1, 5, 7),
        OffsetRange(a, 0, 10_000, 10_003),
        OffsetRange(b, 0, 20, 20),
        OffsetRange(a, 0, 2, 4),
        OffsetRange(b, 0, 0, 50),
    ]
    with RangeReader(opts) as reader:
        for r in ranges:
            table = pa.Table.from_batches(list(reader.read(r, schema)), schema)
            assert table.column("offset").to_pylist() == list(range(r.start, r.end)), r
            assert set(table.column("topic").to_pylist()) <= {r.topic}
            assert set(table.column("partition").to_pylist()) <= {r.partition}
            prefix = "b" if r.topic == b else f"a{r.partition}-"
            want = [f"{prefix}{i}".encode() for i in range(r.start, r.end)]
            assert table.column("value").to_pylist() == want, r


def test_a_topic_created_after_the_first_read_is_read_on_the_same_consumer(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    """The reader fetches every topic's metadata before its first assign (a consumer
    re-assigned to a topic it knew nothing of waited about a second per range); a topic
    created since is asked for on its own."""
    a = make_topic()
    produce(broker.bootstrap_servers, a, [(0, None, f"a{i}".encode(), None) for i in range(5)])
    schema = kafka_arrow_schema(False)
    with RangeReader(options(broker)) as reader:
        first = pa.Table.from_batches(list(reader.read(OffsetRange(a, 0, 0, 5), schema)), schema)
        assert reader._known is not None and a in reader._known
        c = make_topic()
        produce(broker.bootstrap_servers, c, [(0, None, f"c{i}".encode(), None) for i in range(3)])
        later = pa.Table.from_batches(list(reader.read(OffsetRange(c, 0, 0, 3), schema)), schema)
        assert c in reader._known
    assert first.column("value").to_pylist() == [f"a{i}".encode() for i in range(5)]
    assert later.column("value").to_pylist() == [b"c0", b"c1", b"c2"]


@pytest.mark.parametrize("per_assignment", [16, 4])
def test_small_ranges_are_fetched_together_and_read_as_alone(
    broker: EmbeddedBroker,
    make_topic: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
    per_assignment: int,
) -> None:
    """``RangeReader.prefetch`` (a many-table task's quiet tables): small ranges of
    several topics and partitions fetched with one assignment (or, at 4 partitions an
    assignment, four in turn) read exactly as each range read alone: records past a
    range's end left out, a range ending in a transaction marker's gap, a range from the
    middle. A range starting in such a gap is given up, and a big range, a partition
    planned twice and an empty range are left to the per-range reads, which still work
    after the prefetch (partitions it paused are resumed)."""
    from confluent_kafka import Producer

    monkeypatch.setattr(range_reader, "PREFETCH_PARTITIONS", per_assignment)

    topics = [make_topic(partitions=2) for _ in range(6)]
    for n, topic in enumerate(topics):
        for partition in (0, 1):
            produce(broker.bootstrap_servers, topic,
                    [(partition, None, f"{n}/{partition}/{i}".encode(), None) for i in range(8)])  # fmt: skip
    marked, late = make_topic(), make_topic()
    for topic in (marked, late):
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": topic}
        )
        producer.init_transactions(10)
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, value=f"m{i}".encode(), partition=0)
        producer.commit_transaction(10)  # offsets 0..2, the marker at 3
    produce(broker.bootstrap_servers, late, [(0, None, b"after", None)])  # offset 4
    big = make_topic()
    produce(broker.bootstrap_servers, big, [(0, None, f"big{i}".encode(), None) for i in range(6_000)])  # fmt: skip
    small = [OffsetRange(t, p, 2, 6) for t in topics[:5] for p in (0, 1)]
    ranges = [
        *small,
        OffsetRange(topics[5], 0, 0, 8),
        OffsetRange(marked, 0, 0, 4),  # ends in the marker's gap
        OffsetRange(late, 0, 3, 5),  # starts in it: given up (the range read checks it)
        OffsetRange(big, 0, 0, 6_000),  # too big to fetch together
        OffsetRange(topics[5], 1, 0, 3),  # the same partition twice: read alone
        OffsetRange(topics[5], 1, 3, 5),
        OffsetRange(topics[5], 0, 8, 8),  # empty
    ]
    schema = kafka_arrow_schema(False)
    with RangeReader(options(broker)) as reader:
        assert reader.prefetch(ranges) == len(small) + 2
        for r in reversed(ranges):  # in any order, as a task's tables come
            table = pa.Table.from_batches(list(reader.read(r, schema)), schema)
            alone = read(options(broker), r)
            assert table.equals(alone), r
            if r.topic == marked:
                assert table.column("value").to_pylist() == [b"m0", b"m1", b"m2"]
            elif r.topic == late:
                assert table.column("value").to_pylist() == [b"after"]
            elif r.size:
                assert table.column("offset").to_pylist() == list(range(r.start, r.end)), r
        assert not reader._fetched  # every fetched range was handed out once


def test_fetch_ahead_assigns_the_next_group_as_soon_as_one_is_collected(
    broker: EmbeddedBroker, make_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RangeReader.fetch_ahead`` (a many-table task): the small ranges in groups of
    ``PREFETCH_PARTITIONS``, the first assigned at once and each next one as soon as the
    one before is collected, so the client fetches it while the task writes the tables
    already read. Read in the order it returns, with a big range read alone in the
    middle (which collects every group left first), each range reads as alone."""
    monkeypatch.setattr(range_reader, "PREFETCH_PARTITIONS", 4)
    topics = [make_topic(partitions=2) for _ in range(6)]
    for n, topic in enumerate(topics):
        for partition in (0, 1):
            produce(broker.bootstrap_servers, topic,
                    [(partition, None, f"{n}/{partition}/{i}".encode(), None) for i in range(8)])  # fmt: skip
    big = make_topic()
    produce(broker.bootstrap_servers, big, [(0, None, f"big{i}".encode(), None) for i in range(6_000)])  # fmt: skip
    small = [OffsetRange(t, p, 1, 7) for t in topics for p in (0, 1)]
    schema = kafka_arrow_schema(False)

    def assigned(reader: RangeReader) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in reader._consumer.assignment()}

    with RangeReader(options(broker)) as reader:
        order = reader.fetch_ahead([OffsetRange(big, 0, 0, 6_000), *small])
        assert set(order) == set(small) and len(order) == len(small)
        groups = [order[i : i + 4] for i in range(0, 12, 4)]
        assert assigned(reader) == {(r.topic, r.partition) for r in groups[0]}
        assert not reader._fetched  # nothing collected yet
        reads = [*order[:5], OffsetRange(big, 0, 0, 6_000), *order[5:]]
        for n, r in enumerate(reads):
            table = pa.Table.from_batches(list(reader.read(r, schema)), schema)
            assert table.equals(read(options(broker), r)), r
            if n == 0:  # the first group collected: the second one is being fetched
                assert assigned(reader) == {(r.topic, r.partition) for r in groups[1]}
                assert set(reader._fetched) == set(groups[0][1:])
        assert not reader._fetched and not reader._waiting


def test_a_prefetch_on_a_frozen_broker_leaves_the_error_to_the_range_read(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=2)
    for partition in (0, 1):
        produce(broker.bootstrap_servers, topic, [(partition, None, b"x", None)] * 3)
    opts = options(broker, **{"kafkaConsumer.pollTimeoutMs": "1500"})
    ranges = [OffsetRange(topic, 0, 0, 3), OffsetRange(topic, 1, 0, 3)]
    with RangeReader(opts) as reader:
        reader._open()
        reader._know(topic)
        broker.pause()
        try:
            assert reader.prefetch(ranges) == 0
            with pytest.raises(KafkaReadTimeoutError):
                list(reader.read(ranges[0], kafka_arrow_schema(False)))
        finally:
            broker.resume()


def test_the_next_reader_of_the_process_takes_over_the_idle_consumer(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    """A reader that finished leaves its consumer (unassigned, with the topics it knows)
    to the next reader with the same client settings: the next Spark task of a reused
    Python worker connects no more. A reader that failed closes its consumer."""
    from calving.ingest.kafka import range_reader

    range_reader.close_idle_consumers()
    a, b = make_topic(), make_topic()
    for topic in (a, b):
        produce(broker.bootstrap_servers, topic, [(0, None, f"{topic}-{i}".encode(), None) for i in range(6)])  # fmt: skip
    schema = kafka_arrow_schema(False)
    opts = options(broker)

    def values(reader: RangeReader, r: OffsetRange) -> list[bytes]:
        return (
            pa.Table.from_batches(list(reader.read(r, schema)), schema).column("value").to_pylist()
        )

    with RangeReader(opts) as first:
        assert values(first, OffsetRange(a, 0, 0, 4)) == [f"{a}-{i}".encode() for i in range(4)]
        consumer = first._consumer
    with RangeReader(opts) as second:  # the same partition again, and another topic
        assert values(second, OffsetRange(a, 0, 2, 6)) == [f"{a}-{i}".encode() for i in range(2, 6)]
        assert second._consumer is consumer and second._known is not None and a in second._known
        assert values(second, OffsetRange(b, 0, 1, 3)) == [f"{b}-1".encode(), f"{b}-2".encode()]
    with RangeReader(options(broker, **{"kafka.client.id": "other"})) as other:
        values(other, OffsetRange(a, 0, 0, 1))
        assert other._consumer is not consumer  # other client settings: its own consumer
    with pytest.raises(RuntimeError), RangeReader(opts) as failing:
        values(failing, OffsetRange(b, 0, 0, 2))
        assert failing._consumer is consumer
        raise RuntimeError("the task failed")
    assert range_reader._client_key(opts) not in range_reader._IDLE
    range_reader.close_idle_consumers()
    assert not range_reader._IDLE


def test_a_forked_child_neither_uses_nor_destroys_the_idle_consumer(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    import os
    import time

    from calving.ingest.kafka import range_reader

    range_reader.close_idle_consumers()
    topic = make_topic()
    produce(broker.bootstrap_servers, topic, [(0, None, b"x", None)] * 3)
    schema = kafka_arrow_schema(False)
    opts = options(broker)
    with RangeReader(opts) as reader:
        assert len(list(reader.read(OffsetRange(topic, 0, 0, 3), schema))) == 1
    assert range_reader._client_key(opts) in range_reader._IDLE
    pid = os.fork()
    if pid == 0:  # the child: nothing idle to take, the parent's client left alone
        os._exit(0 if not range_reader._IDLE and range_reader._INHERITED else 1)
    deadline = time.monotonic() + 30
    while (waited := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    if waited == (0, 0):  # hung: do not leave it behind
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert waited[0] == pid and os.waitstatus_to_exitcode(waited[1]) == 0
    with RangeReader(opts) as again:  # the parent still reads on its kept consumer
        table = pa.Table.from_batches(list(again.read(OffsetRange(topic, 0, 1, 3), schema)), schema)
        assert table.column("offset").to_pylist() == [1, 2]
    range_reader.close_idle_consumers()
