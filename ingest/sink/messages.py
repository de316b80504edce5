"""Commit messages: what an executor task hands the driver, as typed values.

Executors build the values below; ``encode`` turns them into one Arrow record batch (the
only thing a task returns to Spark) and the driver's ``decode`` turns the collected
batches back into the same values. Nothing else reads or writes the Arrow layout.

- ``DataFileWritten``: a data file of the table; for keyed tables its identifier columns
  in file row order (the primary-key index learns them).
- ``KeysDeleted``: keys whose last event in the batch is a delete.
- ``KeysRenewed``: keys whose last event in the batch is an upsert after a delete in the
  same batch: new rows (a new ``_row_id``), not updates of the rows the table holds.
- ``RangeSeen``: the Kafka offsets ``[start, end)`` a task saw of one topic-partition,
  with the oldest and newest record timestamps (epoch ms) when the rows have them.
- ``DeadLetterFileWritten``: a data file of the dead-letter table.
- ``DeadLettersSent``: the coordinates of dead letters sent to the dead-letter topic.
- ``DeadLettersDeferred``: how many records a many-table task could not decode while
  its table's events carried a schema the driver had not yet checked: they are not
  judged (neither sent nor raised) until the table has evolved and the batch is written
  again.
- ``UnknownFields``: fields the live (not dead-lettered) records had and the table lacks.
- ``RowsSeen``: how many decoded input rows a task saw (the rows path).
- ``SchemaSeen``: a change-event value schema a task saw (JSON text, e.g. the Kafka
  Connect JSON converter's ``schema``), so the driver can evolve the table first.

- ``ShardStepsTaken``: sharded mode, a write task's steps on the index shards its keys
  fall in (``calving.commit.index.task_steps``).
- ``TransactionRuns``: per topic-partition, the runs of consecutive records of one source
  transaction a task read (transaction id or None, first and last offset, count).

A many-table pipeline's tasks tag each message with the topic it came from:
``encode_tagged`` / ``decode_tagged`` add one ``tag`` column to the same layout.

The Arrow layout (private to this module): one row per message, columns ``kind``
(string tag), ``payload`` (JSON text), ``keys`` (an Arrow IPC stream) and ``count``.
``tests/vectors/sink_messages/`` holds a recorded batch that pins it byte for byte.
"""

from __future__ import annotations

import base64
import dataclasses
import decimal
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from calving.commit.errors import CalvingError
from calving.commit.index.task_steps import TaskSteps, steps_from_payload, steps_to_payload
from calving.commit.spec.data_file import DataFile, FileContent

#: (topic, partition, offset) of one Kafka record.
Coordinates = tuple[str, int, int]


@dataclass(frozen=True)
class DataFileWritten:
    file: DataFile
    keys: pa.Table | None = None


@dataclass(frozen=True)
class KeysDeleted:
    keys: pa.Table


@dataclass(frozen=True)
class KeysRenewed:
    keys: pa.Table


@dataclass(frozen=True)
class RangeSeen:
    topic: str
    partition: int
    start: int
    end: int  # exclusive
    timestamp_min_ms: int | None = None
    timestamp_max_ms: int | None = None


@dataclass(frozen=True)
class DeadLetterFileWritten:
    file: DataFile


@dataclass(frozen=True)
class DeadLettersSent:
    coordinates: tuple[Coordinates, ...]


@dataclass(frozen=True)
class DeadLettersDeferred:
    count: int


@dataclass(frozen=True)
class UnknownFields:
    #: Dotted field path -> the kinds of values seen (``long``, ``string`` ...).
    fields: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class RowsSeen:
    count: int


@dataclass(frozen=True)
class SchemaSeen:
    schema: str


#: (topic, partition, transaction id or None, first offset, last offset, records)
TransactionRun = tuple[str, int, "str | None", int, int, int]


@dataclass(frozen=True)
class TransactionRuns:
    runs: tuple[TransactionRun, ...]


@dataclass(frozen=True)
class ShardStepsTaken:
    steps: TaskSteps


Message = (
    DataFileWritten
    | KeysDeleted
    | KeysRenewed
    | RangeSeen
    | DeadLetterFileWritten
    | DeadLettersSent
    | DeadLettersDeferred
    | UnknownFields
    | RowsSeen
    | SchemaSeen
    | TransactionRuns
    | ShardStepsTaken
)


class MessageDecodeError(CalvingError):
    """A commit-message row the driver cannot read (names the row and its kind)."""


MESSAGE_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("payload", pa.string()),
        ("keys", pa.binary()),
        ("count", pa.int64()),
    ]
)

_DATA, _DELETES, _RENEWED, _RANGE, _DEAD_FILE, _DEAD_SENT, _UNKNOWN, _ROWS, _SCHEMA, _TXN_RUNS = (
    "data",
    "deletes",
    "renewed",
    "range",
    "deadletter",
    "deadletters-sent",
    "unknown",
    "rows",
    "schema",
    "txn-runs",
)
_DEAD_DEFERRED = "deadletters-deferred"
_SHARD_STEPS = "shard-steps"
#: ``MESSAGE_SCHEMA`` plus the ``tag`` (topic) of each message: a many-table task.
TAGGED_SCHEMA = MESSAGE_SCHEMA.append(pa.field("tag", pa.string()))


# ---------------------------------------------------------------- the codec


def encode(messages: Iterable[Message]) -> pa.RecordBatch:
    """Messages -> one Arrow record batch of ``MESSAGE_SCHEMA``."""
    return pa.RecordBatch.from_pylist([encode_row(m) for m in messages], schema=MESSAGE_SCHEMA)


def decode(data: pa.Table | pa.RecordBatch) -> list[Message]:
    """Arrow rows of ``MESSAGE_SCHEMA`` -> messages, in row order."""
    columns = [data.column(c).to_pylist() for c in MESSAGE_SCHEMA.names]
    return [decode_row(i, *row) for i, row in enumerate(zip(*columns))]


def collected(frame: Any) -> pa.Table:
    """The message rows of a Spark DataFrame of ``MESSAGE_SCHEMA``, brought to the
    driver as Arrow (``DataFrame.toArrow``): no Row object a message, and the JVM sends
    the columns' bytes instead of pickling each row (a write task's keys and shard
    matches are hundreds of kB)."""
    table = frame.toArrow()
    return table if table.schema == MESSAGE_SCHEMA else table.cast(MESSAGE_SCHEMA)


def encode_tagged(groups: Mapping[str, Iterable[Message]]) -> pa.RecordBatch:
    """Messages by tag -> one Arrow record batch of ``TAGGED_SCHEMA``."""
    rows = [{**encode_row(m), "tag": tag} for tag, messages in groups.items() for m in messages]
    return pa.RecordBatch.from_pylist(rows, schema=TAGGED_SCHEMA)


def decode_tagged(data: pa.Table | pa.RecordBatch) -> dict[str, list[Message]]:
    """Arrow rows of ``TAGGED_SCHEMA`` -> messages by tag, each in row order."""
    out: dict[str, list[Message]] = {}
    columns = [data.column(c).to_pylist() for c in MESSAGE_SCHEMA.names]
    for i, (tag, row) in enumerate(zip(data.column("tag").to_pylist(), zip(*columns))):
        if tag is None:
            raise MessageDecodeError(f"commit message row {i} has no tag")
        out.setdefault(tag, []).append(decode_row(i, *row))
    return out


def encode_row(m: Message) -> dict[str, Any]:
    """One message as a row (a mapping of ``MESSAGE_SCHEMA``'s columns)."""
    if isinstance(m, DataFileWritten):
        return _row(_DATA, data_file_to_json(m.file), table_to_ipc(m.keys), m.file.record_count)
    if isinstance(m, KeysDeleted):
        return _row(_DELETES, "", table_to_ipc(m.keys), m.keys.num_rows)
    if isinstance(m, KeysRenewed):
        return _row(_RENEWED, "", table_to_ipc(m.keys), m.keys.num_rows)
    if isinstance(m, RangeSeen):
        stamps = [m.timestamp_min_ms, m.timestamp_max_ms]
        has_stamps = stamps != [None, None]
        payload = [m.topic, m.partition, m.start, m.end] + (stamps if has_stamps else [])
        return _row(_RANGE, json.dumps(payload), None, m.end - m.start)
    if isinstance(m, DeadLetterFileWritten):
        return _row(_DEAD_FILE, data_file_to_json(m.file), None, m.file.record_count)
    if isinstance(m, DeadLettersSent):
        sent = json.dumps([list(c) for c in m.coordinates], separators=(",", ":"))
        return _row(_DEAD_SENT, sent, None, len(m.coordinates))
    if isinstance(m, DeadLettersDeferred):
        return _row(_DEAD_DEFERRED, "", None, m.count)
    if isinstance(m, UnknownFields):
        fields = {path: sorted(kinds) for path, kinds in sorted(m.fields.items())}
        return _row(_UNKNOWN, json.dumps(fields), None, len(fields))
    if isinstance(m, RowsSeen):
        return _row(_ROWS, "", None, m.count)
    if isinstance(m, SchemaSeen):
        return _row(_SCHEMA, m.schema, None, 1)
    if isinstance(m, TransactionRuns):
        runs = json.dumps([list(r) for r in m.runs], separators=(",", ":"))
        return _row(_TXN_RUNS, runs, None, len(m.runs))
    if isinstance(m, ShardStepsTaken):
        return _row(_SHARD_STEPS, *steps_to_payload(m.steps), len(m.steps.positions))
    raise TypeError(f"not a commit message: {type(m).__name__}")


def decode_row(
    index: int, kind: str | None, payload: str | None, keys: bytes | None, count: int | None
) -> Message:
    """One row (its column values) -> its message; ``index`` names it in errors."""
    try:
        return _decode_row(kind, payload or "", keys, count)
    except (ValueError, TypeError, KeyError) as err:
        raise MessageDecodeError(
            f"commit message row {index} (kind {kind!r}): {type(err).__name__}: {err}"
        ) from None


def _decode_row(kind: str | None, payload: str, keys: bytes | None, count: int | None) -> Message:
    if kind == _DATA:
        return DataFileWritten(data_file_from_json(payload), table_from_ipc(keys))
    if kind == _DELETES:
        table = table_from_ipc(keys)
        if table is None:
            raise ValueError("no keys")
        return KeysDeleted(table)
    if kind == _RENEWED:
        renewed = table_from_ipc(keys)
        if renewed is None:
            raise ValueError("no keys")
        return KeysRenewed(renewed)
    if kind == _RANGE:
        topic, partition, start, end, *stamps = json.loads(payload)
        low, high = (stamps + [None, None])[:2]
        return RangeSeen(str(topic), int(partition), int(start), int(end), low, high)
    if kind == _DEAD_FILE:
        return DeadLetterFileWritten(data_file_from_json(payload))
    if kind == _DEAD_SENT:
        sent = tuple((str(t), int(p), int(o)) for t, p, o in json.loads(payload))
        return DeadLettersSent(sent)
    if kind == _DEAD_DEFERRED:
        return DeadLettersDeferred(int(count or 0))
    if kind == _UNKNOWN:
        fields = {path: frozenset(kinds) for path, kinds in json.loads(payload).items()}
        return UnknownFields(fields)
    if kind == _ROWS:
        return RowsSeen(int(count or 0))
    if kind == _SCHEMA:
        return SchemaSeen(payload)
    if kind == _TXN_RUNS:
        return TransactionRuns(
            tuple(
                (str(t), int(p), None if x is None else str(x), int(a), int(b), int(n))
                for t, p, x, a, b, n in json.loads(payload)
            )
        )
    if kind == _SHARD_STEPS:
        return ShardStepsTaken(steps_from_payload(payload, keys or b""))
    raise ValueError("unknown message kind")


def _row(kind: str, payload: str, keys: bytes | None, count: int) -> dict[str, Any]:
    return {"kind": kind, "payload": payload, "keys": keys, "count": count}


def message_batch(items: Iterable[Message | Mapping[str, Any]]) -> pa.RecordBatch:
    """``encode`` that also passes rows already encoded (mappings) through unchanged:
    messages forwarded from an earlier stage arrive as rows."""
    rows = [dict(m) if isinstance(m, Mapping) else encode_row(m) for m in items]
    return pa.RecordBatch.from_pylist(rows, schema=MESSAGE_SCHEMA)


def row_to_json(row: Mapping[str, Any]) -> str:
    """An encoded row as JSON text (the keyed path's stage 1 forwards messages so)."""
    keys = row.get("keys")
    out = dict(row)
    out["keys"] = None if keys is None else base64.b64encode(keys).decode()
    return json.dumps(out, separators=(",", ":"))


def row_from_json(text: str) -> dict[str, Any]:
    row = json.loads(text)
    keys = row.get("keys")
    row["keys"] = None if keys is None else base64.b64decode(keys)
    return dict(row)


# ---------------------------------------------------------------- builders


def range_messages(batch: pa.Table) -> list[RangeSeen]:
    """One message per topic-partition: the offsets ``[first, last + 1)`` seen."""
    if batch.num_rows == 0:
        return []
    aggregates = [("offset", "min"), ("offset", "max")]
    if "timestamp" in batch.column_names:  # min/max record timestamps (ms) ride along
        batch = batch.append_column("_ts", _epoch_ms(batch.column("timestamp")))
        aggregates += [("_ts", "min"), ("_ts", "max")]
    if batch.num_rows <= SMALL_BATCH:
        return _small_range_messages(batch)
    one = _one_partition_messages(batch)
    return one if one is not None else _grouped_range_messages(batch, aggregates)


def _grouped_range_messages(batch: pa.Table, aggregates: list[tuple[str, str]]) -> list[RangeSeen]:
    """``range_messages`` by an Arrow group-by (``_ts`` already appended, if any)."""
    g = batch.group_by(["topic", "partition"]).aggregate(aggregates)
    return [
        RangeSeen(
            r["topic"],
            int(r["partition"]),
            int(r["offset_min"]),
            int(r["offset_max"]) + 1,
            _int_or_none(r.get("_ts_min")),
            _int_or_none(r.get("_ts_max")),
        )
        for r in g.to_pylist()
    ]


#: Up to this many rows, a task aggregates in Python (``range_messages``, the executor's
#: last event per key): an Arrow group-by costs about 0.2 ms to set up, more than the
#: rows of a small batch.
SMALL_BATCH = 64


def _one_partition_messages(batch: pa.Table) -> list[RangeSeen] | None:
    """``range_messages`` of a batch of one topic-partition (a range read's batch) by
    min and max alone, without setting up a group-by (about 0.15 ms a batch); None when
    the batch holds several (``_ts`` already appended, if any)."""
    topic, partition = batch.column("topic"), batch.column("partition")
    if topic.null_count or partition.null_count:
        return None
    first_topic, first_partition = topic[0], partition[0]
    if not (
        pc.all(pc.equal(topic, first_topic)).as_py()
        and pc.all(pc.equal(partition, first_partition)).as_py()
    ):
        return None
    offsets = pc.min_max(batch.column("offset"))
    stamps = pc.min_max(batch.column("_ts")) if "_ts" in batch.column_names else None
    return [
        RangeSeen(
            first_topic.as_py(),
            int(first_partition.as_py()),
            int(offsets["min"].as_py()),
            int(offsets["max"].as_py()) + 1,
            _int_or_none(stamps["min"].as_py()) if stamps is not None else None,
            _int_or_none(stamps["max"].as_py()) if stamps is not None else None,
        )
    ]


def _small_range_messages(batch: pa.Table) -> list[RangeSeen]:
    """``range_messages`` of a small batch (``_ts`` already appended, if any)."""
    stamps = batch.column("_ts").to_pylist() if "_ts" in batch.column_names else None
    seen: dict[tuple[str, int], list[Any]] = {}
    columns = zip(
        batch.column("topic").to_pylist(),
        batch.column("partition").to_pylist(),
        batch.column("offset").to_pylist(),
        stamps if stamps is not None else [None] * batch.num_rows,
    )
    for topic, partition, offset, ts in columns:
        agg = seen.get((topic, partition))
        if agg is None:
            seen[(topic, partition)] = [offset, offset, ts, ts]
            continue
        agg[0], agg[1] = min(agg[0], offset), max(agg[1], offset)
        if ts is not None:
            agg[2] = ts if agg[2] is None else min(agg[2], ts)
            agg[3] = ts if agg[3] is None else max(agg[3], ts)
    return [
        RangeSeen(topic, int(partition), int(lo), int(hi) + 1, _int_or_none(t0), _int_or_none(t1))
        for (topic, partition), (lo, hi, t0, t1) in seen.items()
    ]


def _int_or_none(v: Any) -> int | None:
    return None if v is None else int(v)


def _epoch_ms(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Kafka record timestamps as epoch milliseconds (int64)."""
    unit = column.type.unit if pa.types.is_timestamp(column.type) else "ms"
    raw = column.cast(pa.int64())
    factor = {"s": 1000, "ms": 1, "us": 1000, "ns": 1_000_000}[unit]
    return pc.multiply(raw, factor) if unit == "s" else pc.divide(raw, factor)


# ---------------------------------------------------------------- payload codecs


def _encode_value(v: Any) -> Any:
    if isinstance(v, bytes):
        return {"b64": base64.b64encode(v).decode()}
    if isinstance(v, decimal.Decimal):
        return {"dec": str(v)}
    if isinstance(v, uuid.UUID):
        return {"uuid": str(v)}
    return v


def _decode_value(v: Any) -> Any:
    if isinstance(v, dict):
        if "b64" in v:
            return base64.b64decode(v["b64"])
        if "dec" in v:
            return decimal.Decimal(v["dec"])
        if "uuid" in v:
            return uuid.UUID(v["uuid"])
    return v


#: ``DataFile``'s fields, in order: a shallow dict of them is what the encoder changes
#: (``dataclasses.asdict`` deep-copies every map first: most of a one-row table's
#: message encoding, about 0.4 ms of its 3.7 ms of task work in a profile).
_DATA_FILE_FIELDS = tuple(f.name for f in dataclasses.fields(DataFile))


def data_file_to_json(f: DataFile) -> str:
    d = {name: getattr(f, name) for name in _DATA_FILE_FIELDS}
    d["content"] = int(f.content)
    d["partition"] = [_encode_value(v) for v in f.partition]
    for name in ("lower_bounds", "upper_bounds"):
        if d[name] is not None:
            d[name] = {str(k): base64.b64encode(v).decode() for k, v in d[name].items()}
    for name in ("column_sizes", "value_counts", "null_value_counts", "nan_value_counts"):
        if d[name] is not None:
            d[name] = {str(k): v for k, v in d[name].items()}
    if d["key_metadata"] is not None:
        d["key_metadata"] = base64.b64encode(d["key_metadata"]).decode()
    return json.dumps(d, separators=(",", ":"))


def data_file_from_json(text: str) -> DataFile:
    d = json.loads(text)
    d["content"] = FileContent(d["content"])
    d["partition"] = tuple(_decode_value(v) for v in d["partition"])
    for name in ("lower_bounds", "upper_bounds"):
        if d[name] is not None:
            d[name] = {int(k): base64.b64decode(v) for k, v in d[name].items()}
    for name in ("column_sizes", "value_counts", "null_value_counts", "nan_value_counts"):
        if d[name] is not None:
            d[name] = {int(k): v for k, v in d[name].items()}
    if d["key_metadata"] is not None:
        d["key_metadata"] = base64.b64decode(d["key_metadata"])
    for name in ("split_offsets", "equality_ids"):
        if d[name] is not None:
            d[name] = tuple(d[name])
    return DataFile(**d)


def table_to_ipc(t: pa.Table | None) -> bytes | None:
    if t is None:
        return None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    data: bytes = sink.getvalue().to_pybytes()  # pyarrow is untyped: to_pybytes is bytes
    return data


def table_from_ipc(data: bytes | None) -> pa.Table | None:
    if data is None:
        return None
    return pa.ipc.open_stream(data).read_all()
