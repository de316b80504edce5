"""Many small ranges read with one assignment: a many-table task's ranges of a few records
each (one per quiet table) fetched together instead of one assignment and fetch round
trip per range.

Only the plain case is taken here: records in offset order from the range's start, gaps
after the first record (transaction markers, compaction), the end reached by a record at
or past it or by a partition-end event past it. A range that shows anything else (an
error event, a first record past its start, which may be retention's doing) is given up
and read again on its own by ``_RangeRead``, which checks watermarks and reports data loss
or errors; so is any range still unfinished after ``idle_s`` without a record. Nothing
here decides what is lost or what is an error.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from calving.ingest.kafka.offsets import OffsetRange

#: Ranges of at most this many offsets are fetched together ...
SMALL_RANGE = 5_000
#: ... up to this many offsets in all per task (what the task holds in memory at once).
BUDGET = 100_000
#: Records requested per consume() call, and how long one call waits.
_CONSUME = 5_000
_WAIT_S = 0.5

Key = tuple[str, int]


def small_ranges(ranges: Sequence[OffsetRange]) -> list[OffsetRange]:
    """The ranges worth fetching together: small, non-empty, one per topic-partition
    (a partition planned twice is read on its own), within the budget, smallest first."""
    seen: dict[Key, int] = {}
    for r in ranges:
        if r.size > 0:
            key = (r.topic, r.partition)
            seen[key] = seen.get(key, 0) + 1
    picked, total = [], 0
    for r in sorted(ranges, key=lambda r: r.size):
        if not 0 < r.size <= SMALL_RANGE or seen[(r.topic, r.partition)] > 1:
            continue
        if total + r.size > BUDGET:
            break
        picked.append(r)
        total += r.size
    return picked


class _Pending:
    """One range being fetched: the records taken so far (as confluent-kafka messages)."""

    def __init__(self, span: OffsetRange) -> None:
        self.span = span
        self.next_offset = span.start
        self.messages: list[Any] = []
        self.started = False

    def take(self, message: Any) -> bool:
        """Take ``message`` if it belongs to the range; False when the range is finished
        (``done``) or must be given up (not ``done``)."""
        offset = message.offset()
        if offset < self.next_offset:
            return True  # fetched before the assignment moved on: stale
        if offset >= self.span.end:
            self.next_offset = self.span.end
            return False
        if offset > self.next_offset and not self.started:
            return False  # the start is missing: the range reader checks the watermarks
        self.started = True
        self.messages.append(message)
        self.next_offset = offset + 1
        return self.next_offset < self.span.end

    @property
    def done(self) -> bool:
        return self.next_offset >= self.span.end


class FetchGroup:
    """Ranges of distinct topic-partitions fetched with one assignment, in two steps:
    ``FetchGroup(consumer, ranges)`` assigns them, and the client starts fetching in
    its own threads; ``collect`` then takes their records. In between the caller may
    do other work (decode what an earlier group fetched) as long as it leaves
    ``consumer`` alone."""

    def __init__(self, consumer: Any, ranges: Sequence[OffsetRange]) -> None:
        from confluent_kafka import TopicPartition

        self.consumer = consumer
        self.ranges = list(ranges)
        consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges])

    def collect(self, idle_s: float) -> dict[Key, list[Any]]:
        """The records of each range read to its end; a range given up is missing.
        Stops (keeping what is whole) after ``idle_s`` without a record."""
        pending = {(r.topic, r.partition): _Pending(r) for r in self.ranges}
        done: dict[Key, list[Any]] = {}
        paused: list[Any] = []
        try:
            _fetch(self.consumer, pending, done, paused, idle_s)
        finally:
            if paused:  # a partition stays paused through later assignments: resume it
                self.consumer.resume(paused)
        return done


def _fetch(
    consumer: Any,
    pending: dict[Key, _Pending],
    done: dict[Key, list[Any]],
    paused: list[Any],
    idle_s: float,
) -> None:
    from confluent_kafka import KafkaError, TopicPartition

    last = time.monotonic()
    while pending:
        # consume() waits until it has this many events or the time is up: ask for no
        # more than the records still wanted, so the last ones end the wait.
        wanted = sum(s.span.end - s.next_offset for s in pending.values())
        messages = consumer.consume(num_messages=max(1, min(_CONSUME, wanted)), timeout=_WAIT_S)
        if not messages:
            if time.monotonic() - last > idle_s:
                break
            continue
        last = time.monotonic()
        finished: list[Key] = []
        for m in messages:
            key = (m.topic(), m.partition())
            state = pending.get(key)
            if state is None:
                continue
            error = m.error()
            if error is None and state.take(m):
                continue
            eof = error is not None and error.code() == KafkaError._PARTITION_EOF
            if eof and m.offset() >= state.span.end:
                state.next_offset = state.span.end  # the range ends in a gap
            del pending[key]  # finished, or given up
            finished.append(key)
            if state.done:
                done[key] = state.messages
        if finished and pending:  # stop fetching what is finished
            stop = [TopicPartition(t, p) for t, p in finished]
            consumer.pause(stop)
            paused.extend(stop)
