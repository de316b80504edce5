"""The fused path's reading of a task's range rows, against the embedded broker."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from calving.ingest.kafka import range_reader
from calving.ingest.kafka.broker import EmbeddedBroker
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.kafka.producer import produce
from calving.ingest.sink.fused import _records

pytestmark = pytest.mark.integration


def range_rows(spans: list[tuple[str, int, int, int]]) -> Iterator[pa.RecordBatch]:
    """A task's input: range rows as the ``calving.emit = ranges`` source gives them."""
    topics, partitions, starts, ends = (list(c) for c in zip(*spans, strict=True))
    yield pa.RecordBatch.from_pydict(
        {"topic": topics, "partition": partitions, "start": starts, "end": ends}
    )


def test_a_task_reads_all_its_ranges_with_one_consumer(
    broker: EmbeddedBroker, make_topic: Callable[..., str], counted_consumers: list[Any]
) -> None:
    """Small ranges of several partitions and topics, and one past the joint fetch's
    size, come back exactly and in range order from a single consumer; the next task
    of the same Python worker takes that consumer over."""
    a, b = make_topic(partitions=3), make_topic()
    for p in range(3):
        produce(broker.bootstrap_servers, a, [(p, None, f"a{p}-{i}".encode(), None) for i in range(8)])  # fmt: skip
    produce(broker.bootstrap_servers, b, [(0, None, f"b-{i}".encode(), None) for i in range(12_000)])  # fmt: skip
    options = KafkaSourceOptions.parse(
        {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": a}
    )
    spans = [(a, 2, 1, 5), (b, 0, 0, 12_000), (a, 0, 0, 8), (a, 1, 3, 4), (a, 0, 8, 8)]

    table = pa.Table.from_batches(list(_records(options, range_rows(spans))))

    expected = [
        value
        for topic, partition, start, end in spans
        for value in (
            [f"a{partition}-{i}".encode() for i in range(start, end)]
            if topic == a
            else [f"b-{i}".encode() for i in range(start, end)]
        )
    ]
    assert table.column("value").to_pylist() == expected
    assert len(counted_consumers) == 1
    again = pa.Table.from_batches(list(_records(options, range_rows([(a, 1, 0, 8)]))))
    assert again.column("value").to_pylist() == [f"a1-{i}".encode() for i in range(8)]
    assert len(counted_consumers) == 1


def test_a_task_that_fails_while_reading_closes_its_consumer(
    broker: EmbeddedBroker, make_topic: Callable[..., str], counted_consumers: list[Any]
) -> None:
    """A task failing part-way (the decoder raised) leaves no consumer to the next task."""
    topic = make_topic(partitions=2)
    for p in range(2):
        produce(broker.bootstrap_servers, topic, [(p, None, b"x", None) for _ in range(4)])
    options = KafkaSourceOptions.parse(
        {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": topic}
    )
    records = _records(options, range_rows([(topic, 0, 0, 4), (topic, 1, 0, 4)]))
    next(records)
    with pytest.raises(RuntimeError, match="the decoder failed"):
        records.throw(RuntimeError("the decoder failed"))
    assert range_reader._client_key(options) not in range_reader._IDLE
    assert len(counted_consumers) == 1
