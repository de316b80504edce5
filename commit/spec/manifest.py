"""Manifest files: write format version 3, read versions 1-3 (pure, bytes only)."""

from __future__ import annotations

import datetime as _dt
import json
import uuid as _uuid
from dataclasses import dataclass, replace
from typing import Any, Sequence

from commit.errors import CorruptFileError
from commit.spec.avro_file import read_container, write_container
from commit.spec.avro_schemas import manifest_entry_schema, partition_avro_type
from commit.spec.data_file import (
    DataFile,
    EntryStatus,
    FileContent,
    ManifestContent,
    ManifestEntry,
    ManifestFile,
)
from commit.spec.types import PrimitiveType, StructType

_EPOCH = _dt.datetime(1970, 1, 1)
_EPOCH_TZ = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


@dataclass(frozen=True)
class Manifest:
    format_version: int
    content: ManifestContent
    spec_id: int
    schema_json: str
    partition_spec_json: str
    entries: tuple[ManifestEntry, ...]
    sync_marker: bytes


def _map_out(d: dict[int, Any] | None) -> list[dict[str, Any]] | None:
    return None if d is None else [{"key": k, "value": v} for k, v in sorted(d.items())]


def _map_in(items: list[dict[str, Any]] | None) -> dict[int, Any] | None:
    return None if items is None else {int(i["key"]): i["value"] for i in items}


def _partition_out(ptype: StructType, values: Sequence[Any]) -> dict[str, Any]:
    return {f.name: v for f, v in zip(ptype.fields, values)}


def _internal(t: Any, v: Any) -> Any:
    """fastavro turns logical types into Python objects; back to internal forms."""
    if v is None or not isinstance(t, PrimitiveType):
        return v
    n = t.name
    if n == "date" and isinstance(v, _dt.date):
        return (v - _dt.date(1970, 1, 1)).days
    if n in ("timestamp", "timestamptz") and isinstance(v, _dt.datetime):
        base = _EPOCH_TZ if v.tzinfo else _EPOCH
        delta = v - base
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if n == "time" and isinstance(v, _dt.time):
        return ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
    if n == "uuid" and not isinstance(v, _uuid.UUID):
        return _uuid.UUID(bytes=v) if isinstance(v, bytes) else _uuid.UUID(str(v))
    return v


def _entry_record(e: ManifestEntry, ptype: StructType) -> dict[str, Any]:
    f = e.data_file
    return {
        "status": int(e.status),
        "snapshot_id": e.snapshot_id,
        "sequence_number": e.sequence_number,
        "file_sequence_number": e.file_sequence_number,
        "data_file": {
            "content": int(f.content),
            "file_path": f.file_path,
            "file_format": f.file_format,
            "partition": _partition_out(ptype, f.partition),
            "record_count": f.record_count,
            "file_size_in_bytes": f.file_size_in_bytes,
            "column_sizes": _map_out(f.column_sizes),
            "value_counts": _map_out(f.value_counts),
            "null_value_counts": _map_out(f.null_value_counts),
            "nan_value_counts": _map_out(f.nan_value_counts),
            "lower_bounds": _map_out(f.lower_bounds),
            "upper_bounds": _map_out(f.upper_bounds),
            "key_metadata": f.key_metadata,
            "split_offsets": None if f.split_offsets is None else list(f.split_offsets),
            "equality_ids": None if f.equality_ids is None else list(f.equality_ids),
            "sort_order_id": f.sort_order_id,
            "first_row_id": f.first_row_id,
            "referenced_data_file": f.referenced_data_file,
            "content_offset": f.content_offset,
            "content_size_in_bytes": f.content_size_in_bytes,
        },
    }


def write_manifest(
    entries: Sequence[ManifestEntry],
    *,
    schema_json: str,
    partition_spec_json: str,
    spec_id: int,
    partition_type: StructType,
    content: ManifestContent,
    format_version: int = 3,
    sync_marker: bytes | None = None,
) -> bytes:
    if format_version != 3:
        raise ValueError("calving writes format-version 3 manifests only")
    schema = manifest_entry_schema(3, partition_avro_type(partition_type))
    metadata = {
        "schema": schema_json,
        "schema-id": str(json.loads(schema_json).get("schema-id", 0)),
        "partition-spec": partition_spec_json,
        "partition-spec-id": str(spec_id),
        "format-version": "3",
        "content": "data" if content == ManifestContent.DATA else "deletes",
    }
    records = [_entry_record(e, partition_type) for e in entries]
    return write_container(schema, records, metadata, sync_marker)


def _ptype_from_avro(writer_schema: dict[str, Any]) -> StructType:
    from commit.spec.types import NestedField, primitive_from_string

    data_file = next(f for f in writer_schema["fields"] if f["name"] == "data_file")["type"]
    part = next(f for f in data_file["fields"] if f["name"] == "partition")["type"]
    fields = []
    for f in part.get("fields", []):
        t = f["type"]
        t = next(x for x in t if x != "null") if isinstance(t, list) else t
        lt = t.get("logicalType") if isinstance(t, dict) else None
        base = t.get("type") if isinstance(t, dict) else t
        name = {"date": "date", "time-micros": "time", "timestamp-micros": "timestamp",
                "uuid": "uuid"}.get(lt or "", None)
        if lt == "decimal":
            name = f"decimal({t['precision']},{t['scale']})"
        if lt == "timestamp-micros" and t.get("adjust-to-utc"):
            name = "timestamptz"
        if name is None:
            name = {"bytes": "binary", "fixed": f"fixed[{t.get('size') if isinstance(t, dict) else 0}]"
                    }.get(base, base)
        fields.append(NestedField(int(f.get("field-id", 0)), f["name"], primitive_from_string(name)))
    return StructType(tuple(fields))


def read_manifest(
    data: bytes, source: str, *, partition_type: StructType | None = None
) -> Manifest:
    records, meta, sync, writer_schema = read_container(data, source)
    try:
        version = int(meta.get("format-version", "1"))
        content = ManifestContent.DELETES if meta.get("content") == "deletes" else \
            ManifestContent.DATA
        spec_id = int(meta.get("partition-spec-id", "0"))
        ptype = partition_type if partition_type is not None else _ptype_from_avro(writer_schema)
        entries = tuple(_entry_from_record(r, ptype, spec_id) for r in records)
    except CorruptFileError:
        raise
    except (KeyError, TypeError, ValueError, StopIteration, AttributeError) as exc:
        raise CorruptFileError(source, f"malformed manifest entry: {type(exc).__name__}: {exc}") \
            from None
    return Manifest(version, content, spec_id, meta.get("schema", ""),
                    meta.get("partition-spec", "[]"), entries, sync)


def _entry_from_record(r: dict[str, Any], ptype: StructType, spec_id: int) -> ManifestEntry:
    d = r["data_file"]
    part = d.get("partition") or {}
    partition = tuple(_internal(f.field_type, part.get(f.name)) for f in ptype.fields)
    split = d.get("split_offsets")
    eq = d.get("equality_ids")
    df = DataFile(
        content=FileContent(d.get("content", 0)),
        file_path=d["file_path"],
        file_format=str(d["file_format"]).upper(),
        partition=partition,
        record_count=int(d["record_count"]),
        file_size_in_bytes=int(d["file_size_in_bytes"]),
        column_sizes=_map_in(d.get("column_sizes")),
        value_counts=_map_in(d.get("value_counts")),
        null_value_counts=_map_in(d.get("null_value_counts")),
        nan_value_counts=_map_in(d.get("nan_value_counts")),
        lower_bounds=_map_in(d.get("lower_bounds")),
        upper_bounds=_map_in(d.get("upper_bounds")),
        key_metadata=d.get("key_metadata"),
        split_offsets=None if split is None else tuple(split),
        equality_ids=None if eq is None else tuple(eq),
        sort_order_id=d.get("sort_order_id"),
        first_row_id=d.get("first_row_id"),
        referenced_data_file=d.get("referenced_data_file"),
        content_offset=d.get("content_offset"),
        content_size_in_bytes=d.get("content_size_in_bytes"),
        spec_id=spec_id,
    )
    return ManifestEntry(EntryStatus(r["status"]), r.get("snapshot_id"),
                         r.get("sequence_number"), r.get("file_sequence_number"), df)


def inherit(entries: Sequence[ManifestEntry], manifest: ManifestFile) -> list[ManifestEntry]:
    """Fill values a manifest leaves to its manifest-list entry (spec: inheritance)."""
    out: list[ManifestEntry] = []
    next_row_id = manifest.first_row_id
    for e in entries:
        snapshot_id = e.snapshot_id if e.snapshot_id is not None else manifest.added_snapshot_id
        seq, file_seq = e.sequence_number, e.file_sequence_number
        if e.status == EntryStatus.ADDED:
            seq = manifest.sequence_number if seq is None else seq
            file_seq = manifest.sequence_number if file_seq is None else file_seq
        df = e.data_file
        if df.content == FileContent.DATA and next_row_id is not None:
            if df.first_row_id is None:
                df = replace(df, first_row_id=next_row_id)
                next_row_id += df.record_count
        out.append(ManifestEntry(e.status, snapshot_id, seq, file_seq, df))
    return out
