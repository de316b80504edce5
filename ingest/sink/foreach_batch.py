"""``df.writeStream.foreachBatch(sink)``: the Spark sink with the coordinator in the
driver process.

A ``DataSourceStreamWriter.commit`` gets a fresh object every batch, so the stateful
coordinator (table handle, primary-key index) lives here, in the driver, and the
executors write through ``mapInArrow``. Works on any DataFrame with the Kafka source
columns (calving's own source or the JVM Kafka connector's).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable

import pyarrow as pa

from commit.spec.metadata import serialize_metadata
from commit.table.ledger import OffsetRange, TopicPartition
from commit.table.table import Table
from ingest.sink.coordinator import BatchStats, Coordinator
from ingest.sink.executor import (
    MESSAGE_SCHEMA,
    TaskPlan,
    collapse_and_write,
    decode_and_write_append,
    decode_for_keyed,
    keyed_stage_schema,
)

log = logging.getLogger("calving.sink")


class CalvingSink:
    """Callable for ``foreachBatch``: one Iceberg snapshot per microbatch, exactly once."""

    def __init__(self, table: Table, decoder: Any, writer_id: str, *,
                 index: Any | None = None, dead_letter_table: Table | None = None,
                 key_partitions: int | None = None,
                 on_batch: Callable[[BatchStats], None] | None = None) -> None:
        self.coordinator = Coordinator(table, writer_id, index=index,
                                       dead_letter_table=dead_letter_table)
        self.decoder = decoder
        self.writer_id = writer_id
        self.key_partitions = key_partitions
        self.on_batch = on_batch

    @property
    def table(self) -> Table:
        return self.coordinator.table

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark.sql.pandas.types import from_arrow_schema

        started = time.monotonic()
        ledger = self.coordinator.ledger()  # refreshes the table
        table = self.table
        dlq = self.coordinator.dead_letter_table
        plan = TaskPlan(
            metadata_json=serialize_metadata(table.metadata),
            metadata_location=table.metadata_location,
            decoder=self.decoder,
            ledger=ledger,
            file_prefix=f"{self.writer_id}-b{batch_id}",
            dead_letter_metadata_json=serialize_metadata(dlq.metadata) if dlq else None,
            dead_letter_location=dlq.metadata_location if dlq else None,
        )
        message_spark = from_arrow_schema(MESSAGE_SCHEMA)
        if table.metadata.schema.identifier_field_ids:
            stage = keyed_stage_schema(table.metadata.schema)
            decoded = df.mapInArrow(decode_for_keyed(plan, stage), from_arrow_schema(stage))
            keys = list(table.metadata.schema.identifier_field_names)
            n = self.key_partitions or int(df.sparkSession.conf.get(
                "spark.sql.shuffle.partitions", "2"))
            messages_df = decoded.repartition(n, *keys).mapInArrow(
                collapse_and_write(plan), message_spark)
        else:
            messages_df = df.mapInArrow(decode_and_write_append(plan), message_spark)
        rows = messages_df.collect()
        messages = pa.Table.from_pylist([r.asDict() for r in rows], schema=MESSAGE_SCHEMA)
        ranges = _ranges(messages)
        if not ranges:
            log.info("batch %d: nothing beyond the ledger", batch_id)
            return
        stats = self.coordinator.commit_batch(batch_id, messages, ranges)
        log.info("batch %d: %s in %.2fs (%d files, %d rows, %d deletes, %d dead letters)",
                 batch_id, stats.outcome, time.monotonic() - started, stats.added_files,
                 stats.added_rows, stats.deleted_rows, stats.dead_letters)
        if self.on_batch:
            self.on_batch(stats)


def _ranges(messages: pa.Table) -> dict[TopicPartition, OffsetRange]:
    out: dict[TopicPartition, OffsetRange] = {}
    for kind, payload in zip(messages.column("kind").to_pylist(),
                             messages.column("payload").to_pylist()):
        if kind != "range":
            continue
        topic, partition, start, end = json.loads(payload)
        tp = (topic, int(partition))
        if tp in out:
            start = min(start, out[tp].start)
            end = max(end, out[tp].end)
        out[tp] = OffsetRange(int(start), int(end))
    return out
