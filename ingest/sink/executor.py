"""Functions Spark runs on executors through ``mapInArrow``: no driver state.

Each task drops records the table's ledger already holds, decodes, writes data files
and emits commit messages (``calving.ingest.sink.messages``): one per data file, the keys the
batch deleted, the Kafka offset range it saw, dead letters and unknown fields. The
driver only ever collects these small message rows.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from calving.commit.index.shard_lookup import (
    ShardJob,
    read_ahead_in_background,
    tidy_in_background,
)
from calving.commit.index.task_steps import run_task_steps
from calving.commit.io import FileIO
from calving.commit.spec.metadata import TableMetadata, parse_metadata
from calving.commit.spec.properties import TableProperties
from calving.ingest.decode.batch import META_COLUMNS, OP_DELETE, OP_UPSERT, DecodedBatch, Decoder
from calving.ingest.sink.dead_letters import DeadLetterTarget
from calving.ingest.sink.messages import (
    MESSAGE_SCHEMA,
    SMALL_BATCH,
    DataFileWritten,
    DeadLetterFileWritten,
    KeysDeleted,
    KeysRenewed,
    Message,
    ShardStepsTaken,
    UnknownFields,
    encode,
    message_batch,
    range_messages,
    row_from_json,
    row_to_json,
)
from calving.ingest.write.arrow_schema import schema_to_arrow
from calving.ingest.write.task_writer import TaskWriter

Batches = Iterator[pa.RecordBatch]
TaskFunction = Callable[[Batches], Batches]


@dataclass(frozen=True)
class TaskPlan:
    """Everything a task needs, pickled once per batch."""

    #: The table's metadata for writing (``task_metadata_json``: schema, spec, location,
    #: properties; no history).
    metadata_json: bytes
    metadata_location: str
    decoder: Decoder  # picklable: Spark ships the plan to the executors
    ledger: Mapping[tuple[str, int], int] = field(default_factory=dict)
    file_prefix: str = "calving"
    dead_letters: DeadLetterTarget = field(default_factory=DeadLetterTarget)
    #: The driver's FileIO properties (``s3.endpoint``, credentials ...): executors must
    #: write where the table lives. Kept out of ``repr`` (it may hold secrets).
    io_properties: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: Sharded mode: the job the keyed write tasks step their index shards with
    #: (``calving.commit.index.task_steps``); None: the driver resolves the keys.
    shard_job: ShardJob | None = field(default=None, repr=False)

    def metadata(self) -> TableMetadata:
        return _parsed_metadata(self.metadata_json, self.metadata_location)

    def file_io(self) -> FileIO:
        return FileIO(self.io_properties)

    def writer(self, io: FileIO) -> TaskWriter:
        m = self.metadata()
        target = TableProperties(m.properties).target_file_size_bytes
        return TaskWriter(
            io, m.location, m.schema, m.spec, file_prefix=self.file_prefix, target_file_size=target
        )


@functools.lru_cache(maxsize=256)
def _parsed_metadata(metadata_json: bytes, location: str) -> TableMetadata:
    """A plan's metadata, parsed once per Python worker (a task asks several times per
    table, and a reused worker gets the same plans batch after batch); the metadata is
    immutable."""
    return parse_metadata(metadata_json, location)


def drop_committed(batch: pa.Table, ledger: Mapping[tuple[str, int], int]) -> pa.Table:
    """Records the ledger already covers are in the table: never decode them again."""
    if not ledger or batch.num_rows == 0:
        return batch
    if pc.min(batch.column("offset")).as_py() >= max(ledger.values()):
        return batch  # every record is past every partition's ledger (one compute call)
    keep = None
    for (topic, partition), next_offset in ledger.items():
        here = pc.and_(
            pc.equal(batch.column("topic"), topic),
            pc.equal(batch.column("partition"), partition),
        )
        old = pc.and_(here, pc.less(batch.column("offset"), next_offset))
        keep = pc.invert(old) if keep is None else pc.and_(keep, pc.invert(old))
    return batch.filter(keep)


def discard_files(io: FileIO, messages: Sequence[Message]) -> None:
    """Delete the files ``messages`` report written (a task that fails after writing
    them leaves nothing behind; a delete that fails is left to orphan-file cleanup)."""
    for m in messages:
        if isinstance(m, (DataFileWritten, DeadLetterFileWritten)):
            with contextlib.suppress(Exception):
                io.delete(m.file.file_path)


class Decoding:
    """Per task: decode batches, divert dead letters, gather unknown fields."""

    def __init__(self, plan: TaskPlan, check_early: bool = True) -> None:
        self.plan = plan
        #: Refuse a dead letter with nowhere to go as soon as it is decoded. False: a
        #: many-table first pass, whose dead letters may be deferred until the table has
        #: followed the batch's schemas (a failing task deletes the files it wrote).
        self.check_early = check_early
        self.messages: list[Message] = []
        self.dead: list[pa.Table] = []
        self.unknown: dict[str, set[str]] = {}

    def decode(self, rb: pa.RecordBatch) -> pa.Table | None:
        batch = drop_committed(pa.Table.from_batches([rb]), self.plan.ledger)
        self.messages += range_messages(batch)
        if batch.num_rows == 0:
            return None
        decoded: DecodedBatch = self.plan.decoder.decode(batch)
        if decoded.dead_letters.num_rows:
            # Nowhere to put it: stop before any of the batch's rows is written (an
            # error later would leave data files no snapshot references).
            if self.check_early:
                self.plan.dead_letters.check_configured(decoded.dead_letters)
            self.dead.append(decoded.dead_letters)
        for path, kinds in decoded.unknown_fields.items():
            self.unknown.setdefault(path, set()).update(kinds)
        return decoded.rows if decoded.rows.num_rows else None

    def finish(self, io: FileIO) -> list[Message]:
        out = list(self.messages)
        if self.dead:
            out += self.plan.dead_letters.write(
                io, pa.concat_tables(self.dead), self.plan.file_prefix
            )
        if self.unknown:
            out.append(UnknownFields({p: frozenset(k) for p, k in self.unknown.items()}))
        return out


def decode_and_write_append(plan: TaskPlan) -> TaskFunction:
    """Append tables: decode and write in one pass."""

    def run(batches: Batches) -> Batches:
        io = plan.file_io()
        writer = plan.writer(io)
        decoding = Decoding(plan)
        try:
            for rb in batches:
                rows = decoding.decode(rb)
                if rows is not None:
                    writer.write(
                        rows.drop_columns([c for c in META_COLUMNS if c in rows.column_names])
                    )
            messages: list[Message] = [DataFileWritten(w.data_file) for w in writer.close()]
            done = encode(messages + decoding.finish(io))
        except BaseException:
            discard_files(io, [DataFileWritten(w.data_file) for w in writer.written])
            raise
        yield done

    return run


def decode_for_keyed(plan: TaskPlan, stage_schema: pa.Schema) -> TaskFunction:
    """Keyed tables, stage 1: decode. Messages ride along as rows whose ``_meta``
    column holds them (encoded), so that stage 2 forwards them to the driver."""

    def run(batches: Batches) -> Batches:
        io = plan.file_io()
        decoding = Decoding(plan)
        for rb in batches:
            rows = decoding.decode(rb)
            if rows is not None:
                yield from conform(rows, stage_schema).to_batches()
        messages = decoding.finish(io)
        if messages:
            yield meta_rows(messages, stage_schema)

    return run


def collapse_and_write(plan: TaskPlan) -> TaskFunction:
    """Keyed tables, stage 2 (after repartitioning by key, so this task owns its keys):
    keep each key's last event in Kafka order, write the upserts, and report every key
    the batch touched so the driver deletes earlier versions with deletion vectors."""

    def run(batches: Batches) -> Batches:
        read_ahead(plan)  # while the shuffled rows come
        parts = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        if not parts:
            yield encode([])
            tidy_in_background()  # a base the read-ahead wrote: no step takes it
            return
        data = pa.concat_tables(parts)
        is_meta = pc.is_valid(data.column("_meta"))
        forwarded = [row_from_json(p) for p in data.filter(is_meta).column("_meta").to_pylist()]
        data = data.filter(pc.invert(is_meta)).drop_columns(["_meta"])
        messages = write_last_events(plan, data) if data.num_rows else []
        yield message_batch([*forwarded, *messages, *shard_steps(plan, messages)])
        tidy_in_background()  # the task's output is sent: the worker waits

    return run


def write_last_events(plan: TaskPlan, data: pa.Table) -> list[Message]:
    schema = plan.metadata().schema
    keys = [schema.column_name(i) for i in schema.identifier_field_ids]
    data = data.sort_by(
        [("_topic", "ascending"), ("_partition", "ascending"), ("_offset", "ascending")]
    )
    data = data.append_column("_seq", pa.array(range(data.num_rows), pa.int64()))
    deleted = data.filter(pc.equal(data.column("_op"), OP_DELETE)).select(keys)
    data = data.take(last_per_key(data, keys))
    upserts = data.filter(pc.equal(data.column("_op"), OP_UPSERT))
    deletes = data.filter(pc.equal(data.column("_op"), OP_DELETE))
    io = plan.file_io()
    writer = plan.writer(io)
    writer.write(upserts.drop_columns([*META_COLUMNS, "_seq"]))
    messages: list[Message] = [DataFileWritten(w.data_file, w.keys) for w in writer.close()]
    if deletes.num_rows:
        messages.append(KeysDeleted(deletes.select(keys)))
    if deleted.num_rows > deletes.num_rows:  # some deleted keys were upserted again
        renewed = renewed_keys(upserts.select(keys), deleted)
        if renewed.num_rows:
            messages.append(KeysRenewed(renewed))
    return messages


def shard_steps(plan: TaskPlan, messages: Sequence[Message]) -> list[Message]:
    """Sharded mode: the task's steps on the index shards its keys fall in (its keys
    are its files' and deleted keys, which no other task of the batch holds)."""
    if plan.shard_job is None:
        return []
    files = [(m.file, m.keys) for m in messages if isinstance(m, DataFileWritten)]
    deleted = [m.keys for m in messages if isinstance(m, KeysDeleted)]
    steps = run_task_steps(plan.shard_job, files, deleted, _task_partition())
    return [ShardStepsTaken(steps)]


def read_ahead(plan: TaskPlan) -> None:
    """Sharded mode: the write task's shards read ahead while its input comes
    (``shard_lookup.read_ahead_in_background``), its rebases' bases written."""
    if plan.shard_job is not None:
        read_ahead_in_background(plan.shard_job, _task_partition())


def _task_partition() -> int | None:
    """This Spark task's partition (None outside a task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return None if context is None else int(context.partitionId())


def last_per_key(data: pa.Table, keys: Sequence[str | None]) -> np.ndarray:
    """The row index of each key's last row (``_seq``: the row index), ascending."""
    if data.num_rows <= SMALL_BATCH:  # in Python: cheaper than a group-by's set-up
        last = {k: i for i, k in enumerate(zip(*(data.column(c).to_pylist() for c in keys)))}
        return np.sort(np.fromiter(last.values(), np.int64, len(last)))
    grouped = data.group_by(keys, use_threads=False).aggregate([("_seq", "max")])
    return np.sort(grouped.column("_seq_max").to_numpy())


def renewed_keys(upserted: pa.Table, deleted: pa.Table) -> pa.Table:
    """The upserted keys (last event an upsert) that the batch also deleted: each is
    a new row, not an update of the row the table holds (v3 row lineage)."""
    if upserted.num_columns == 1:
        return upserted.filter(pc.is_in(upserted.column(0), deleted.column(0).unique()))
    gone = {tuple(r.values()) for r in deleted.to_pylist()}
    rows = [i for i, r in enumerate(upserted.to_pylist()) if tuple(r.values()) in gone]
    return upserted.take(pa.array(rows, pa.int64()))


def keyed_stage_schema(metadata: TableMetadata) -> pa.Schema:
    """Stage-1 output: the table's columns (all nullable: delete rows carry only keys)
    plus the decoder's meta columns and ``_meta``."""
    base = schema_to_arrow(metadata.schema)
    extra = [
        pa.field("_op", pa.int8()),
        pa.field("_partition", pa.int32()),
        pa.field("_offset", pa.int64()),
        pa.field("_topic", pa.string()),
        pa.field("_meta", pa.string()),
    ]
    return pa.schema([pa.field(f.name, f.type, True) for f in base] + extra)


def conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    cols = [
        rows.column(f.name).cast(f.type)
        if f.name in rows.column_names
        else pa.nulls(rows.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(cols, schema=schema)


def meta_rows(messages: Sequence[Message | Mapping[str, Any]], schema: pa.Schema) -> pa.RecordBatch:
    """Stage-1 rows carrying ``messages`` (or rows already encoded) in ``_meta``."""
    rows = message_batch(messages).to_pylist()
    n = len(rows)
    cols = [
        pa.array([row_to_json(r) for r in rows], pa.string())
        if f.name == "_meta"
        else pa.nulls(n, f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


__all__ = [
    "MESSAGE_SCHEMA",
    "Decoding",
    "TaskPlan",
    "collapse_and_write",
    "conform",
    "decode_and_write_append",
    "decode_for_keyed",
    "discard_files",
    "drop_committed",
    "keyed_stage_schema",
    "meta_rows",
    "write_last_events",
]
