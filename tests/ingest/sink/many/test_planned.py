"""A many-table micro-batch's range rows read from its plan on the driver
(``planned_ranges``) instead of by a Spark job: the same rows ``collect`` gives, batch
after batch, on a real local Spark and the embedded broker; a DataFrame of another
shape gives ``None`` (the sink collects then)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

import pytest

from calving.ingest.kafka.broker import EmbeddedBroker
from calving.ingest.kafka.producer import produce
from calving.ingest.kafka.source import RANGE_COLUMNS, KafkaSource
from calving.ingest.sink.many.planned import planned_ranges

pytestmark = pytest.mark.integration


def _fill(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    for p in range(partitions):
        produce(
            bootstrap, topic, [(p, None, f"{p}-{i}".encode(), None) for i in range(per_partition)]
        )
        # Tansu's high watermark is the last batch's base offset + 1: end on a lone record.
        produce(bootstrap, topic, [(p, None, b"last", None)])


def test_the_plan_gives_the_rows_collect_gives(
    spark: Any, broker: EmbeddedBroker, make_topic: Callable[..., str]
) -> None:
    topics = [
        make_topic(partitions=3, prefix="planned"),
        make_topic(partitions=1, prefix="planned"),
    ]
    for topic, partitions in zip(topics, (3, 1)):
        _fill(broker.bootstrap_servers, topic, partitions, 20)
    spark.dataSource.register(KafkaSource)
    options = {
        "kafka.bootstrap.servers": broker.bootstrap_servers,
        "subscribe": ",".join(topics),
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "30",  # several batches
        "calving.emit": "ranges",  # as a many-table pipeline's source
        "calving.splitRanges": "false",
        "calving.taskRecords": "12",  # small ranges share a partition, up to 12 records
    }
    reader = spark.readStream.format("calving-kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    seen: list[tuple[list[Any] | None, list[Any]]] = []

    def batch(df: Any, batch_id: int) -> None:
        planned = planned_ranges(df)
        collected = [(r.topic, int(r.partition), int(r.start), int(r.end)) for r in df.collect()]
        seen.append((planned, collected))

    with tempfile.TemporaryDirectory() as checkpoint:
        query = (
            reader.load()
            .writeStream.foreachBatch(batch)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None
    assert len(seen) >= 3, seen
    for planned, collected in seen:
        assert planned == collected
    rows = [r for _, collected in seen for r in collected]
    assert sum(end - start for _, _, start, end in rows) == 4 * 21  # every record once
    assert any(len(collected) > 1 for _, collected in seen)


def test_a_frame_of_another_shape_gives_none(spark: Any) -> None:
    """Range rows that are not a source scan (here: made on the driver) are not read
    from a plan; the sink collects them."""
    df = spark.createDataFrame([("t", 0, 0, 5)], RANGE_COLUMNS)
    assert planned_ranges(df) is None
    assert planned_ranges(df.filter("start > 0")) is None
