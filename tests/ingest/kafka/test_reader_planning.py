"""Driver-side planning of the stream reader (offsets, limits, ranges) against the
embedded broker, calling the reader the way Spark does but without Spark."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from calving.ingest.kafka.broker import EmbeddedBroker
from calving.ingest.kafka.offsets import KafkaDataLossError, OffsetRange
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.kafka.producer import produce
from calving.ingest.kafka.source import KafkaStreamReader

pytestmark = pytest.mark.integration


def reader(broker: EmbeddedBroker, **options: str) -> KafkaStreamReader:
    return KafkaStreamReader(
        KafkaSourceOptions.parse({"kafka.bootstrap.servers": broker.bootstrap_servers, **options})
    )


def fill(broker: EmbeddedBroker, topic: str, partitions: int, per_partition: int) -> None:
    produce(
        broker.bootstrap_servers,
        topic,
        [(p, None, b"x", None) for _ in range(per_partition) for p in range(partitions)],
    )


def ranges(source: KafkaStreamReader, start: dict, end: dict) -> list[OffsetRange]:
    return [r for partition in source.partitions(start, end) for r in partition.ranges]  # type: ignore[attr-defined]  # partitions() is typed as Spark's InputPartition; ours carry .ranges


def test_offsets_are_canonical_json_and_unchanged_when_nothing_is_new(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=3)
    fill(broker, topic, 3, 10)
    source = reader(broker, subscribe=topic, startingOffsets="earliest")
    start = source.initialOffset()
    assert start == {topic: {"0": 0, "1": 0, "2": 0}}
    end = source.latestOffset(start, ReadAllAvailable())
    assert json.dumps(end) == json.dumps({topic: {"0": 10, "1": 10, "2": 10}})
    assert source.latestOffset(end, ReadAllAvailable()) is end
    assert source.reportLatestOffset() == end
    assert ranges(source, start, end) == [OffsetRange(topic, p, 0, 10) for p in range(3)]
    assert ranges(source, end, end) == []


def test_read_limit_comes_from_max_offsets_per_trigger_and_the_engine_may_lift_it(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=4)
    fill(broker, topic, 4, 1_000)
    source = reader(broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="100")
    assert source.getDefaultReadLimit() == ReadMaxRows(100)
    assert reader(broker, subscribe=topic).getDefaultReadLimit() == ReadAllAvailable()
    start = source.initialOffset()
    assert source.latestOffset(start, ReadMaxRows(100)) == {topic: {str(p): 25 for p in range(4)}}
    assert source.latestOffset(start, ReadAllAvailable()) == {
        topic: {str(p): 1_000 for p in range(4)}
    }


def test_available_now_stops_at_what_existed_when_the_query_started(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=1)
    fill(broker, topic, 1, 50)
    source = reader(broker, subscribe=topic, startingOffsets="earliest")
    start = source.initialOffset()
    source.prepareForTriggerAvailableNow()
    fill(broker, topic, 1, 50)  # arrives after the target was taken
    first = source.latestOffset(start, ReadMaxRows(30))
    assert first == {topic: {"0": 30}}
    second = source.latestOffset(first, ReadMaxRows(30))
    assert second == {topic: {"0": 50}}
    assert source.latestOffset(second, ReadMaxRows(30)) is second


def test_ledger_and_min_partitions_shape_the_ranges(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=2)
    fill(broker, topic, 2, 100)
    source = reader(
        broker,
        subscribe=topic,
        startingOffsets="earliest",
        minPartitions="4",
        **{"calving.startingLedger": json.dumps({topic: {"1": 60}})},
    )
    start = source.initialOffset()
    assert start == {topic: {"0": 0, "1": 60}}
    end = source.latestOffset(start, ReadAllAvailable())
    # Planned from an older checkpoint offset, partition 1 still starts at the ledger.
    older = {topic: {"0": 0, "1": 10}}
    # 140 records for at least 4 tasks: 100 * 4 / 140 -> 3 pieces, 40 * 4 / 140 -> 2.
    assert ranges(source, older, end) == [
        OffsetRange(topic, 0, 0, 33),
        OffsetRange(topic, 0, 33, 66),
        OffsetRange(topic, 0, 66, 100),
        OffsetRange(topic, 1, 60, 80),
        OffsetRange(topic, 1, 80, 100),
    ]


def test_range_rows_go_to_at_most_range_tasks_tasks(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    """``calving.rangeTasks``: the many-table sink collects the range rows on the driver,
    so they come in one task instead of a task per range (17 s for 500 ranges)."""
    topics = [make_topic(partitions=2) for _ in range(3)]
    for topic in topics:
        fill(broker, topic, 2, 10)
    options = {"subscribe": ",".join(topics), "startingOffsets": "earliest"}
    options["calving.emit"] = "ranges"
    each = reader(broker, **options)
    start = each.initialOffset()
    end = each.latestOffset(start, ReadAllAvailable())
    planned = ranges(each, start, end)
    assert len(planned) == 6
    for tasks, sizes in (("1", [6]), ("4", [2, 2, 1, 1]), ("10", [1] * 6)):
        grouped = reader(broker, **options, **{"calving.rangeTasks": tasks})
        parts = grouped.partitions(start, end)
        assert [len(p.ranges) for p in parts] == sizes  # type: ignore[attr-defined]  # our InputPartition carries .ranges
        rows = [r for p in parts for b in grouped.read(p) for r in b.to_pylist()]
        assert sorted(rows, key=lambda r: (r["topic"], r["partition"])) == sorted(
            (vars(r) for r in planned), key=lambda r: (r["topic"], r["partition"])
        )


def test_small_range_rows_share_a_task_unless_tasks_are_asked_for(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    """``calving.taskRecords``: a small batch's ranges go to one task (a fused task then
    writes one file per table partition, not one per Kafka partition as well);
    ``minPartitions`` or ``calving.taskRecords = 1`` keep a task per range."""
    topic = make_topic(partitions=3)
    fill(broker, topic, 3, 10)
    options = {"subscribe": topic, "startingOffsets": "earliest", "calving.emit": "ranges"}
    for extra, sizes in (
        ({}, [3]),
        ({"calving.taskRecords": "12"}, [1, 1, 1]),
        ({"calving.taskRecords": "15"}, [2, 1]),
        ({"calving.taskRecords": "1"}, [1, 1, 1]),
        ({"minPartitions": "2"}, [1, 1, 1]),
    ):
        source = reader(broker, **options, **extra)
        start = source.initialOffset()
        parts = source.partitions(start, source.latestOffset(start, ReadAllAvailable()))
        assert [len(p.ranges) for p in parts] == sizes, extra  # type: ignore[attr-defined]  # our InputPartition carries .ranges
        rows = [r for p in parts for b in source.read(p) for r in b.to_pylist()]
        assert sorted((r["partition"], r["start"], r["end"]) for r in rows) == [
            (p, 0, 10) for p in range(3)
        ]


def test_partitions_of_new_topics_start_at_earliest_and_vanished_ones_are_data_loss(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    prefix = make_topic(prefix="plan")
    source = reader(broker, subscribePattern=f"{prefix}.*", startingOffsets="latest")
    start = source.initialOffset()
    assert start == {prefix: {"0": 0}}
    newcomer = f"{prefix}.new"
    broker.create_topic(newcomer, 2)
    fill(broker, newcomer, 2, 5)
    end = source.latestOffset(start, ReadAllAvailable())
    assert end == {prefix: {"0": 0}, newcomer: {"0": 5, "1": 5}}
    assert ranges(source, start, end) == [
        OffsetRange(newcomer, 0, 0, 5),
        OffsetRange(newcomer, 1, 0, 5),
    ]

    broker.delete_topic(newcomer)
    after = source.latestOffset(end, ReadAllAvailable())
    assert newcomer not in after
    with pytest.raises(KafkaDataLossError, match=f"{newcomer}/0: partition no longer exists"):
        source.partitions(end, after)
    lenient = reader(
        broker, subscribePattern=f"{prefix}.*", startingOffsets="latest", failOnDataLoss="false"
    )
    assert lenient.partitions(end, after) == []


def test_the_reader_pickles_without_its_broker_connection(
    broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic()
    source = reader(broker, subscribe=topic)
    source.initialOffset()  # opens the admin client
    copy = pickle.loads(pickle.dumps(source))
    assert copy._view is None
    assert copy.initialOffset() == {topic: {"0": 0}}
