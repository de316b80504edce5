"""Commit messages: what an executor task hands the driver, as Arrow-friendly rows.

Kinds: ``data`` (a written data file as JSON; for keyed tables its identifier columns
in file row order as Arrow IPC), ``deletes`` (keys whose last event in the batch is a
delete), ``range`` (the Kafka offsets a task saw: ``[topic, partition, start, end)``),
``deadletter`` (a written dead-letter data file), ``deadletter-count`` (dead letters
sent elsewhere) and ``unknown`` (fields the records had and the table lacks).
"""

from __future__ import annotations

import base64
import dataclasses
import decimal
import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from commit.spec.data_file import DataFile, FileContent

MESSAGE_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("payload", pa.string()),
        ("keys", pa.binary()),
        ("count", pa.int64()),
    ]
)


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


def data_file_to_json(f: DataFile) -> str:
    d = dataclasses.asdict(f)
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
    return sink.getvalue().to_pybytes()


def table_from_ipc(data: bytes | None) -> pa.Table | None:
    if data is None:
        return None
    return pa.ipc.open_stream(data).read_all()


def message_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=MESSAGE_SCHEMA)


def data_file_message(f: DataFile, keys: pa.Table | None) -> dict[str, Any]:
    return {
        "kind": "data",
        "payload": data_file_to_json(f),
        "keys": table_to_ipc(keys),
        "count": f.record_count,
    }


def deletes_message(keys: pa.Table) -> dict[str, Any]:
    return {"kind": "deletes", "payload": "", "keys": table_to_ipc(keys), "count": keys.num_rows}


def range_messages(batch: pa.Table) -> list[dict[str, Any]]:
    """One message per topic-partition: the offsets ``[first, last + 1)`` seen."""
    if batch.num_rows == 0:
        return []
    g = batch.group_by(["topic", "partition"]).aggregate([("offset", "min"), ("offset", "max")])
    return [
        {
            "kind": "range",
            "payload": json.dumps(
                [r["topic"], r["partition"], r["offset_min"], r["offset_max"] + 1]
            ),
            "keys": None,
            "count": r["offset_max"] - r["offset_min"] + 1,
        }
        for r in g.to_pylist()
    ]


def unknown_fields_message(unknown: Mapping[str, Iterable[str]]) -> dict[str, Any]:
    payload = {path: sorted(kinds) for path, kinds in sorted(unknown.items())}
    return {"kind": "unknown", "payload": json.dumps(payload), "keys": None, "count": len(payload)}
