"""The calving-kafka streaming source end to end: real broker, real Spark."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from calving.ingest.kafka.broker import EmbeddedBroker
from calving.ingest.kafka.producer import produce
from calving.ingest.kafka.source import SOURCE_NAME, KafkaSource, kafka_schema

pytestmark = pytest.mark.integration

QUERY_TIMEOUT_S = 180


class Collected:
    """What foreachBatch saw: one Arrow table (and Spark partition count) per batch."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, pa.Table, int]] = []

    @property
    def rows(self) -> pa.Table:
        tables = [table for _, table, _ in self.batches]
        return (
            pa.concat_tables(tables) if tables else pa.table({"offset": pa.array([], pa.int64())})
        )

    def coordinates(self) -> list[tuple[str, int, int]]:
        rows = self.rows
        if rows.num_rows == 0:
            return []
        return list(
            zip(
                rows.column("topic").to_pylist(),
                rows.column("partition").to_pylist(),
                rows.column("offset").to_pylist(),
            )
        )


@pytest.fixture(scope="module")
def kafka_spark(spark: Any) -> Any:
    spark.dataSource.register(KafkaSource)
    return spark


def run_available_now(
    spark: Any,
    broker: EmbeddedBroker,
    checkpoint: Path,
    options: dict[str, str],
    collected: Collected | None = None,
    fail_on_batch: int | None = None,
) -> Collected:
    """Run a query with Trigger.AvailableNow to completion, collecting every batch.
    ``fail_on_batch`` makes the sink raise on that batch id (a crash before commit)."""
    collected = collected if collected is not None else Collected()

    def sink(frame: Any, batch_id: int) -> None:
        if batch_id == fail_on_batch:
            raise RuntimeError(f"sink crash in batch {batch_id}")
        collected.batches.append((batch_id, frame.toArrow(), frame.rdd.getNumPartitions()))

    reader = spark.readStream.format(SOURCE_NAME).option(
        "kafka.bootstrap.servers", broker.bootstrap_servers
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S), "query did not finish"
    finally:
        query.stop()
    return collected


def records(partitions: int, per_partition: int, tag: str = "v") -> list:
    return [
        (p, f"k{p}-{i}".encode(), f"{tag}{p}-{i}".encode(), None)
        for i in range(per_partition)
        for p in range(partitions)
    ]


def expected(topic: str, ranges: dict[int, range]) -> list[tuple[str, int, int]]:
    return sorted((topic, p, o) for p, offsets in ranges.items() for o in offsets)


def test_every_record_arrives_exactly_once_with_spark_kafka_columns(
    kafka_spark: Any, broker: EmbeddedBroker, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=4)
    produce(broker.bootstrap_servers, topic, records(4, 1_500))
    frame = (
        kafka_spark.readStream.format(SOURCE_NAME)
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("subscribe", topic)
        .load()
    )
    assert frame.schema == kafka_schema(include_headers=False)

    got = run_available_now(
        kafka_spark, broker, tmp_path, {"subscribe": topic, "startingOffsets": "earliest"}
    )
    coordinates = got.coordinates()
    assert sorted(coordinates) == expected(topic, {p: range(1_500) for p in range(4)})
    rows = got.rows
    by_coordinate = {
        (p, o): (k, v)
        for p, o, k, v in zip(
            rows.column("partition").to_pylist(),
            rows.column("offset").to_pylist(),
            rows.column("key").to_pylist(),
            rows.column("value").to_pylist(),
        )
    }
    assert by_coordinate[(2, 1_499)] == (b"k2-1499", b"v2-1499")
    assert rows.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert set(rows.column("timestampType").to_pylist()) == {0}


def test_max_offsets_per_trigger_splits_batches_and_a_crash_replays_exactly_once(
    kafka_spark: Any, broker: EmbeddedBroker, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=3)
    produce(broker.bootstrap_servers, topic, records(3, 1_000))
    options = {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "700"}
    collected = Collected()
    # The sink crashes on batch 2: batches 0 and 1 are committed, batch 2 is not.
    with pytest.raises(Exception, match="sink crash in batch 2"):
        run_available_now(kafka_spark, broker, tmp_path, options, collected, fail_on_batch=2)
    assert [batch_id for batch_id, _, _ in collected.batches] == [0, 1]

    # The restart replays batch 2 with the same offsets, then continues; new records too.
    produce(broker.bootstrap_servers, topic, records(3, 100, tag="late"))
    run_available_now(kafka_spark, broker, tmp_path, options, collected)
    batch_ids = [batch_id for batch_id, _, _ in collected.batches]
    assert batch_ids == list(range(len(batch_ids))) and len(batch_ids) >= 5
    assert all(table.num_rows <= 700 for _, table, _ in collected.batches)
    assert sorted(collected.coordinates()) == expected(topic, {p: range(1_100) for p in range(3)})


def test_starting_offsets_json_and_latest(
    kafka_spark: Any, broker: EmbeddedBroker, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce(broker.bootstrap_servers, topic, records(2, 100))
    specific = json.dumps({topic: {"0": 40, "1": -2}})
    got = run_available_now(
        kafka_spark, broker, tmp_path / "json", {"subscribe": topic, "startingOffsets": specific}
    )
    assert sorted(got.coordinates()) == expected(topic, {0: range(40, 100), 1: range(100)})

    latest = tmp_path / "latest"
    options = {"subscribe": topic, "startingOffsets": "latest"}
    assert run_available_now(kafka_spark, broker, latest, options).coordinates() == []
    produce(broker.bootstrap_servers, topic, records(2, 25, tag="new"))
    got = run_available_now(kafka_spark, broker, latest, options)
    assert sorted(got.coordinates()) == expected(topic, {0: range(100, 125), 1: range(100, 125)})

    incomplete = json.dumps({topic: {"0": 1}})
    with pytest.raises(Exception, match="startingOffsets must name every"):
        run_available_now(
            kafka_spark,
            broker,
            tmp_path / "bad",
            {"subscribe": topic, "startingOffsets": incomplete},
        )


def test_starting_ledger_is_never_read_below(
    kafka_spark: Any, broker: EmbeddedBroker, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce(broker.bootstrap_servers, topic, records(2, 100))
    # A fresh query starts at the ledger where it is ahead of startingOffsets.
    options = {
        "subscribe": topic,
        "startingOffsets": "earliest",
        "calving.startingLedger": json.dumps({topic: {"0": 70}}),
    }
    got = run_available_now(kafka_spark, broker, tmp_path / "fresh", options)
    assert sorted(got.coordinates()) == expected(topic, {0: range(70, 100), 1: range(100)})

    # A replayed batch planned below the ledger (the table committed part of it before a
    # crash) reads only what the table lacks.
    replay = tmp_path / "replay"
    plain = {"subscribe": topic, "startingOffsets": "earliest"}
    with pytest.raises(Exception, match="sink crash in batch 0"):
        run_available_now(kafka_spark, broker, replay, plain, fail_on_batch=0)
    options = {**plain, "calving.startingLedger": json.dumps({topic: {"0": 30, "1": 90}})}
    got = run_available_now(kafka_spark, broker, replay, options)
    assert [batch_id for batch_id, _, _ in got.batches] == [0]
    assert sorted(got.coordinates()) == expected(topic, {0: range(30, 100), 1: range(90, 100)})


def test_subscribe_pattern_picks_up_new_topics_from_earliest(
    kafka_spark: Any, broker: EmbeddedBroker, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    prefix = make_topic(prefix="pat")  # a unique prefix; this topic matches too
    first, second = f"{prefix}.a", f"{prefix}.b"
    broker.create_topic(first, 2)
    broker.create_topic(f"x{prefix}.c", 1)  # does not match: the pattern is anchored
    produce(broker.bootstrap_servers, prefix, records(1, 5))
    produce(broker.bootstrap_servers, first, records(2, 10))
    produce(broker.bootstrap_servers, f"x{prefix}.c", records(1, 10))
    options = {"subscribePattern": prefix.replace(".", "\\.") + ".*", "startingOffsets": "latest"}
    assert run_available_now(kafka_spark, broker, tmp_path, options).coordinates() == []

    produce(broker.bootstrap_servers, first, records(2, 3, tag="new"))
    broker.create_topic(second, 1)
    produce(broker.bootstrap_servers, second, records(1, 4))
    got = run_available_now(kafka_spark, broker, tmp_path, options)
    assert sorted(got.coordinates()) == sorted(
        expected(first, {0: range(10, 13), 1: range(10, 13)}) + expected(second, {0: range(4)})
    )


def test_include_headers_and_min_partitions(
    kafka_spark: Any, broker: EmbeddedBroker, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(
        broker.bootstrap_servers,
        topic,
        [
            (0, None, f"v{i}".encode(), [("i", str(i).encode())] if i % 2 else None)
            for i in range(400)
        ],
    )
    options = {
        "subscribe": topic,
        "startingOffsets": "earliest",
        "includeHeaders": "true",
        "minPartitions": "4",
    }
    got = run_available_now(kafka_spark, broker, tmp_path, options)
    assert [spark_partitions for _, _, spark_partitions in got.batches] == [4]
    rows = got.rows
    assert rows.schema.field("headers").type == pa.list_(
        pa.struct([("key", pa.string()), ("value", pa.binary())])
    )
    headers = dict(zip(rows.column("offset").to_pylist(), rows.column("headers").to_pylist()))
    assert sorted(headers) == list(range(400))
    assert headers[0] is None
    assert headers[7] == [{"key": "i", "value": b"7"}]


def test_fail_on_data_loss(
    kafka_spark: Any, broker: EmbeddedBroker, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(broker.bootstrap_servers, topic, records(1, 100))
    options = {"subscribe": topic, "startingOffsets": "earliest"}
    assert len(run_available_now(kafka_spark, broker, tmp_path, options).coordinates()) == 100

    # The topic is recreated with fewer records: the checkpoint's offset 100 is gone.
    broker.delete_topic(topic)
    broker.create_topic(topic, 1)
    produce(broker.bootstrap_servers, topic, records(1, 10, tag="reborn"))
    with pytest.raises(Exception, match=f"KafkaDataLossError.*{topic}/0: offset went back"):
        run_available_now(kafka_spark, broker, tmp_path, options)

    lenient = {**options, "failOnDataLoss": "false"}
    got = run_available_now(kafka_spark, broker, tmp_path, lenient)
    assert sorted(got.coordinates()) == expected(topic, {0: range(10)})
    assert got.rows.column("value").to_pylist()[0] == b"reborn0-0"


def test_bad_options_fail_at_load(kafka_spark: Any, broker: EmbeddedBroker) -> None:
    reader = kafka_spark.readStream.format(SOURCE_NAME).option(
        "kafka.bootstrap.servers", broker.bootstrap_servers
    )
    with pytest.raises(Exception, match="exactly one of the options 'subscribe'"):
        reader.load()


def test_a_records_task_takes_over_the_consumer_its_worker_kept(
    broker: EmbeddedBroker, make_topic: Callable[..., str], counted_consumers: list[Any]
) -> None:
    """The records path's tasks (one range each) of one Python worker read on one Kafka
    consumer, each exactly its range."""
    from calving.ingest.kafka.offsets import OffsetRange
    from calving.ingest.kafka.options import KafkaSourceOptions
    from calving.ingest.kafka.source import KafkaInputPartition, KafkaStreamReader

    topic = make_topic(partitions=2)
    produce(broker.bootstrap_servers, topic, records(2, 5))
    reader = KafkaStreamReader(
        KafkaSourceOptions.parse(
            {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": topic}
        )
    )
    for partition, start, end in ((0, 1, 4), (1, 0, 5), (0, 4, 5)):
        batches = list(reader.read(KafkaInputPartition(OffsetRange(topic, partition, start, end))))
        table = pa.Table.from_batches(batches)
        assert table.column("offset").to_pylist() == list(range(start, end))
        assert set(table.column("partition").to_pylist()) == {partition}
    assert len(counted_consumers) == 1
