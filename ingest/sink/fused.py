"""The fused path: a Python task of whole planned Kafka ranges (small ones share a task,
``calving.taskRecords``) reads their records with confluent-kafka, decodes them,
collapses them per key (keyed tables) and writes the Parquet files, returning only
commit messages to the driver.

Its input is the ``calving.emit = ranges`` DataFrame of the ``calving-kafka`` source: one
small row per offset range, planned on the driver exactly as the records source plans
them (admission control, the table's ledger, ``failOnDataLoss``). Record bytes never
enter the JVM. A keyed table may take this path only when every key lives in one task's
ranges (one Kafka partition, ranges not split); ``foreach_batch`` checks that on every
batch and falls back to the shuffle path (``read_and_decode_for_keyed``, then a
repartition by key) when a key turns up in two tasks.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from calving.commit.index.shard_lookup import tidy_in_background
from calving.ingest.kafka.offsets import OffsetRange
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.kafka.range_reader import RangeReader
from calving.ingest.kafka.source import kafka_arrow_schema
from calving.ingest.sink.executor import (
    Batches,
    Decoding,
    TaskFunction,
    TaskPlan,
    conform,
    decode_and_write_append,
    decode_for_keyed,
    keyed_stage_schema,
    read_ahead,
    shard_steps,
    write_last_events,
)
from calving.ingest.sink.messages import Message, encode


def _records(options: KafkaSourceOptions, ranges: Batches) -> Iterator[pa.RecordBatch]:
    """The Kafka records (Spark's Kafka columns) of every range row in ``ranges``, read
    with one consumer for the whole task (kept for the worker's next task), the small
    ranges fetched together first."""
    schema = kafka_arrow_schema(options.include_headers)
    spans = [
        OffsetRange(r["topic"], int(r["partition"]), int(r["start"]), int(r["end"]))
        for rb in ranges
        for r in rb.to_pylist()
    ]
    with RangeReader(options) as reader:
        reader.prefetch(spans)
        for span in spans:
            yield from reader.read(span, schema)


def reading(options: KafkaSourceOptions, task: TaskFunction) -> TaskFunction:
    """``task`` (a function of Kafka record batches) run on the records of range rows."""

    def run(ranges: Batches) -> Batches:
        return task(_records(options, ranges))

    return run


def fused_append(plan: TaskPlan, options: KafkaSourceOptions) -> TaskFunction:
    """Append tables: read, decode and write in one task."""
    return reading(options, decode_and_write_append(plan))


def fused_keyed(plan: TaskPlan, options: KafkaSourceOptions) -> TaskFunction:
    """Keyed tables whose keys each live in one task: read, decode, keep each key's
    last event in Kafka order and write, in one task."""

    def run(ranges: Batches) -> Batches:
        read_ahead(plan)  # while the records come
        io = plan.file_io()
        decoding = Decoding(plan)
        stage = keyed_stage_schema(plan.metadata())
        stage = stage.remove(stage.get_field_index("_meta"))
        parts = []
        for rb in _records(options, ranges):
            rows = decoding.decode(rb)
            if rows is not None:
                parts.append(conform(rows, stage))
        messages: list[Message] = []
        if parts:
            split = _as_if_a_task_per_partition(plan, pa.concat_tables(parts))
            for data in split:
                messages += write_last_events(plan, data)
            if len(split) == 1:  # else a key is in two parts: the driver redoes the batch
                messages += shard_steps(plan, messages)
        yield encode(messages + decoding.finish(io))
        tidy_in_background()  # the task's output is sent: the worker waits

    return run


def _as_if_a_task_per_partition(plan: TaskPlan, data: pa.Table) -> list[pa.Table]:
    """A task may hold the small ranges of several Kafka partitions
    (``calving.taskRecords``). Their keys are disjoint when the topic is keyed by the
    row's key, and then they are written together. A key in two of them has no known
    order between its events: each partition's rows are written apart, as separate
    tasks would, so that the driver sees the key written twice and redoes the batch
    on the shuffle path (``keys_in_two_tasks``)."""
    where = ["_topic", "_partition"]
    sources = data.select(where).group_by(where, use_threads=False).aggregate([])
    if sources.num_rows < 2:
        return [data]
    schema = plan.metadata().schema
    keys = [schema.column_name(i) for i in schema.identifier_field_ids]
    seen = data.select([*keys, *where]).group_by([*keys, *where], use_threads=False).aggregate([])
    counts = seen.group_by(keys, use_threads=False).aggregate([([], "count_all")])
    if pc.max(counts.column("count_all")).as_py() < 2:
        return [data]
    return [
        data.filter(
            pc.and_(
                pc.equal(data.column("_topic"), source["_topic"]),
                pc.equal(data.column("_partition"), source["_partition"]),
            )
        )
        for source in sources.to_pylist()
    ]


def read_and_decode_for_keyed(
    plan: TaskPlan, options: KafkaSourceOptions, stage_schema: pa.Schema
) -> TaskFunction:
    """The shuffle path's first stage from range rows: read and decode in one task,
    rows shaped for the repartition by key (``decode_for_keyed``)."""
    return reading(options, decode_for_keyed(plan, stage_schema))
