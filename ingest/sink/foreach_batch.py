"""``df.writeStream.foreachBatch(sink)``: the Spark sink with the coordinator in the
driver process.

A ``DataSourceStreamWriter.commit`` gets a fresh object every batch, so the stateful
coordinator (table handle, primary-key index) lives here, in the driver, and the
executors write through ``mapInArrow``. Works on any DataFrame with the Kafka source
columns (calving's own ``calving-kafka`` source or the JVM Kafka connector's).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from calving.commit.errors import CalvingError
from calving.commit.spec.metadata import serialize_metadata
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import primitive_from_string
from calving.commit.table.actions.update_schema import AddColumn, UpdateSchema
from calving.commit.table.table import Table
from calving.ingest.sink.coordinator import BatchStats, Coordinator, ParsedMessages, parse_messages
from calving.ingest.sink.dead_letters import DEFAULT_TOPIC_MAX_BYTES, DeadLetterTarget
from calving.ingest.sink.executor import (
    MESSAGE_SCHEMA,
    TaskPlan,
    collapse_and_write,
    decode_and_write_append,
    decode_for_keyed,
    keyed_stage_schema,
)
from calving.ingest.sink.messages import Coordinates
from calving.ingest.sink.spark_types import spark_schema

if TYPE_CHECKING:
    from typing_extensions import Self

    from calving.ingest.metrics.batch import SinkMetrics

log = logging.getLogger("calving.sink")

DecoderFactory = Callable[[Schema], Any]

# Unknown JSON fields whose values were all of one of these kinds become new optional
# columns; nested, mixed or null-only fields are left out (and logged).
_EVOLVABLE = {
    frozenset({"long"}): "long",
    frozenset({"double"}): "double",
    frozenset({"long", "double"}): "double",
    frozenset({"string"}): "string",
    frozenset({"boolean"}): "boolean",
}


class CalvingSink:
    """Callable for ``foreachBatch``: one Iceberg snapshot per microbatch, exactly once.

    ``make_decoder(schema)`` builds the (picklable) record decoder for the table's
    current schema; it is called again after the schema evolves. Dead letters go to
    ``dead_letter_table`` and/or ``dead_letter_topic``; with neither, the first one
    stops the stream with an error naming its coordinates. A dead letter's copy on the
    topic is cut to ``dead_letter_max_bytes`` (see ``DeadLetterTarget``); the table keeps
    it whole.
    """

    def __init__(
        self,
        table: Table,
        make_decoder: DecoderFactory,
        writer_id: str,
        *,
        dead_letter_table: Table | None = None,
        dead_letter_topic: str | None = None,
        kafka_config: Mapping[str, str] | None = None,
        key_partitions: int | None = None,
        index_save_every: int = 20,
        evolve_schema: bool = True,
        dead_letter_max_bytes: int = DEFAULT_TOPIC_MAX_BYTES,
        on_batch: Callable[[BatchStats], None] | None = None,
        metrics: SinkMetrics | None = None,
    ) -> None:
        self.coordinator = Coordinator(
            table,
            writer_id,
            dead_letter_table=dead_letter_table,
            index_save_every=index_save_every,
        )
        self.make_decoder = make_decoder
        self.writer_id = writer_id
        self.dead_letter_topic = dead_letter_topic
        self.kafka_config = dict(kafka_config or {})
        if dead_letter_topic and "bootstrap.servers" not in self.kafka_config:
            raise CalvingError("a dead-letter topic needs kafka_config['bootstrap.servers']")
        self.key_partitions = key_partitions
        self.dead_letter_max_bytes = dead_letter_max_bytes
        self.evolve_schema = evolve_schema
        self.on_batch = on_batch
        self.metrics = metrics  # calving.ingest.metrics: endpoint figures and a JSON line per batch
        self._decoder: tuple[int, Any] | None = None

    @property
    def table(self) -> Table:
        return self.coordinator.table

    def decoder(self) -> Any:
        schema = self.table.metadata.schema
        if self._decoder is None or self._decoder[0] != schema.schema_id:
            self._decoder = (schema.schema_id, self.make_decoder(schema))
        return self._decoder[1]

    def close(self) -> None:
        """Save the primary-key index with the table (a restart then skips the rescan)."""
        self.coordinator.save_index()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __call__(self, df: Any, batch_id: int) -> None:
        started = time.monotonic()
        parsed = self._parse_batch(df, batch_id)
        commit_started = time.monotonic()
        try:
            stats = self.coordinator.commit_batch(batch_id, parsed)
        except CalvingError as failure:
            if self.metrics is not None:
                self.metrics.batch_failed(self, batch_id, failure, started)
            raise
        if self.metrics is not None:
            self.metrics.batch_done(self, parsed, stats, started, commit_started)
        log.info(
            "batch %d: %s in %.2fs (%d records, %d files, %d rows, %d deletes, %d dead letters)",
            batch_id,
            stats.outcome,
            time.monotonic() - started,
            stats.records,
            stats.added_files,
            stats.added_rows,
            stats.deleted_rows,
            stats.dead_letters,
        )
        if self.on_batch:
            self.on_batch(stats)

    # ------------------------------------------------------------ internals

    def _parse_batch(self, df: Any, batch_id: int) -> ParsedMessages:
        """Write the batch's data files (executors); their commit messages, parsed."""
        parsed = self._write(df, batch_id)
        if parsed.unknown_fields and self.evolve_schema and self._evolve(parsed.unknown_fields):
            _forget(self.table, parsed)
            # Decode again, now into the new columns; the dead letters the first pass
            # sent to the topic are not sent twice.
            parsed = self._write(df, batch_id, frozenset(parsed.dead_letters_sent))
        return parsed

    def _plan(self, batch_id: int, already_sent: frozenset[Coordinates] = frozenset()) -> TaskPlan:
        ledger = self.coordinator.ledger()  # refreshes the table
        table = self.table
        dlq = self.coordinator.dead_letter_table
        if dlq is not None:
            dlq.refresh()
        return TaskPlan(
            metadata_json=serialize_metadata(table.metadata),
            metadata_location=table.metadata_location,
            decoder=self.decoder(),
            ledger=ledger,
            file_prefix=f"{self.writer_id}-b{batch_id}",
            io_properties=table.io.properties,
            dead_letters=DeadLetterTarget(
                table_metadata_json=serialize_metadata(dlq.metadata) if dlq else None,
                table_metadata_location=dlq.metadata_location if dlq else None,
                topic=self.dead_letter_topic,
                kafka_config=self.kafka_config,
                topic_max_bytes=self.dead_letter_max_bytes,
                already_sent=already_sent,
            ),
        )

    def _write(
        self, df: Any, batch_id: int, already_sent: frozenset[Coordinates] = frozenset()
    ) -> ParsedMessages:
        plan = self._plan(batch_id, already_sent)
        metadata = self.table.metadata
        messages_type = spark_schema(MESSAGE_SCHEMA)
        if metadata.schema.identifier_field_ids:
            stage = keyed_stage_schema(metadata)
            decoded = df.mapInArrow(decode_for_keyed(plan, stage), spark_schema(stage))
            keys = [metadata.schema.column_name(i) for i in metadata.schema.identifier_field_ids]
            n = self.key_partitions or int(
                df.sparkSession.conf.get("spark.sql.shuffle.partitions", "2")
            )
            out = decoded.repartition(n, *keys).mapInArrow(collapse_and_write(plan), messages_type)
        else:
            out = df.mapInArrow(decode_and_write_append(plan), messages_type)
        rows = out.collect()
        messages = pa.Table.from_pylist([r.asDict() for r in rows], schema=MESSAGE_SCHEMA)
        return parse_messages(messages)

    def _evolve(self, unknown: Mapping[str, set[str]]) -> bool:
        add = []
        for path, kinds in sorted(unknown.items()):
            kind = _EVOLVABLE.get(frozenset(kinds - {"null"}))
            if "." in path or kind is None:
                log.warning(
                    "not adding field %r (kinds %s): only top-level primitives", path, kinds
                )
                continue
            add.append(AddColumn(path, primitive_from_string(kind)))
        if not add:
            return False
        self.table.commit_or_raise(UpdateSchema(add=tuple(add)))
        log.info("schema evolved: added %s", ", ".join(c.name for c in add))
        return True


def _forget(table: Table, parsed: ParsedMessages) -> None:
    """Files of a batch that will be written again; never referenced by any snapshot."""
    for f, _ in parsed.files:
        table.io.delete(f.file_path)
    for f in parsed.dead_letter_files:
        table.io.delete(f.file_path)
