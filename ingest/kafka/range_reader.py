"""Executor side of the Kafka source: read one offset range into Arrow record batches.

A consumer is assigned the partition at the range's start (no consumer group is joined
and nothing is committed: offsets live in Spark's checkpoint and calving's ledger) and
reads until it reaches the range's end. Offsets may skip (compacted topics, transaction
markers, aborted records), so the read stops at the first record at or past the end, or at
a partition-end event past it, never by counting records. Nothing here relies on Tansu's
watermark quirk: the end is whatever ``latestOffset`` planned.
"""

from __future__ import annotations

import atexit
import logging
import os
import time
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, Self

import pyarrow as pa

from calving.commit.errors import Terminal, Transient
from calving.ingest.kafka.client_log import with_client_log
from calving.ingest.kafka.offsets import KafkaDataLossError, OffsetRange
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.kafka.prefetch import FetchGroup, small_ranges

_log = logging.getLogger("calving.ingest.kafka")

#: Records requested from the client per call, and rows per Arrow batch handed to Spark.
CONSUME_BATCH = 5_000
ARROW_BATCH_ROWS = 10_000
ARROW_BATCH_BYTES = 16 * 1024 * 1024
#: librdkafka's ``fetch.wait.max.ms`` for range reads (unless ``kafka.fetch.wait.max.ms``).
FETCH_WAIT_MAX_MS = 10
#: librdkafka's ``fetch.queue.backoff.ms`` for range reads (unless the user sets it).
FETCH_QUEUE_BACKOFF_MS = 10
#: Partitions one prefetch assignment holds, at most. Every fetch request names each
#: assigned partition not yet paused, and one whose records are all fetched but not yet
#: consumed is asked again every ``fetch.wait.max.ms``: fewer at a time, fewer such asks.
PREFETCH_PARTITIONS = 16
#: How long one consume() call waits; the read gives up after ``poll_timeout_s`` idle.
_CONSUME_WAIT_S = 0.5

_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


class KafkaReadError(Terminal):
    """The broker refused to serve a planned range (unknown partition, authorization,
    an offset beyond the partition's end); names topic, partition and offset."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(f"{topic}/{partition}@{offset}: {reason}")


class KafkaReadTimeoutError(Transient):
    """No record arrived for ``kafkaConsumer.pollTimeoutMs`` while the range was unfinished
    (broker down or frozen). Spark retries the task."""

    def __init__(self, topic: str, partition: int, offset: int, end: int, waited: float) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(
            f"{topic}/{partition}: no record for {waited:.0f}s while reading offset {offset} "
            f"of the range ending at {end} (kafkaConsumer.pollTimeoutMs)"
        )


def consumer_config(options: KafkaSourceOptions) -> dict[str, Any]:
    """librdkafka settings for a range read: the user's ``kafka.*`` options plus the
    settings the source owns (no commits, errors instead of silent offset resets)."""
    config: dict[str, Any] = {
        # Like Spark's source (and Kafka's Java consumer), unless the user says otherwise.
        "isolation.level": "read_uncommitted",
        **options.client_config,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        # A start offset that no longer exists must surface as an error, not a reset.
        "auto.offset.reset": "error",
    }
    config.setdefault("group.id", f"{options.group_id_prefix}-{uuid.uuid4().hex[:12]}")
    # A range is planned below the partition's end, so a fetch never needs to wait for
    # new records; a long-polling fetch of the range read before would hold the next
    # range's first fetch back by up to fetch.wait.max.ms (500 ms by default).
    config.setdefault("fetch.wait.max.ms", FETCH_WAIT_MAX_MS)
    # Once the client's queue of fetched records passes its thresholds, librdkafka holds
    # every next fetch back by fetch.queue.backoff.ms (1,000 ms by default): a read of a
    # range below a partition's end, whose tail was not yet fetched, then stalled for a
    # second (25k records of a 200k-record partition: 1.04 s against 0.05 s).
    config.setdefault("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)
    return config


class _Columns:
    """Column lists for the Arrow batch being built (one list per column: appending to
    lists and converting once is far cheaper than building rows)."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.clear()

    def clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.timestamp_types: list[int] = []
        self.headers: list[list[dict[str, Any]] | None] = []
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(self, messages: list[Any], offsets: list[int] | None = None) -> None:
        """Add records (error-free, in offset order; ``offsets``: theirs, if read
        already). One comprehension per column costs far less than a Python call per
        record."""
        keys = [m.key() for m in messages]
        values = [m.value() for m in messages]
        stamps = [m.timestamp() for m in messages]
        self.keys += keys
        self.values += values
        self.offsets += [m.offset() for m in messages] if offsets is None else offsets
        # confluent-kafka: 0 none, 1 create time, 2 log-append time; Spark (Java) ids are
        # -1, 0, 1. Spark keeps the raw -1 ms of "no timestamp" too.
        self.timestamps += [millis * 1000 for _, millis in stamps]
        self.timestamp_types += [kind - 1 for kind, _ in stamps]
        self.bytes += sum(map(len, filter(None, keys))) + sum(map(len, filter(None, values)))
        self.bytes += 40 * len(messages)
        if self.include_headers:
            for m in messages:
                headers = m.headers()
                self.headers.append(
                    [{"key": k, "value": v} for k, v in headers] if headers else None
                )

    def full(self) -> bool:
        return len(self.offsets) >= ARROW_BATCH_ROWS or self.bytes >= ARROW_BATCH_BYTES

    def to_batch(self, schema: pa.Schema) -> pa.RecordBatch:
        n = len(self.offsets)
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, _TIMESTAMP_TYPE),
            pa.array(self.timestamp_types, pa.int32()),
        ]
        if self.include_headers:
            arrays.append(pa.array(self.headers, _HEADERS_TYPE))
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        self.clear()
        return batch


def read_range(
    options: KafkaSourceOptions, offset_range: OffsetRange, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``offset_range`` as Arrow batches of ``schema``."""
    if offset_range.size <= 0:
        return
    consumer = _new_consumer(options)
    try:
        yield from _RangeRead(consumer, options, offset_range, schema).batches()
    finally:
        consumer.close()


def _new_consumer(options: KafkaSourceOptions) -> Any:
    from confluent_kafka import Consumer, KafkaException

    try:
        return Consumer(with_client_log(consumer_config(options)))
    except KafkaException as error:
        from calving.commit.errors import ConfigError

        raise ConfigError(f"kafka.* options rejected by the Kafka client: {error}") from None


def prefetch_groups(ranges: Sequence[OffsetRange]) -> list[Sequence[OffsetRange]]:
    """``ranges`` in as few assignments of at most ``PREFETCH_PARTITIONS`` as there can
    be, of even sizes (20 ranges: 10 and 10, not 16 and 4)."""
    rounds = -(-len(ranges) // PREFETCH_PARTITIONS)
    if rounds <= 1:
        return [ranges]
    size = -(-len(ranges) // rounds)
    return [ranges[i : i + size] for i in range(0, len(ranges), size)]


class RangeReader:
    """Reads ranges one after another with one consumer (created at the first range
    that has records), each range re-assigning it: a task reading many small ranges
    opens one connection instead of one per range. ``prefetch`` (or ``fetch_ahead``)
    first fetches the small ranges of a task together (``calving.ingest.kafka.prefetch``);
    ``read`` then serves them from memory. ``close()`` when done: the consumer,
    unassigned, is kept for the next reader of the process with the same client
    settings (a Spark Python worker runs one task at a time and is reused), unless the
    reader failed."""

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        self._key = _client_key(options)
        self._consumer: Any = None
        #: Topics whose metadata the consumer holds (None: not asked yet).
        self._known: set[str] | None = None
        #: Ranges fetched whole by a prefetch, not read yet: their records.
        self._fetched: dict[OffsetRange, list[Any]] = {}
        #: The prefetch's assignments not made yet, the one being fetched, and the
        #: ranges of both.
        self._groups: deque[Sequence[OffsetRange]] = deque()
        self._current: FetchGroup | None = None
        self._waiting: set[OffsetRange] = set()

    def prefetch(self, ranges: Sequence[OffsetRange]) -> int:
        """Fetch the small ones of ``ranges`` now, with one assignment per
        ``PREFETCH_PARTITIONS`` of them; how many were fetched whole."""
        before = len(self._fetched)
        self.fetch_ahead(ranges)
        self._collect_through(None)
        return len(self._fetched) - before

    def fetch_ahead(self, ranges: Sequence[OffsetRange]) -> list[OffsetRange]:
        """Plan the small ones of ``ranges`` to be fetched together, ``PREFETCH_PARTITIONS``
        at a time: the first assignment is made at once, and each next one as soon as
        the one before is collected, so its records arrive while the caller decodes the
        earlier ones. Returns those ranges in the order they are fetched (reading them
        in that order waits least). ``read`` of one collects its assignment and the
        ones before it; ``read`` of any other range collects them all first."""
        self._collect_through(None)
        picked = small_ranges(ranges)
        if len(picked) < 2:
            return []
        self._open()
        for r in picked:
            self._know(r.topic)
        groups = prefetch_groups(picked)
        self._groups.extend(groups)
        self._waiting.update(picked)
        self._start_next()
        return [r for group in groups for r in group]

    def _start_next(self) -> None:
        self._current = FetchGroup(self._consumer, self._groups.popleft()) if self._groups else None

    def _collect_through(self, wanted: OffsetRange | None) -> None:
        """Collect the prefetch's assignments in turn until ``wanted`` is collected (None:
        all of them); each next assignment is made before the records are handed on."""
        while self._current is not None and (wanted is None or wanted in self._waiting):
            group = self._current
            fetched = group.collect(self.options.poll_timeout_s)
            self._start_next()
            for r in group.ranges:
                self._waiting.discard(r)
                messages = fetched.get((r.topic, r.partition))
                if messages is not None:
                    self._fetched[r] = messages

    def read(self, offset_range: OffsetRange, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """Like ``read_range``, on the shared consumer (or from what a prefetch got)."""
        if offset_range.size <= 0:
            return
        self._collect_through(offset_range)
        messages = self._fetched.pop(offset_range, None)
        if messages is not None:
            yield from _fetched_batches(offset_range, messages, schema, self.options)
            return
        self._collect_through(None)  # the consumer reads this range on its own
        self._open()
        self._know(offset_range.topic)
        yield from _RangeRead(
            self._consumer, self.options, offset_range, schema, shared=True
        ).batches()

    def _open(self) -> None:
        if self._consumer is None:
            idle = _IDLE.pop(self._key, None)
            if idle is not None:
                self._consumer, self._known = idle
            else:
                self._consumer = _new_consumer(self.options)

    def _know(self, topic: str) -> None:
        """Fetch the topic's metadata before assigning it: a consumer re-assigned to a
        topic it has no metadata for waited about a second for it (librdkafka against
        the embedded broker), per range. All topics in one request first, then any
        topic created since on its own. A failure is left to the read to report."""
        from confluent_kafka import KafkaException

        if self._known is not None and topic in self._known:
            return
        try:
            if self._known is None:
                found = self._consumer.list_topics(timeout=self.options.poll_timeout_s)
                self._known = set(found.topics)
            if topic not in self._known:
                found = self._consumer.list_topics(topic, timeout=self.options.poll_timeout_s)
                self._known |= set(found.topics)
        except KafkaException as err:
            _log.debug("metadata of %s not fetched ahead: %s", topic, err)

    def close(self, keep: bool = True) -> None:
        """Done reading: keep the consumer for the next reader (``keep``), else close it."""
        from confluent_kafka import KafkaException

        self._fetched.clear()
        self._groups.clear()
        self._waiting.clear()
        self._current = None
        consumer, known = self._consumer, self._known
        self._consumer, self._known = None, None
        if consumer is None:
            return
        if keep:
            try:
                consumer.unassign()  # no fetching while idle
            except KafkaException:
                keep = False
        if not keep:
            consumer.close()
            return
        replaced = _IDLE.pop(self._key, None)
        _IDLE[self._key] = (consumer, known)
        if replaced is not None:
            replaced[0].close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(keep=exc_type is None)


#: An idle consumer (and the topics it knows) per client settings, kept between readers.
_IDLE: dict[tuple[tuple[str, str], ...], tuple[Any, set[str] | None]] = {}


def _client_key(options: KafkaSourceOptions) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in options.client_config.items()))


def close_idle_consumers() -> None:
    """Close the consumers kept between readers (at exit, and in tests)."""
    while _IDLE:
        _, (consumer, _) = _IDLE.popitem()
        consumer.close()


#: Consumers a forked child inherited: never used there, and never destroyed either
#: (destroying one waits for librdkafka threads the child does not have).
_INHERITED: list[Any] = []


def _forget_after_fork() -> None:
    _INHERITED.extend(consumer for consumer, _ in _IDLE.values())
    _IDLE.clear()


atexit.register(close_idle_consumers)
os.register_at_fork(after_in_child=_forget_after_fork)


def _fetched_batches(
    span: OffsetRange, messages: list[Any], schema: pa.Schema, options: KafkaSourceOptions
) -> Iterator[pa.RecordBatch]:
    columns = _Columns(span.topic, span.partition, options.include_headers)
    for at in range(0, len(messages), CONSUME_BATCH):
        columns.extend(messages[at : at + CONSUME_BATCH])
        if columns.full():
            yield columns.to_batch(schema)
    if len(columns):
        yield columns.to_batch(schema)


class _RangeRead:
    def __init__(
        self,
        consumer: Any,
        options: KafkaSourceOptions,
        offset_range: OffsetRange,
        schema: pa.Schema,
        shared: bool = False,
    ) -> None:
        self.consumer = consumer
        #: A consumer that read other ranges before: a record of another partition
        #: still in its queue is dropped.
        self.shared = shared
        self.options = options
        self.topic = offset_range.topic
        self.partition = offset_range.partition
        self.end = offset_range.end
        self.next_offset = offset_range.start
        self.schema = schema
        self.columns = _Columns(self.topic, self.partition, options.include_headers)
        self.head_checked = False

    def batches(self) -> Iterator[pa.RecordBatch]:
        from confluent_kafka import KafkaError

        self._assign(self.next_offset)
        last_progress = time.monotonic()
        while self.next_offset < self.end:
            wanted = max(1, min(CONSUME_BATCH, self.end - self.next_offset))
            messages = self.consumer.consume(num_messages=wanted, timeout=_CONSUME_WAIT_S)
            if not messages:
                waited = time.monotonic() - last_progress
                if waited > self.options.poll_timeout_s:
                    raise KafkaReadTimeoutError(
                        self.topic, self.partition, self.next_offset, self.end, waited
                    )
                continue
            last_progress = time.monotonic()
            if self.shared:
                messages = [
                    m
                    for m in messages
                    if m.topic() is None
                    or (m.partition() == self.partition and m.topic() == self.topic)
                ]
            offsets = self._in_order(messages)
            if offsets is not None:  # the common case: every record is the range's next
                self.columns.extend(messages, offsets)
                self.next_offset = offsets[-1] + 1
                self.head_checked = True
                if self.columns.full():
                    yield self.columns.to_batch(self.schema)
                continue
            accepted = []
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if message.offset() >= self.end:  # the range ends in a gap
                            self.next_offset = self.end
                            break
                        continue
                    self._on_error(error)
                    break  # re-assigned or skipped: messages after the error are stale
                offset = message.offset()
                if offset >= self.end:
                    self.next_offset = self.end
                    break
                if offset < self.next_offset:
                    continue
                if offset > self.next_offset and not self.head_checked:
                    self._check_head_gap(offset)
                self.head_checked = True
                accepted.append(message)
                self.next_offset = offset + 1
            self.columns.extend(accepted)
            if self.columns.full():
                yield self.columns.to_batch(self.schema)
        if len(self.columns):
            yield self.columns.to_batch(self.schema)

    def _in_order(self, messages: list[Any]) -> list[int] | None:
        """The offsets of ``messages`` when all of them are records to take as they
        are: no error or partition-end event, the first at the next offset wanted (or
        past it once the head was checked), the last before the range's end. None: the
        record-by-record loop decides. One pass per column instead of a Python step per
        record (a partition's offsets only grow)."""
        if not messages or any(m.error() is not None for m in messages):
            return None
        offsets = [m.offset() for m in messages]
        first, last = offsets[0], offsets[-1]
        if first < self.next_offset or last >= self.end:
            return None
        if first > self.next_offset and not self.head_checked:
            return None
        return offsets

    def _assign(self, offset: int) -> None:
        from confluent_kafka import TopicPartition

        self.consumer.assign([TopicPartition(self.topic, self.partition, offset)])

    def _low_high(self) -> tuple[int, int]:
        from confluent_kafka import TopicPartition

        low, high = self.consumer.get_watermark_offsets(
            TopicPartition(self.topic, self.partition),
            timeout=self.options.poll_timeout_s,
            cached=False,
        )
        return int(low), int(high)

    def _check_head_gap(self, first_offset: int) -> None:
        """The first record came after the start: a gap (compaction, transaction marker)
        unless retention deleted the start, which shows as a low watermark past it."""
        low, _ = self._low_high()
        if low > self.next_offset:
            self._data_loss(
                f"offsets {self.next_offset}..{low - 1} were deleted before "
                f"they were read (earliest available is {low})"
            )

    def _on_error(self, error: Any) -> None:
        from confluent_kafka import KafkaError

        code = error.code()
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            low, high = self._low_high()
            if self.next_offset < low:
                self._data_loss(
                    f"offsets {self.next_offset}..{low - 1} were deleted before "
                    f"they were read (earliest available is {low})"
                )
                self.next_offset = min(low, self.end)
                self.head_checked = True
                if self.next_offset < self.end:
                    self._assign(self.next_offset)
                return
            if self.next_offset > high:
                raise KafkaReadError(
                    self.topic,
                    self.partition,
                    self.next_offset,
                    f"offset is past the partition's end {high} (topic recreated?)",
                )
            self._assign(self.next_offset)  # the range moved back into bounds: retry
            return
        if error.fatal() or code in (
            KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
            KafkaError._UNKNOWN_PARTITION,
            KafkaError._UNKNOWN_TOPIC,
        ):
            raise KafkaReadError(self.topic, self.partition, self.next_offset, error.str())
        # Connection hiccups are retried inside the client; the poll timeout bounds them.
        _log.debug("%s/%s: transient consumer event: %s", self.topic, self.partition, error)

    def _data_loss(self, detail: str) -> None:
        if self.options.fail_on_data_loss:
            raise KafkaDataLossError(self.topic, self.partition, detail)
        _log.warning(
            "possible data loss on %s/%s: %s (failOnDataLoss=false)",
            self.topic,
            self.partition,
            detail,
        )
