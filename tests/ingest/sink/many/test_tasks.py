"""The order a many-table task writes its tables in (``tasks.fetch_order``)."""

from __future__ import annotations

from calving.ingest.kafka.offsets import OffsetRange
from calving.ingest.sink.many.tasks import fetch_order


def test_tables_follow_the_fetch_order_and_the_ones_read_alone_come_last() -> None:
    topics = ["big", "a", "b", "c", "d"]
    ahead = [
        OffsetRange("c", 0, 0, 1),
        OffsetRange("a", 1, 0, 2),
        OffsetRange("c", 1, 0, 2),  # a topic's later range does not move it
        OffsetRange("a", 0, 0, 3),
    ]
    assert fetch_order(topics, ahead) == ["c", "a", "big", "b", "d"]
    assert fetch_order(topics, []) == topics  # nothing fetched ahead: as planned
