"""``calving-kafka``: a PySpark streaming data source reading Kafka like Spark's own.

Same options (``kafka.*``, ``subscribe`` / ``subscribePattern`` / ``assign``,
``startingOffsets``, ``maxOffsetsPerTrigger``, ``failOnDataLoss``, ``includeHeaders``,
``minPartitions``) and same columns (key, value, topic, partition, offset, timestamp,
timestampType, headers), plus ``calving.startingLedger``: the table's exactly-once ledger,
below which nothing is ever read again.

    spark.dataSource.register(KafkaSource)
    df = (spark.readStream.format("calving-kafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders").load())

Driver side (one long-lived reader object): offsets are planned from the broker's
watermarks; executors read each planned range (``calving.ingest.kafka.range_reader``).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from calving.commit.errors import ConfigError, Transient
from calving.ingest.kafka.client_log import with_client_log
from calving.ingest.kafka.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    Offsets,
    OffsetsJson,
    TopicPartition,
    admit,
    group_small_ranges,
    offsets_from_json,
    offsets_to_json,
    report_vanished_partitions,
    resolve_read_start,
    split_ranges,
)
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.kafka.range_reader import RangeReader

SOURCE_NAME = "calving-kafka"

_log = logging.getLogger("calving.ingest.kafka")
_T = TypeVar("_T")


def kafka_schema(include_headers: bool = False) -> StructType:
    """The columns of Spark's Kafka source, all nullable as there."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


#: The rows of ``calving.emit = ranges``: one per planned offset range ``[start, end)``.
RANGE_COLUMNS = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("start", LongType(), False),
        StructField("end", LongType(), False),
    ]
)
RANGE_ARROW_SCHEMA = to_arrow_schema(RANGE_COLUMNS)


def source_schema(options: KafkaSourceOptions) -> StructType:
    """The DataFrame columns the source yields with ``options``."""
    return RANGE_COLUMNS if options.emit == "ranges" else kafka_schema(options.include_headers)


@functools.cache
def kafka_arrow_schema(include_headers: bool = False) -> pa.Schema:
    """The Arrow schema ``read()`` yields: exactly what PySpark checks batches against
    (timestamps as ``timestamp[us, tz=UTC]`` whatever the session time zone). Made once
    per process (a many-table task asks for it per table: 0.2 ms each time)."""
    return to_arrow_schema(kafka_schema(include_headers), timezone="UTC")


class KafkaUnavailableError(Transient):
    """The broker did not answer a metadata or offset request within
    ``calving.connectTimeoutMs`` (after up to ``fetchOffset.numRetries`` retries)."""


class KafkaInputPartition(InputPartition):
    """One Spark task: an ``OffsetRange`` (records), or with ``calving.emit = ranges``
    one or more (their range rows: ``calving.rangeTasks``, ``calving.taskRecords``)."""

    def __init__(self, *offset_ranges: OffsetRange) -> None:
        super().__init__(offset_ranges)
        self.ranges = offset_ranges

    @property
    def range(self) -> OffsetRange:
        (only,) = self.ranges
        return only


class BrokerView:
    """Driver-side questions to the broker: which partitions exist, their offsets.

    Every question is bounded by ``connect_timeout_s`` in all (retries included), so an
    unreachable cluster or a refused login ends in one ``KafkaUnavailableError`` naming
    the bootstrap servers, with librdkafka's own lines at DEBUG only."""

    def __init__(self, options: KafkaSourceOptions) -> None:
        from confluent_kafka.admin import AdminClient

        self._options = options
        self._admin = AdminClient(with_client_log(options.client_config))

    def partitions(self) -> list[TopicPartition]:
        """The subscribed topic-partitions as they are now (patterns re-evaluated)."""
        return self._options.subscription.select(self.topic_partition_counts())

    def topic_partition_counts(self) -> dict[str, int]:
        """Every topic the broker has, with its partition count."""

        def fetch(timeout: float) -> dict[str, int]:
            metadata = self._admin.list_topics(timeout=timeout)
            return {
                name: len(topic.partitions)
                for name, topic in metadata.topics.items()
                if topic.error is None and topic.partitions
            }

        return self._retry("list topics", fetch)

    def earliest(self, tps: Iterable[TopicPartition]) -> Offsets:
        return self._list_offsets(tps, latest=False)

    def latest(self, tps: Iterable[TopicPartition]) -> Offsets:
        return self._list_offsets(tps, latest=True)

    def _list_offsets(self, tps: Iterable[TopicPartition], latest: bool) -> Offsets:
        from confluent_kafka import IsolationLevel
        from confluent_kafka import TopicPartition as KafkaTopicPartition
        from confluent_kafka.admin import OffsetSpec

        wanted = sorted(set(tps))
        if not wanted:
            return {}
        spec = OffsetSpec.latest() if latest else OffsetSpec.earliest()
        isolation = (
            IsolationLevel.READ_COMMITTED
            if self._options.read_committed
            else IsolationLevel.READ_UNCOMMITTED
        )

        def fetch(timeout: float) -> Offsets:
            futures = self._admin.list_offsets(
                {KafkaTopicPartition(t, p): spec for t, p in wanted},
                isolation_level=isolation,
                request_timeout=timeout,
            )
            return {
                (tp.topic, tp.partition): int(future.result(timeout=timeout + 1).offset)
                for tp, future in futures.items()
            }

        return self._retry("list " + ("latest" if latest else "earliest") + " offsets", fetch)

    def _retry(self, what: str, call: Callable[[float], _T]) -> _T:
        opts = self._options
        attempts = opts.fetch_offset_retries + 1
        began = time.monotonic()
        deadline = began + opts.connect_timeout_s
        for attempt in range(1, attempts + 1):
            remaining = deadline - time.monotonic()
            try:
                return call(max(0.1, min(opts.poll_timeout_s, remaining)))
            except Exception as error:  # the client raises KafkaException and friends
                last = attempt == attempts or deadline - time.monotonic() <= 0
                _log.debug("%s at %s, attempt %d: %s", what, opts.bootstrap_servers, attempt, error)
                if last:
                    raise KafkaUnavailableError(
                        f"{what} at {opts.bootstrap_servers}: no answer after {attempt} "
                        f"attempt(s) in {time.monotonic() - began:.1f}s "
                        f"({_kafka_reason(error)}); "
                        "check source.bootstrap_servers, the network and the [source.kafka] "
                        "security settings (source.connect_timeout_ms bounds the wait)"
                    ) from error
                time.sleep(min(opts.fetch_offset_retry_interval_s, max(0.0, remaining)))
        raise AssertionError("unreachable")


def _kafka_reason(error: BaseException) -> str:
    """librdkafka's reason without the ``KafkaError{code=...}`` wrapping."""
    inner = error.args[0] if error.args else error
    text = getattr(inner, "str", None)
    reason = text() if callable(text) else str(inner)
    return reason or type(error).__name__


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans offset ranges on the driver and reads them on executors.

    Offsets are ``{"topic": {"partition": next_offset}}``; partitions that appear later
    (new topics matching the pattern, added partitions) start at their earliest offset.
    """

    def __init__(self, options: KafkaSourceOptions) -> None:
        self._options = options
        self._arrow_schema = kafka_arrow_schema(options.include_headers)
        self._view: BrokerView | None = None
        self._available_now_target: Offsets | None = None
        self._last_latest: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        # The reader is shipped to executors for read(): the admin client stays behind.
        state = dict(self.__dict__)
        state["_view"] = None
        return state

    @property
    def view(self) -> BrokerView:
        if self._view is None:
            self._view = BrokerView(self._options)
        return self._view

    # ------------------------------------------------------------------ driver

    def initialOffset(self) -> OffsetsJson:
        tps = self.view.partitions()
        starting = self._options.starting_offsets
        if starting == "earliest":
            offsets = self.view.earliest(tps)
        elif starting == "latest":
            offsets = self.view.latest(tps)
        else:
            offsets = self._resolve_specific(starting, tps)
        for tp, next_uncommitted in self._options.starting_ledger.items():
            if tp in offsets and next_uncommitted > offsets[tp]:
                offsets[tp] = next_uncommitted
        return offsets_to_json(offsets)

    def _resolve_specific(self, specific: Offsets, tps: list[TopicPartition]) -> Offsets:
        missing = sorted(set(tps) - set(specific))
        unknown = sorted(set(specific) - set(tps))
        if missing or unknown:
            raise ConfigError(
                "startingOffsets must name every subscribed topic-partition and no other "
                f"(missing: {_names(missing) or 'none'}; not subscribed or not existing: "
                f"{_names(unknown) or 'none'}); use -2 for earliest, -1 for latest"
            )
        earliest = self.view.earliest(tp for tp, o in specific.items() if o == EARLIEST)
        latest = self.view.latest(tp for tp, o in specific.items() if o == LATEST)
        return {tp: earliest.get(tp, latest.get(tp, o)) for tp, o in specific.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self._options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_target = self.view.latest(self.view.partitions())

    def latestOffset(self, start: OffsetsJson, limit: ReadLimit) -> OffsetsJson:
        begin = offsets_from_json(start)
        tps = self.view.partitions()
        target = self._available_now_target
        if target is not None:  # AvailableNow: nothing that appeared after the start
            tps = [tp for tp in tps if tp in target or tp in begin]
        latest = self.view.latest(tps)
        earliest = self.view.earliest(tps)
        if target is not None:
            for tp in latest:
                latest[tp] = min(latest[tp], target.get(tp, begin.get(tp, latest[tp])))
        self._last_latest = dict(latest)

        read_from: Offsets = {}
        reset: Offsets = {}
        ledger = self._options.starting_ledger
        for tp in tps:
            first = begin.get(tp, earliest[tp])
            if latest[tp] < first:
                reset[tp] = latest[tp]  # offsets went back: partitions() reports it
                continue
            first = max(first, ledger.get(tp, first), earliest[tp])
            read_from[tp] = min(first, latest[tp])
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = admit(read_from, {tp: latest[tp] for tp in read_from}, max_rows)
        end.update(reset)
        if end == begin:
            return start
        return offsets_to_json(end)

    def reportLatestOffset(self) -> OffsetsJson | None:
        return offsets_to_json(self._last_latest) if self._last_latest is not None else None

    def partitions(self, start: OffsetsJson, end: OffsetsJson) -> Sequence[InputPartition]:
        begin, until = offsets_from_json(start), offsets_from_json(end)
        report_vanished_partitions(set(begin) - set(until), self._options.fail_on_data_loss)
        moved = [tp for tp, e in until.items() if begin.get(tp) != e]
        earliest = self.view.earliest(moved)
        ranges = []
        for tp in moved:
            first = resolve_read_start(
                tp,
                start=begin.get(tp, earliest[tp]),
                end=until[tp],
                earliest=earliest[tp],
                ledger=self._options.starting_ledger.get(tp),
                fail_on_data_loss=self._options.fail_on_data_loss,
            )
            if first < until[tp]:
                ranges.append(OffsetRange(tp[0], tp[1], first, until[tp]))
        split = self._options.min_partitions if self._options.split_ranges else None
        planned = split_ranges(ranges, split)
        if self._options.emit != "ranges":
            return [KafkaInputPartition(r) for r in planned]
        tasks = self._options.range_tasks
        if tasks is not None:
            dealt = [planned[i::tasks] for i in range(min(tasks, len(planned)))]
            return [KafkaInputPartition(*group) for group in dealt]
        if self._options.min_partitions is not None:  # asks for tasks: keep them all
            return [KafkaInputPartition(r) for r in planned]
        grouped = group_small_ranges(planned, self._options.task_records)
        return [KafkaInputPartition(*group) for group in grouped]

    def commit(self, end: OffsetsJson) -> None:
        """Nothing to do: offsets live in Spark's checkpoint and in the table's ledger."""

    def stop(self) -> None:
        self._view = None

    # ------------------------------------------------------------------ executors

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaInputPartition)
        if self._options.emit == "ranges":
            rows = [vars(r) for r in partition.ranges]
            return iter([pa.RecordBatch.from_pylist(rows, schema=RANGE_ARROW_SCHEMA)])
        return _read_kept(self._options, partition.range, self._arrow_schema)


class KafkaSource(DataSource):
    """Register with ``spark.dataSource.register(KafkaSource)``; format ``calving-kafka``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        # Parsing here makes a bad option fail at load(), before the query starts.
        return source_schema(KafkaSourceOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(KafkaSourceOptions.parse(self.options))


def _read_kept(
    options: KafkaSourceOptions, offset_range: OffsetRange, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """The range's records, read on the consumer the Python worker's previous task left
    (``RangeReader``); closed instead of kept when the read fails."""
    with RangeReader(options) as reader:
        yield from reader.read(offset_range, schema)


def _names(tps: Sequence[TopicPartition]) -> str:
    return ", ".join(f"{t}/{p}" for t, p in tps)
