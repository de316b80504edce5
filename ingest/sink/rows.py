"""``foreachBatch`` on DataFrames of already-decoded rows, exactly once per Spark batch id.

The rows' columns are the table's columns (by name), plus an optional change-operation
column (``upsert``/``u``/``c``/``r``/``insert``/``update``, ``delete``/``d``; null is an
upsert) and an optional ordering column. Keyed tables reuse the Kafka path's two stages:
stage 1 here turns rows into the executor's stage rows (``_op``, and ``_partition`` /
``_offset`` as the order), stage 2 is ``collapse_and_write`` (last event per key,
upserts written, deleted keys reported) and the coordinator turns every touched key's
earlier version into a deletion vector.

Exactly once: the writer's ledger (``calving.ledger.<writer_id>``) holds a pseudo
topic-partition ``<spark-batch>/0`` whose "next offset" is the next Spark batch id; a
batch claims ``[batch_id, batch_id + 1)`` in the same snapshot as its rows. The name
cannot be a Kafka topic (``<`` is not allowed in topic names), so it never collides.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from calving.commit.errors import ConfigError, SchemaError, StaleWriterError
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table.ledger import OffsetRange, TopicPartition
from calving.ingest.decode.batch import META_COLUMNS, OP_DELETE, OP_UPSERT
from calving.ingest.sink.coordinator import ParsedMessages, parse_messages
from calving.ingest.sink.executor import (
    MESSAGE_SCHEMA,
    Batches,
    TaskFunction,
    TaskPlan,
    collapse_and_write,
    conform,
    keyed_stage_schema,
    meta_rows,
)
from calving.ingest.sink.foreach_batch import CalvingSink, is_range_frame
from calving.ingest.sink.messages import DataFileWritten, Message, RowsSeen, collected, encode
from calving.ingest.sink.path_choice import SourcePlan
from calving.ingest.sink.spark_tasks import map_in_arrow
from calving.ingest.sink.spark_types import spark_schema
from calving.ingest.write.arrow_schema import schema_to_arrow

log = logging.getLogger("calving.sink.rows")

#: The ledger's pseudo topic-partition for Spark batch ids (not a legal Kafka topic).
BATCH_TOPIC = "<spark-batch>"
BATCH_PARTITION: TopicPartition = (BATCH_TOPIC, 0)

UPSERT_VALUES = frozenset({"upsert", "u", "c", "r", "insert", "update", "i"})
DELETE_VALUES = frozenset({"delete", "d"})
#: The Kafka source's columns (calving's ``calving-kafka`` and Spark's JVM ``kafka``).
KAFKA_COLUMNS = frozenset({"key", "value", "topic", "partition", "offset"})
INPUTS = ("auto", "kafka", "rows")


@dataclass(frozen=True)
class RowsOptions:
    """How decoded-row DataFrames map onto the table."""

    #: Column holding the change operation; None: every row is an upsert (or an append).
    op_column: str | None = None
    #: Column that orders a key's events within a batch (strictly increasing, castable
    #: to a 64-bit integer: numbers, timestamps); None: input row order per partition.
    order_column: str | None = None
    #: "kafka", "rows", or "auto" (Kafka columns present -> the Kafka path).
    input: str = "auto"

    def __post_init__(self) -> None:
        if self.input not in INPUTS:
            raise ConfigError(f"input: expected one of {', '.join(INPUTS)}, got {self.input!r}")
        if self.op_column is not None and self.op_column == self.order_column:
            raise ConfigError(f"op_column and order_column are both {self.op_column!r}")


@dataclass
class RowsParsed(ParsedMessages):
    """Commit messages of a rows batch: ``records`` counts input rows (the pseudo offset
    range always spans one batch id)."""

    @property
    def records(self) -> int:
        return self.rows_seen


class RowsSink(CalvingSink):
    """A ``CalvingSink`` that also takes DataFrames of decoded rows (see the module doc).
    Kafka-column DataFrames go through the Kafka path unchanged."""

    def __init__(self, *args: Any, rows: RowsOptions | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rows = rows or RowsOptions()
        #: The Kafka source this sink was configured with (``calving.sink(source=...)``
        #: or a config's ``[source]``), read by ``calving.kafka_stream``; None without one.
        self.source_plan: SourcePlan | None = None
        if self.rows.op_column and not self.table.metadata.schema.identifier_field_ids:
            raise ConfigError(
                f"op_column: table {self.table.name} has no identifier fields; deletes and "
                "upserts need a primary key (table identifier_fields)"
            )

    def close(self) -> None:
        """Save the primary-key index; stop the metrics endpoint if one is up."""
        super().close()
        if self.metrics is not None:
            self.metrics.close()

    def last_batch_id(self) -> int | None:
        """The last Spark batch id this writer committed through the rows path, if any
        (re-read from the table)."""
        return last_committed_batch(self.coordinator.ledger())

    def is_kafka_input(self, columns: Sequence[str]) -> bool:
        if self.rows.input != "auto":
            return self.rows.input == "kafka"
        table_columns = {f.name for f in self.table.metadata.schema.fields}
        return KAFKA_COLUMNS <= set(columns) and not KAFKA_COLUMNS & table_columns

    def _parse_batch(self, df: Any, batch_id: int) -> ParsedMessages:
        if is_range_frame(df) or self.is_kafka_input(df.columns):
            return super()._parse_batch(df, batch_id)
        return self._write_rows(df, batch_id)

    # ------------------------------------------------------------ rows path

    def _write_rows(self, df: Any, batch_id: int) -> ParsedMessages:
        claim = {BATCH_PARTITION: OffsetRange(batch_id, batch_id + 1)}
        next_batch = self.coordinator.ledger().get(BATCH_PARTITION)  # refreshes the table
        if next_batch is not None and batch_id < next_batch:
            if batch_id < next_batch - 1:
                raise StaleWriterError(
                    f"writer {self.writer_id!r}: Spark batch id {batch_id} is below the last "
                    f"committed batch {next_batch - 1}; Spark replays only its last batch, so "
                    "the checkpoint was lost or another query uses this writer id. Use a new "
                    "writer id with a new checkpoint"
                )
            log.info("batch %d: already committed by writer %s", batch_id, self.writer_id)
            return RowsParsed(ranges=claim)  # the ledger judges it a replay: Skipped
        metadata = self.table.metadata
        selected = check_columns(df.schema, metadata, self.rows, self.table.name)
        plan = self._plan(batch_id)
        frame = df.select(*[f"`{c}`" for c in selected])
        messages_type = spark_schema(MESSAGE_SCHEMA)
        if metadata.schema.identifier_field_ids:
            stage = keyed_stage_schema(metadata)
            staged = map_in_arrow(frame, rows_for_keyed(self.rows, stage), spark_schema(stage))
            keys = [metadata.schema.column_name(i) for i in metadata.schema.identifier_field_ids]
            n = self.key_partitions or int(
                df.sparkSession.conf.get("spark.sql.shuffle.partitions", "2")
            )
            out = map_in_arrow(
                staged.repartition(n, *keys), collapse_and_write(plan), messages_type
            )
        else:
            out = map_in_arrow(frame, rows_append(plan, self.rows), messages_type)
        parsed = parse_messages(collected(out))
        if parsed.rows_seen == 0:
            return RowsParsed()  # nothing to commit, nothing claimed
        return RowsParsed(
            files=parsed.files,
            delete_keys=parsed.delete_keys,
            renewed_keys=parsed.renewed_keys,
            ranges=claim,
            rows_seen=parsed.rows_seen,
        )


# ---------------------------------------------------------------- column check


_WIDENS = {
    "tinyint": ("smallint", "int", "bigint"),
    "smallint": ("int", "bigint"),
    "int": ("bigint",),
    "float": ("double",),
}


def check_columns(
    spark_schema_: Any, metadata: TableMetadata, options: RowsOptions, table_name: str
) -> list[str]:
    """The DataFrame's columns to read, checked against the table by name and type;
    a ``SchemaError`` names the first offending column."""
    from pyspark.sql.types import StringType

    wanted = {f.name: f for f in spark_schema(schema_to_arrow(metadata.schema)).fields}
    required = {f.name for f in metadata.schema.fields if f.required}
    have = {f.name: f for f in spark_schema_.fields}
    extras = {c for c in (options.op_column, options.order_column) if c is not None}
    for name in sorted(extras):
        if name not in have:
            raise SchemaError(f"column {name!r}: named as op/order column but not in the batch")
    op = options.op_column
    if op is not None and not isinstance(have[op].dataType, StringType):
        raise SchemaError(
            f"column {op!r}: the change-operation column must be a string, "
            f"got {have[op].dataType.simpleString()}"
        )
    for name, f in have.items():
        if name in extras:
            continue
        if name not in wanted:
            raise SchemaError(
                f"column {name!r}: not a column of table {table_name} "
                f"(columns: {', '.join(wanted)})"
            )
        got, expect = f.dataType.simpleString(), wanted[name].dataType.simpleString()
        if got != expect and expect not in _WIDENS.get(got, ()):
            raise SchemaError(
                f"column {name!r}: type {got} does not match table {table_name}'s {expect}; "
                f"cast it (df.withColumn({name!r}, col({name!r}).cast({expect!r})))"
            )
    missing = sorted(required - set(have))
    if missing:
        raise SchemaError(
            f"column {missing[0]!r}: required by table {table_name}, not in the batch"
        )
    return [n for n in wanted if n in have] + [n for n in (op, options.order_column) if n]


# ---------------------------------------------------------------- executor stages


def _op_codes(column: pa.ChunkedArray | pa.Array, name: str) -> pa.Array:
    values = pc.utf8_lower(pc.utf8_trim_whitespace(column))
    upsert = pc.or_kleene(pc.is_null(values), pc.is_in(values, pa.array(sorted(UPSERT_VALUES))))
    delete = pc.is_in(values, pa.array(sorted(DELETE_VALUES)))
    bad = pc.invert(pc.or_(upsert, delete))
    if pc.any(bad).as_py():
        sample = pc.filter(column, bad)[0].as_py()
        raise SchemaError(
            f"column {name!r}: unknown change operation {sample!r} (expected one of "
            f"{', '.join(sorted(UPSERT_VALUES | DELETE_VALUES))}; null is an upsert)"
        )
    return pc.if_else(delete, pa.scalar(OP_DELETE, pa.int8()), pa.scalar(OP_UPSERT, pa.int8()))


def rows_for_keyed(options: RowsOptions, stage_schema: pa.Schema) -> TaskFunction:
    """Keyed tables, stage 1: rows -> stage rows. ``_partition``/``_offset`` carry the
    order stage 2 keeps the last event by: (0, order column), or (this input partition,
    row number in it)."""

    def run(batches: Batches) -> Batches:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = 0 if options.order_column or context is None else context.partitionId()
        seen = 0
        for rb in batches:
            t = pa.Table.from_batches([rb])
            n = t.num_rows
            if n == 0:
                continue
            if options.order_column:
                order = t.column(options.order_column).cast(pa.int64())
            else:
                order = pa.array(range(seen, seen + n), pa.int64())
            ops = (
                _op_codes(t.column(options.op_column), options.op_column)
                if options.op_column
                else pa.nulls(n, pa.int8()).fill_null(OP_UPSERT)
            )
            meta = {
                "_op": ops,
                "_partition": pa.array([partition] * n, pa.int32()),
                "_offset": order,
                "_topic": pa.array([BATCH_TOPIC] * n, pa.string()),
            }
            t = t.drop_columns([c for c in (options.op_column, options.order_column) if c])
            for name in META_COLUMNS:
                t = t.append_column(name, meta[name])
            seen += n
            yield from conform(t, stage_schema).to_batches()
        yield meta_rows([RowsSeen(seen)], stage_schema)

    return run


def rows_append(plan: TaskPlan, options: RowsOptions) -> TaskFunction:
    """Tables without identifier fields: write the rows as they are."""

    def run(batches: Batches) -> Batches:
        io = plan.file_io()
        writer = plan.writer(io)
        columns = schema_to_arrow(plan.metadata().schema)  # absent optional columns: nulls
        seen = 0
        for rb in batches:
            t = pa.Table.from_batches([rb])
            seen += t.num_rows
            writer.write(conform(t, columns))
        messages: list[Message] = [DataFileWritten(w.data_file) for w in writer.close()]
        yield encode([*messages, RowsSeen(seen)])

    return run


def last_committed_batch(ledger: Mapping[TopicPartition, int]) -> int | None:
    """The last Spark batch id the rows path committed, from a writer's ledger."""
    nxt = ledger.get(BATCH_PARTITION)
    return None if nxt is None else nxt - 1


__all__ = [
    "BATCH_PARTITION",
    "BATCH_TOPIC",
    "KAFKA_COLUMNS",
    "RowsOptions",
    "RowsParsed",
    "RowsSink",
    "check_columns",
    "last_committed_batch",
    "rows_append",
    "rows_for_keyed",
]
