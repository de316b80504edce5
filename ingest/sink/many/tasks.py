"""Executor side of a many-table batch: one task per planned Kafka range.

A task gets the range rows Spark gave it (``topic``, ``partition``, ``start``, ``end``)
and a ``TablePlan`` per topic (the plans are pickled once per batch). It reads its ranges
with one confluent-kafka consumer (``RangeReader``; the small ranges fetched together
first), notes the value schemas the change events carry (``SchemaSniffer``), decodes
with the table's decoder and writes the table's files: appends as they come, keyed
tables keeping each key's last event. A record that does not decode is not judged
while its table's ranges carry a value schema the driver has not checked against the
table (``TablePlan.settled``): the task reports
``DeadLettersDeferred`` instead, and the driver evolves the table and writes the batch
again before any record is a dead letter (a widened column's values fit only after the
table widened). A table stopped by an incompatible schema change sends every record to
the dead-letter destination instead. Messages come back tagged with the table's name
(``encode_tagged``): the driver collects only those.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from calving.commit.io_sync import synced_together
from calving.ingest.decode.avro_confluent import ConfluentAvroReader
from calving.ingest.decode.batch import DEAD_LETTER_SCHEMA, META_COLUMNS
from calving.ingest.decode.debezium_wrapped import wrapped_head
from calving.ingest.kafka.offsets import OffsetRange
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.kafka.range_reader import RangeReader, read_range
from calving.ingest.kafka.source import kafka_arrow_schema
from calving.ingest.sink.executor import (
    Decoding,
    TaskPlan,
    conform,
    discard_files,
    drop_committed,
    keyed_stage_schema,
    write_last_events,
)
from calving.ingest.sink.many.transactions import (
    RunBuilder,
    TransactionScope,
    transaction_ids,
)
from calving.ingest.sink.messages import (
    DataFileWritten,
    DeadLettersDeferred,
    Message,
    SchemaSeen,
    encode_tagged,
    range_messages,
)

#: ``SchemaSeen`` text of a Confluent Avro value: this prefix and the writer schema id.
AVRO_SCHEMA_ID = "avro-schema-id:"
#: At most this many distinct schema texts are remembered per task and table.
_MAX_SCHEMAS = 64
#: ``SchemaSniffer.add_values``: vectorized rounds (distinct schema texts) before the
#: rest of a column goes record by record.
_SNIFF_ROUNDS = 4
_PAYLOAD = b'"payload"'


@dataclass(frozen=True)
class TablePlan:
    """How one table's records are written in this batch."""

    table: str
    plan: TaskPlan
    keyed: bool
    #: Set when the table is stopped by an incompatible source schema change: every
    #: record becomes a dead letter with this message.
    stopped: str | None = None
    #: With source-transaction boundaries: which events this batch may write.
    scope: TransactionScope | None = None
    #: The value schemas (``SchemaSeen`` texts) known to need no table change; a task
    #: that sees another defers its dead letters. None: every record is judged.
    settled: frozenset[str] | None = None


class SchemaSniffer:
    """The distinct value schemas of change events: the writer schema id of Confluent
    Avro values (``AVRO_SCHEMA_ID``), or the canonical JSON text of Kafka Connect
    JSON-converter events: ``{"schema": {...}, "payload": {...}}``. The converter writes ``schema``
    first, so each record's bytes up to ``"payload"`` are compared and only a prefix not
    seen before is parsed; a record whose prefix does not parse is parsed whole."""

    def __init__(self) -> None:
        self.prefixes: set[bytes] = set()
        self.schemas: set[str] = set()

    def add(self, values: Iterable[bytes | None]) -> None:
        for value in values:
            if value is None:
                continue
            if value[:1] == b"\x00" and len(value) >= 5:  # Confluent Avro: the schema id
                self.schemas.add(f"{AVRO_SCHEMA_ID}{int.from_bytes(value[1:5], 'big')}")
                continue
            cut = value.find(_PAYLOAD)
            prefix = value[:cut] if cut > 0 else value
            if prefix in self.prefixes or len(self.prefixes) >= _MAX_SCHEMAS:
                continue
            self.prefixes.add(prefix)
            schema = _value_schema(prefix, value)
            if schema is not None:
                self.schemas.add(json.dumps(schema, sort_keys=True, separators=(",", ":")))

    def add_values(self, values: pa.Array | pa.ChunkedArray) -> None:
        """``add`` over a column of values, with no Python bytes a record: the records
        that start with the first unseen record's ``wrapped_head`` share its bytes up to
        and with its first ``"payload":``, so their first ``"payload"`` and schema text
        too; they are found with one vectorized ``starts_with``. A few such rounds, then
        what is left (Avro, unwrapped JSON, more schemas) goes to ``add``."""
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        left = values.is_valid().to_numpy(zero_copy_only=False)
        for _ in range(_SNIFF_ROUNDS):
            if not left.any():
                return
            at = int(np.argmax(left))
            first: bytes = values[at].as_py()
            head = wrapped_head(first)
            if head is None or first[:1] == b"\x00":
                break
            self.add([first])
            same = pc.starts_with(values, pattern=head).fill_null(False)
            left &= ~same.to_numpy(zero_copy_only=False)
        rest = np.flatnonzero(left)
        if len(rest):
            self.add(values.take(pa.array(rest)).to_pylist())

    def messages(self) -> list[Message]:
        return [SchemaSeen(s) for s in sorted(self.schemas)]


def _value_schema(prefix: bytes, value: bytes) -> Any:
    head = prefix.rstrip().rstrip(b",") + b"}"
    for text in (head, value):
        try:
            doc = json.loads(text)
        except ValueError:
            continue
        return doc.get("schema") if isinstance(doc, dict) else None
    return None


def many_tables_task(
    plans: Mapping[str, TablePlan], options: KafkaSourceOptions, reuse_consumer: bool = True
) -> Any:
    """The function a task runs over its range rows (tuples ``(topic, partition, start,
    end)``): yields one Arrow IPC stream of tagged messages. ``reuse_consumer``: one Kafka
    consumer reads all the task's ranges (else one per range)."""

    def run(rows: Iterable[tuple[str, int, int, int]]) -> Iterator[bytes]:
        spans: dict[str, list[OffsetRange]] = {}
        for topic, partition, start, end in rows:
            spans.setdefault(topic, []).append(OffsetRange(topic, partition, start, end))
        by_table: dict[str, list[Message]] = {}
        try:
            # one consumer for all the task's ranges; the files fsynced together at the end
            with RangeReader(options) as shared, synced_together():
                reader = shared if reuse_consumer else None
                order = list(spans)
                if reader is not None:  # quiet tables' few records: fetched together
                    ahead = reader.fetch_ahead([r for ranges in spans.values() for r in ranges])
                    order = fetch_order(order, ahead)
                for topic in order:
                    ranges = spans[topic]
                    plan = plans[topic]
                    messages = table_messages(plan, options, ranges, reader)
                    by_table.setdefault(plan.table, []).extend(messages)
        except BaseException:
            # The task fails: files it wrote for other tables would never be committed.
            for topic in spans:
                discard_files(plans[topic].plan.file_io(), by_table.pop(plans[topic].table, []))
            raise
        batch = encode_tagged(by_table)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        yield sink.getvalue().to_pybytes()

    return run


def fetch_order(topics: Sequence[str], ahead: Sequence[OffsetRange]) -> list[str]:
    """``topics`` in the order their ranges are fetched ahead (``RangeReader.fetch_ahead``),
    the ones read on their own last: each table is written as soon as its records are
    in, while the next assignment's records arrive."""
    first: dict[str, int] = {}
    for n, r in enumerate(ahead):
        first.setdefault(r.topic, n)
    return sorted(topics, key=lambda t: first.get(t, len(ahead)))


def decode_task_output(blobs: Iterable[bytes]) -> pa.Table:
    """The collected IPC streams of every task, as one table of tagged messages."""
    tables = [pa.ipc.open_stream(b).read_all() for b in blobs]
    return pa.concat_tables(tables)


def _records(
    options: KafkaSourceOptions,
    ranges: Iterable[OffsetRange],
    sniffer: SchemaSniffer,
    scope: TransactionScope | None = None,
    runs: RunBuilder | None = None,
    reader: RangeReader | None = None,
    avro: ConfluentAvroReader | None = None,
) -> Iterator[pa.RecordBatch]:
    """The records of ``ranges`` (on ``reader``'s consumer, else one per range); with a
    ``scope``, each topic-partition only up to its first record outside it (the rest is
    held back), its transaction runs noted."""
    schema = kafka_arrow_schema(options.include_headers)
    for span in ranges:
        tp = (span.topic, span.partition)
        batches = reader.read(span, schema) if reader else read_range(options, span, schema)
        for rb in batches:
            if scope is not None and runs is not None:
                offsets = rb.column("offset").to_pylist()
                ids = transaction_ids(rb.column("value").to_pylist(), avro)
                cut = scope.cut(tp, offsets, ids)
                runs.add(tp, offsets[:cut], ids[:cut])
                if cut < rb.num_rows:
                    if cut:
                        head = rb.slice(0, cut)
                        sniffer.add_values(head.column("value"))
                        yield head
                    break  # the rest of this span waits for a later batch
            sniffer.add_values(rb.column("value"))
            yield rb


def table_messages(
    plan: TablePlan,
    options: KafkaSourceOptions,
    ranges: Iterable[OffsetRange],
    reader: RangeReader | None = None,
) -> list[Message]:
    """Read, decode and write one table's ranges of this task."""
    sniffer = SchemaSniffer()
    task = plan.plan
    io = task.file_io()
    runs = RunBuilder() if plan.scope is not None else None
    avro = getattr(task.decoder, "reader", None)  # debezium-avro: read transaction ids
    records = _records(options, ranges, sniffer, plan.scope, runs, reader, avro)
    if plan.stopped is not None:
        dead = _all_dead(plan, records)
        return dead + sniffer.messages() + ([runs.message()] if runs is not None else [])
    decoding = Decoding(task, check_early=plan.settled is None)
    messages: list[Message] = []
    if plan.keyed:
        stage = keyed_stage_schema(task.metadata())
        stage = stage.remove(stage.get_field_index("_meta"))
        parts = []
        for rb in records:
            rows = decoding.decode(rb)
            if rows is not None:
                parts.append(conform(rows, stage))
        if parts:
            messages = write_last_events(task, pa.concat_tables(parts))
    else:
        writer = task.writer(io)
        for rb in records:
            rows = decoding.decode(rb)
            if rows is not None:
                writer.write(rows.drop_columns([c for c in META_COLUMNS if c in rows.column_names]))
        messages = [DataFileWritten(w.data_file) for w in writer.close()]
    deferred = _defer(plan, decoding, sniffer)
    done = messages + deferred + decoding.finish(io) + sniffer.messages()
    return done + ([runs.message()] if runs is not None else [])


def _defer(plan: TablePlan, decoding: Decoding, sniffer: SchemaSniffer) -> list[Message]:
    """The dead letters taken from ``decoding`` (not sent, not raised) when the records
    carried a schema the driver has not checked yet: the table may have to evolve first."""
    if plan.settled is None or not decoding.dead or sniffer.schemas <= plan.settled:
        return []
    count = sum(t.num_rows for t in decoding.dead)
    decoding.dead = []
    return [DeadLettersDeferred(count)]


def _all_dead(plan: TablePlan, batches: Iterable[pa.RecordBatch]) -> list[Message]:
    task = plan.plan
    messages: list[Message] = []
    dead = []
    for rb in batches:
        batch = drop_committed(pa.Table.from_batches([rb]), task.ledger)
        messages += range_messages(batch)
        if batch.num_rows:
            dead.append(dead_letter_rows(batch, plan.stopped or "table stopped"))
    if dead:
        messages += task.dead_letters.write(
            task.file_io(), pa.concat_tables(dead), task.file_prefix
        )
    return messages


def dead_letter_rows(batch: pa.Table, error: str) -> pa.Table:
    """Every record of ``batch`` as a dead letter with ``error``."""
    n = batch.num_rows
    return pa.table(
        {
            "topic": batch.column("topic"),
            "partition": batch.column("partition").cast(pa.int32()),
            "offset": batch.column("offset"),
            "timestamp": batch.column("timestamp"),
            "key": batch.column("key"),
            "value": batch.column("value"),
            "error": pa.array([error] * n, pa.string()),
            "error_type": pa.array(["IncompatibleSchemaChangeError"] * n, pa.string()),
            "decoder": pa.array(["DebeziumDecoder"] * n, pa.string()),
        },
        schema=DEAD_LETTER_SCHEMA,
    )
