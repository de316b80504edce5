"""``df.writeStream.foreachBatch(sink)``: the Spark sink with the coordinator in the
driver process.

A ``DataSourceStreamWriter.commit`` gets a fresh object every batch, so the stateful
coordinator (table handle, primary-key index) lives here, in the driver, and the
executors write through ``mapInArrow``. Works on any DataFrame with the Kafka source
columns (calving's own ``calving-kafka`` source or the JVM Kafka connector's).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from calving.commit.errors import CalvingError
from calving.commit.spec.metadata import task_metadata_json
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import primitive_from_string
from calving.commit.table.actions.update_schema import AddColumn, UpdateSchema
from calving.commit.table.table import Table
from calving.ingest.decode.batch import Decoder
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.kafka.source import RANGE_COLUMNS
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
from calving.ingest.sink.fused import fused_append, fused_keyed, read_and_decode_for_keyed
from calving.ingest.sink.index_rebuild import ExecutorRebuild
from calving.ingest.sink.messages import Coordinates, collected
from calving.ingest.sink.shard_stage import sharded_index
from calving.ingest.sink.spark_tasks import map_in_arrow
from calving.ingest.sink.spark_types import spark_schema

if TYPE_CHECKING:
    from typing_extensions import Self

log = logging.getLogger("calving.sink")

DecoderFactory = Callable[[Schema], Decoder]


class BatchObserver(Protocol):
    """Told of each batch's outcome (``calving.ingest.metrics.SinkMetrics`` is the one in
    use: endpoint figures and a JSON line per batch). A protocol, so the sink does not
    import the metrics package that observes it (tests/test_layers.py)."""

    def commit_starting(self) -> object:
        """The batch's commit stage starts (the lag probe's broker read overlaps it)."""

    def batch_done(
        self,
        sink: CalvingSink,
        parsed: ParsedMessages,
        stats: BatchStats,
        started: float,
        commit_started: float,
    ) -> object: ...

    def batch_failed(
        self, sink: CalvingSink, batch_id: int, error: BaseException, started: float
    ) -> object: ...

    def close(self) -> None:
        """Stop what serves the figures (the sink's ``close`` calls it)."""


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
        metrics: BatchObserver | None = None,
        source_options: KafkaSourceOptions | None = None,
        keyed_path: str = "fused",
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
        self._decoder: tuple[int, Decoder] | None = None
        #: The index opening ahead of the first batch (``open_early``); that batch joins it.
        self._opening: threading.Thread | None = None
        #: The ``calving-kafka`` options of a ``calving.emit = ranges`` DataFrame: the
        #: fused tasks read the records themselves.
        self.source_options = source_options
        if keyed_path not in ("fused", "shuffle"):
            raise CalvingError(f"keyed_path must be fused or shuffle, got {keyed_path!r}")
        #: How a ranges DataFrame reaches a keyed table: ``fused`` until a batch shows a
        #: key in two tasks, then ``shuffle`` for good.
        self.keyed_path = keyed_path

    @property
    def table(self) -> Table:
        return self.coordinator.table

    @property
    def description(self) -> str:
        return self.table.name

    def starting_ledger(self) -> dict[tuple[str, int], int]:
        """The table's ledger for this writer: the source never reads below it."""
        self.table.refresh()
        return self.table.ledger(self.writer_id)

    def decoder(self) -> Decoder:
        schema = self.table.metadata.schema
        if self._decoder is None or self._decoder[0] != schema.schema_id:
            self._decoder = (schema.schema_id, self.make_decoder(schema))
        return self._decoder[1]

    def open_early(self, spark: Any) -> None:
        """The stream is starting: open the keyed table's primary-key index (rebuilding
        it when lost; in sharded mode, its shards) in a thread of its own while the
        query starts, so the first batch does not wait for all of it. The first batch
        writes its files meanwhile (in sharded mode without the write tasks' steps, if
        the shards are not open yet: the separate stage resolves its keys) and joins
        the thread before it commits; if opening failed there, it is logged and the
        batch opens the index itself (and raises what it finds)."""
        self._use(spark)
        if self._opening is not None or not self.coordinator.keyed:
            return
        self._opening = threading.Thread(
            target=self._open_index, name=f"calving-index-{self.writer_id}", daemon=True
        )
        self._opening.start()

    def _open_index(self) -> None:
        try:
            self.coordinator.open_index()
        except Exception as err:  # noqa: BLE001 -- the first batch opens it again, and raises
            log.warning(
                "%s: opening the primary-key index before the first batch failed (the batch "
                "opens it): %s",
                self.table.name,
                err,
            )

    def _index_opening(self) -> bool:
        return self._opening is not None and self._opening.is_alive()

    def _opened(self) -> None:
        if self._opening is not None:
            self._opening.join()
            self._opening = None

    def _use(self, spark: Any) -> None:
        """A lost index is rebuilt by ``spark``'s executors; sharded mode's steps run there."""
        if self.coordinator.rebuild is None:
            self.coordinator.rebuild = ExecutorRebuild(spark, self.table.io.properties)
            self.coordinator.sharded = sharded_index(spark, self.table)

    def close(self) -> None:
        """Save the primary-key index with the table (a restart then skips the rescan)."""
        self._opened()
        self.coordinator.save_index()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __call__(self, df: Any, batch_id: int) -> None:
        started = time.monotonic()
        self._use(df.sparkSession)
        # The index may still be opening (``open_early``): the write job does not need
        # it, so it runs meanwhile, and the commit joins the opening.
        parsed = self._parse_batch(df, batch_id)
        self._opened()
        commit_started = time.monotonic()
        if self.metrics is not None:
            self.metrics.commit_starting()
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
        if parsed.unknown_fields and self.evolve_schema:
            self._opened()  # the evolution commits: after the opening read the table
        if parsed.unknown_fields and self.evolve_schema and self._evolve(parsed.unknown_fields):
            forget_files(self.table, parsed)
            # Decode again, now into the new columns; the dead letters the first pass
            # sent to the topic are not sent twice.
            parsed = self._write(df, batch_id, frozenset(parsed.dead_letters_sent))
        return parsed

    def _plan(self, batch_id: int, already_sent: frozenset[Coordinates] = frozenset()) -> TaskPlan:
        ledger = self.coordinator.ledger()  # refreshes the table
        table = self.table
        return TaskPlan(
            metadata_json=task_metadata_json(table.metadata),
            metadata_location=table.metadata_location,
            decoder=self.decoder(),
            ledger=ledger,
            file_prefix=f"{self.writer_id}-b{batch_id}",
            io_properties=table.io.properties,
            dead_letters=DeadLetterTarget.of(
                self.coordinator.dead_letter_table,
                self.dead_letter_topic,
                self.kafka_config,
                self.dead_letter_max_bytes,
                already_sent,
            ),
            # While the index still opens, the keys go to the separate stage after the
            # write job (sharded mode), which then runs beside the shards' rebuild.
            shard_job=None if self._index_opening() else self.coordinator.shard_job(),
        )

    def _write(
        self, df: Any, batch_id: int, already_sent: frozenset[Coordinates] = frozenset()
    ) -> ParsedMessages:
        if is_range_frame(df):
            return self._write_ranges(df, batch_id, already_sent)
        plan = self._plan(batch_id, already_sent)
        metadata = self.table.metadata
        messages_type = spark_schema(MESSAGE_SCHEMA)
        if metadata.schema.identifier_field_ids:
            stage = keyed_stage_schema(metadata)
            decoded = map_in_arrow(df, decode_for_keyed(plan, stage), spark_schema(stage))
            out = self._shuffle(decoded, plan)
        else:
            out = map_in_arrow(df, decode_and_write_append(plan), messages_type)
        return _collect(out)

    def _write_ranges(
        self, df: Any, batch_id: int, already_sent: frozenset[Coordinates]
    ) -> ParsedMessages:
        """The fused path: tasks read their own ranges (``calving.ingest.sink.fused``)."""
        if self.source_options is None:
            raise CalvingError(
                "a calving.emit=ranges DataFrame needs CalvingSink(source_options=...): the "
                "tasks read the records themselves"
            )
        options = self.source_options
        plan = self._plan(batch_id, already_sent)
        messages_type = spark_schema(MESSAGE_SCHEMA)
        schema = self.table.metadata.schema
        if not schema.identifier_field_ids:
            return _collect(map_in_arrow(df, fused_append(plan, options), messages_type))
        if self.keyed_path == "fused":
            parsed = _collect(map_in_arrow(df, fused_keyed(plan, options), messages_type))
            spread = keys_in_two_tasks(parsed, schema)
            if spread is None:
                return parsed
            log.warning(
                "batch %d: key %s was written by two tasks (a key spans Kafka partitions); "
                "the stream takes the shuffle path from now on",
                batch_id,
                spread,
            )
            forget_files(self.table, parsed)
            self.keyed_path = "shuffle"
            plan = self._plan(batch_id, already_sent | frozenset(parsed.dead_letters_sent))
        stage = keyed_stage_schema(self.table.metadata)
        decoded = map_in_arrow(
            df, read_and_decode_for_keyed(plan, options, stage), spark_schema(stage)
        )
        return _collect(self._shuffle(decoded, plan))

    def _shuffle(self, decoded: Any, plan: TaskPlan) -> Any:
        """Stage 2 of the shuffle path: rows repartitioned by key, collapsed and written."""
        schema = self.table.metadata.schema
        keys = [schema.column_name(i) for i in schema.identifier_field_ids]
        n = self.key_partitions or int(
            decoded.sparkSession.conf.get("spark.sql.shuffle.partitions", "2")
        )
        messages_type = spark_schema(MESSAGE_SCHEMA)
        return map_in_arrow(decoded.repartition(n, *keys), collapse_and_write(plan), messages_type)

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


def _collect(out: Any) -> ParsedMessages:
    """The message rows the driver collects, parsed."""
    return parse_messages(collected(out))


def is_range_frame(df: Any) -> bool:
    """True for a ``calving.emit = ranges`` DataFrame (one row per offset range)."""
    return [f.name for f in df.schema.fields] == [f.name for f in RANGE_COLUMNS.fields]


def keys_in_two_tasks(parsed: ParsedMessages, schema: Schema) -> str | None:
    """A key that more than one fused task wrote or deleted, shown, or None.

    Each fused task keeps one event per key, so within a batch a key written (or deleted)
    twice was seen by two tasks: its events were not all in one Kafka partition, and the
    order between them is unknown."""
    tables = [keys for _, keys in parsed.files if keys is not None and keys.num_rows]
    tables += [keys for keys in parsed.delete_keys if keys.num_rows]
    if len(tables) < 2:
        return None
    names = [schema.column_name(i) for i in schema.identifier_field_ids]
    every = pa.concat_tables([t.select(names) for t in tables], promote_options="permissive")
    counts = every.group_by(names, use_threads=False).aggregate([([], "count_all")])
    twice = counts.filter(pc.greater(counts.column("count_all"), 1))
    if twice.num_rows == 0:
        return None
    return ", ".join(
        f"{k}={v!r}" for k, v in twice.slice(0, 1).to_pylist()[0].items() if k in names
    )


def forget_files(table: Table, parsed: ParsedMessages) -> None:
    """Files of a batch that will be written again; never referenced by any snapshot."""
    for f, _ in parsed.files:
        table.io.delete(f.file_path)
    for f in parsed.dead_letter_files:
        table.io.delete(f.file_path)
