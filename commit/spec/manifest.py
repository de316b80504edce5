"""Manifest files: write format versions 1-3 (calving writes 3), read 1-3. Pure: bytes
in, values out, and back byte for byte."""

from __future__ import annotations

import decimal as _decimal
import functools
import json
import uuid as _uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from calving.commit.errors import CorruptFileError, SchemaError
from calving.commit.spec.avro_file import (
    AvroContainer,
    read_container,
    schema_text,
    write_container,
)
from calving.commit.spec.avro_schemas import (
    DATA_FILE_FIELD_ID,
    DATA_FILE_FIELDS,
    ENTRY_FIELDS,
    FORMAT_VERSIONS,
    PARTITION_FIELD_ID,
    V1_BLOCK_SIZE,
    RecordFields,
    avro_name,
    decimal_required_bytes,
    iceberg_primitive,
    manifest_entry_schema,
    non_null,
)
from calving.commit.spec.data_file import (
    DataFile,
    EntryStatus,
    FileContent,
    ManifestContent,
    ManifestEntry,
    ManifestFile,
)
from calving.commit.spec.types import NestedField, PrimitiveType, StructType
from calving.commit.spec.values import decimal_from_unscaled, unscaled_value

# What decoding a well-framed file with ill-fitting records can raise.
_MALFORMED = (
    SchemaError,
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    IndexError,
    OverflowError,
)
_CONTENT_NAMES = {ManifestContent.DATA: "data", ManifestContent.DELETES: "deletes"}
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_INT32_TYPES = frozenset({"int", "date"})
_INT64_TYPES = frozenset(
    {"long", "time", "timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns"}
)


@dataclass(frozen=True)
class Manifest:
    """A decoded manifest. ``partition_type`` is the one given to ``read_manifest`` or
    derived from the file's Avro schema; passing the fields back to ``write_manifest``
    reproduces a calving-written file byte for byte."""

    format_version: int
    content: ManifestContent
    spec_id: int
    schema_json: str
    partition_spec_json: str
    entries: tuple[ManifestEntry, ...]
    sync_marker: bytes
    partition_type: StructType


# ---------------------------------------------------------------- partition values


def _partition_value_out(field: NestedField, value: Any) -> Any:
    """An internal partition value as the physical Avro value of its type."""
    if value is None:
        return None
    ptype = _primitive(field)
    name = ptype.name
    ok: bool
    if name == "boolean":
        ok = isinstance(value, bool)
    elif name in _INT32_TYPES or name in _INT64_TYPES:
        low, high = _INT32 if name in _INT32_TYPES else _INT64
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    elif name in ("float", "double"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif name == "string":
        ok = isinstance(value, str)
    elif name == "binary":
        ok = isinstance(value, bytes)
    elif name == "fixed":
        ok = isinstance(value, bytes) and len(value) == ptype.length
    elif name == "uuid":
        ok = isinstance(value, _uuid.UUID)
        value = value.bytes if ok else value
    elif name == "decimal":
        ok = isinstance(value, _decimal.Decimal)
        if ok:
            unscaled = unscaled_value(value, ptype.scale)
            ok = abs(unscaled) < 10**ptype.precision
            size = decimal_required_bytes(ptype.precision)
            value = unscaled.to_bytes(size, "big", signed=True) if ok else value
    else:
        ok = False
    if not ok:
        raise SchemaError(f"partition field {field.name!r} of type {ptype} cannot hold {value!r}")
    return value


def _partition_value_in(ptype: PrimitiveType, raw: Any) -> Any:
    """A physical Avro partition value as the internal value of ``ptype``."""
    if raw is None:
        return None
    name = ptype.name
    if name == "boolean" and isinstance(raw, bool):
        return raw
    if isinstance(raw, bool):
        pass
    elif (name in _INT32_TYPES or name in _INT64_TYPES) and isinstance(raw, int):
        return raw
    elif name in ("float", "double") and isinstance(raw, (int, float)):
        return float(raw)
    elif (name == "string" and isinstance(raw, str)) or (
        name in ("binary", "fixed") and isinstance(raw, bytes)
    ):
        return raw
    elif name == "uuid" and isinstance(raw, bytes) and len(raw) == 16:
        return _uuid.UUID(bytes=raw)
    elif name == "uuid" and isinstance(raw, str):
        return _uuid.UUID(raw)
    elif name == "decimal" and isinstance(raw, bytes) and raw:
        return decimal_from_unscaled(int.from_bytes(raw, "big", signed=True), ptype.scale)
    raise SchemaError(f"a partition value of type {ptype} is stored as {raw!r}")


def _primitive(field: NestedField) -> PrimitiveType:
    if not isinstance(field.field_type, PrimitiveType):
        raise SchemaError(f"partition field {field.name!r} is not a primitive type")
    return field.field_type


def _partition_type_of(avro_fields: list[Any]) -> StructType:
    named: dict[str, Any] = {}
    fields = []
    for avro_field in avro_fields:
        field_id = avro_field.get("field-id")
        if not isinstance(field_id, int):
            raise SchemaError(f"partition field {avro_field.get('name')!r} has no field-id")
        ptype = iceberg_primitive(avro_field.get("type"), named)
        fields.append(NestedField(field_id, avro_field["name"], ptype))
    return StructType(tuple(fields))


# ---------------------------------------------------------------- writing


def _map_out(values: dict[int, Any] | None) -> list[dict[str, Any]] | None:
    return None if values is None else [{"key": k, "value": v} for k, v in values.items()]


def _list_out(values: tuple[int, ...] | None) -> list[int] | None:
    return None if values is None else list(values)


def _check_fits(entry: ManifestEntry, format_version: int, content: ManifestContent) -> None:
    """Refuse to drop values the target format version has no field for."""
    f = entry.data_file
    lost: list[str] = []
    if format_version < 3:
        lost += [
            n
            for n in ("first_row_id", "content_offset", "content_size_in_bytes")
            if getattr(f, n) is not None
        ]
    if format_version == 1:
        lost += [n for n in ("equality_ids", "referenced_data_file") if getattr(f, n) is not None]
        if f.content != FileContent.DATA or content != ManifestContent.DATA:
            lost.append("content (v1 manifests hold data files only)")
        if entry.snapshot_id is None:
            lost.append("snapshot_id (required in v1)")
    if lost:
        raise ValueError(f"{f.file_path}: v{format_version} manifests cannot hold {lost}")


def _entry_record(entry: ManifestEntry, partition_type: StructType) -> dict[str, Any]:
    f = entry.data_file
    if len(f.partition) != len(partition_type.fields):
        raise SchemaError(
            f"{f.file_path}: partition has {len(f.partition)} values, the partition type "
            f"{len(partition_type.fields)} fields"
        )
    partition = {
        avro_name(field.name): _partition_value_out(field, value)
        for field, value in zip(partition_type.fields, f.partition)
    }
    data_file = {
        "content": int(f.content),
        "file_path": f.file_path,
        "file_format": f.file_format,
        "partition": partition,
        "record_count": f.record_count,
        "file_size_in_bytes": f.file_size_in_bytes,
        "block_size_in_bytes": V1_BLOCK_SIZE,
        "column_sizes": _map_out(f.column_sizes),
        "value_counts": _map_out(f.value_counts),
        "null_value_counts": _map_out(f.null_value_counts),
        "nan_value_counts": _map_out(f.nan_value_counts),
        "lower_bounds": _map_out(f.lower_bounds),
        "upper_bounds": _map_out(f.upper_bounds),
        "key_metadata": f.key_metadata,
        "split_offsets": _list_out(f.split_offsets),
        "equality_ids": _list_out(f.equality_ids),
        "sort_order_id": f.sort_order_id,
        "first_row_id": f.first_row_id,
        "referenced_data_file": f.referenced_data_file,
        "content_offset": f.content_offset,
        "content_size_in_bytes": f.content_size_in_bytes,
    }
    return {
        "status": int(entry.status),
        "snapshot_id": entry.snapshot_id,
        "sequence_number": entry.sequence_number,
        "file_sequence_number": entry.file_sequence_number,
        "data_file": data_file,
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
    """The manifest file holding ``entries``, deflate-compressed like Java's.

    Null sequence numbers and first row ids are written null (inherited on read).
    Without ``sync_marker`` one is derived from the content: equal input, equal bytes.
    """
    if format_version not in FORMAT_VERSIONS:
        raise ValueError(f"cannot write a format version {format_version} manifest")
    for entry in entries:
        _check_fits(entry, format_version, content)
    schema_id = json.loads(schema_json).get("schema-id", 0) if schema_json else 0
    metadata = {
        "schema": schema_json,
        "schema-id": str(schema_id),
        "partition-spec": partition_spec_json,
        "partition-spec-id": str(spec_id),
        "format-version": str(format_version),
    }
    if format_version >= 2:
        metadata["content"] = _CONTENT_NAMES[ManifestContent(content)]
    records = [_entry_record(e, partition_type) for e in entries]
    text = _entry_schema_text(format_version, partition_type)
    return write_container(text, records, metadata, sync_marker)


@functools.lru_cache(maxsize=64)
def _entry_schema_text(format_version: int, partition_type: StructType) -> str:
    return schema_text(manifest_entry_schema(format_version, partition_type))


# ---------------------------------------------------------------- reading


def _int_map_in(raw: Any, value_kind: type, what: str) -> dict[int, Any] | None:
    if raw is None:
        return None
    out: dict[int, Any] = {}
    for item in raw:
        key, value = item.get("key"), item.get("value")
        if not isinstance(key, int) or isinstance(key, bool) or not isinstance(value, value_kind):
            raise SchemaError(f"{what} has a malformed entry {item!r}")
        out[key] = value
    return out


def _int_list_in(raw: Any, what: str) -> tuple[int, ...] | None:
    if raw is None:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in raw):
        raise SchemaError(f"{what} holds a non-integer")
    return tuple(raw)


#: The data file's column metrics: (field name, field id, value type), the names those
#: of ``DATA_FILE_FIELDS`` (and of ``DataFile``).
_METRIC_MAPS = tuple(
    (DATA_FILE_FIELDS[field_id][0], field_id, kind)
    for field_id, kind in (
        (108, int),
        (109, int),
        (110, int),
        (137, int),
        (125, bytes),
        (128, bytes),
    )
)
_NO_METRICS: dict[str, Any] = {name: None for name, _, _ in _METRIC_MAPS}


class _EntryDecoder:
    """Turns decoded Avro records of one manifest into ``ManifestEntry`` values."""

    def __init__(
        self,
        container: AvroContainer,
        version: int,
        spec_id: int,
        ptype: StructType | None,
        metrics: bool = True,
    ) -> None:
        self.version = version
        self.spec_id = spec_id
        self.metrics = metrics
        self.entry = RecordFields(container.schema, "manifest_entry", ENTRY_FIELDS)
        self.data_file = RecordFields(
            self.entry.type_of(DATA_FILE_FIELD_ID), "data_file", DATA_FILE_FIELDS
        )
        partition_schema = non_null(self.data_file.types.get(PARTITION_FIELD_ID))
        if not isinstance(partition_schema, dict) or not isinstance(
            partition_schema.get("fields"), list
        ):
            raise SchemaError("data_file has no partition record")
        self.partition = RecordFields(partition_schema, "partition", {})
        self.partition_type = (
            _partition_type_of(partition_schema["fields"]) if ptype is None else ptype
        )

    def skippable(self, record: dict[str, Any]) -> bool:
        """An EXISTING entry that passes no row ids on to the entries after it."""
        if self.entry.value(record, 0, int, True) != EntryStatus.EXISTING:
            return False
        raw = self.entry.value(record, DATA_FILE_FIELD_ID, dict, True)
        content = self.data_file.value(raw, 134, int, False)
        return bool(content) or self.data_file.value(raw, 142, int, False) is not None

    def _metrics(self, raw: dict[str, Any]) -> dict[str, Any]:
        d = self.data_file
        return {
            name: _int_map_in(d.get(raw, field_id), kind, name)
            for name, field_id, kind in _METRIC_MAPS
        }

    def decode(self, record: dict[str, Any]) -> ManifestEntry:
        e, d = self.entry, self.data_file
        raw = e.value(record, DATA_FILE_FIELD_ID, dict, True)
        raw_partition = d.value(raw, PARTITION_FIELD_ID, dict, True)
        partition = tuple(
            _partition_value_in(_primitive(f), self.partition.get(raw_partition, f.field_id))
            for f in self.partition_type.fields
        )
        content = d.value(raw, 134, int, self.version >= 2)
        maps = self._metrics(raw) if self.metrics else _NO_METRICS
        data_file = DataFile(
            content=FileContent(0 if content is None else content),
            file_path=d.value(raw, 100, str, True),
            file_format=d.value(raw, 101, str, True).upper(),
            partition=partition,
            record_count=d.value(raw, 103, int, True),
            file_size_in_bytes=d.value(raw, 104, int, True),
            **maps,
            key_metadata=d.value(raw, 131, bytes, False),
            split_offsets=_int_list_in(d.get(raw, 132), "split_offsets"),
            equality_ids=_int_list_in(d.get(raw, 135), "equality_ids"),
            sort_order_id=d.value(raw, 140, int, False),
            first_row_id=d.value(raw, 142, int, False),
            referenced_data_file=d.value(raw, 143, str, False),
            content_offset=d.value(raw, 144, int, False),
            content_size_in_bytes=d.value(raw, 145, int, False),
            spec_id=self.spec_id,
        )
        sequence_number = e.value(record, 3, int, False)
        file_sequence_number = e.value(record, 4, int, False)
        if self.version == 1:  # spec: v1 sequence numbers read as 0
            sequence_number = 0 if sequence_number is None else sequence_number
            file_sequence_number = 0 if file_sequence_number is None else file_sequence_number
        return ManifestEntry(
            status=EntryStatus(e.value(record, 0, int, True)),
            snapshot_id=e.value(record, 1, int, self.version == 1),
            sequence_number=sequence_number,
            file_sequence_number=file_sequence_number,
            data_file=data_file,
        )


def _metadata_int(metadata: dict[str, str], key: str, default: int) -> int:
    text = metadata.get(key)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise SchemaError(f"metadata {key}={text!r} is not an integer") from None


def read_manifest(
    data: bytes,
    source: str,
    *,
    partition_type: StructType | None = None,
    skip_existing: bool = False,
    metrics: bool = True,
) -> Manifest:
    """Decode a v1, v2 or v3 manifest. Without ``partition_type`` it is derived from
    the file's Avro schema (names as written, ids and types exact). Corrupt bytes
    raise ``CorruptFileError`` naming ``source``. ``skip_existing``: EXISTING entries
    are left out undecoded (what a snapshot changed is in its ADDED and DELETED
    entries), except a data file without a ``first_row_id``, whose rows take ids the
    later entries' inherited ``first_row_id`` depends on. ``metrics`` False: the column
    metrics (sizes, counts, bounds) are left None, undecoded, for a reader that needs
    only which files an entry names (never for entries that are written again)."""
    container = read_container(data, source)
    meta = container.metadata
    try:
        version = _metadata_int(meta, "format-version", 1)
        if version not in FORMAT_VERSIONS:
            raise SchemaError(f"unknown format-version {version}")
        content_name = meta.get("content", "data")
        if content_name not in ("data", "deletes"):
            raise SchemaError(f"unknown manifest content {content_name!r}")
        for key in ("schema", "partition-spec"):
            if key not in meta:
                raise SchemaError(f"metadata lacks {key!r}")
        spec_id = _metadata_int(meta, "partition-spec-id", 0)
        decoder = _EntryDecoder(container, version, spec_id, partition_type, metrics)
        records = container.records
        if skip_existing:
            records = tuple(r for r in records if not decoder.skippable(r))
        entries = tuple(decoder.decode(r) for r in records)
    except _MALFORMED as exc:
        raise CorruptFileError(source, f"not a valid manifest: {exc}") from None
    return Manifest(
        format_version=version,
        content=ManifestContent.DELETES if content_name == "deletes" else ManifestContent.DATA,
        spec_id=spec_id,
        schema_json=meta["schema"],
        partition_spec_json=meta["partition-spec"],
        entries=entries,
        sync_marker=container.sync_marker,
        partition_type=decoder.partition_type,
    )


# ---------------------------------------------------------------- inheritance


def inherit(entries: Sequence[ManifestEntry], manifest: ManifestFile) -> list[ManifestEntry]:
    """Fill what a manifest leaves to its manifest-list entry (spec: sequence number
    and first row id inheritance): null snapshot ids, the null sequence numbers of
    ADDED entries, and null first row ids of live data files, which take the
    manifest's ``first_row_id`` plus the rows of the live data files before them that
    were null too. DELETED entries get no row ids, as in Java."""
    out: list[ManifestEntry] = []
    next_row_id = manifest.first_row_id if manifest.content == ManifestContent.DATA else None
    for e in entries:
        snapshot_id = manifest.added_snapshot_id if e.snapshot_id is None else e.snapshot_id
        seq, file_seq = e.sequence_number, e.file_sequence_number
        if e.status == EntryStatus.ADDED:
            seq = manifest.sequence_number if seq is None else seq
            file_seq = manifest.sequence_number if file_seq is None else file_seq
        f = e.data_file
        if (
            next_row_id is not None
            and f.first_row_id is None
            and f.content == FileContent.DATA
            and e.status != EntryStatus.DELETED
        ):
            f = replace(f, first_row_id=next_row_id)
            next_row_id += f.record_count
        if f.spec_id != manifest.partition_spec_id:
            f = replace(f, spec_id=manifest.partition_spec_id)
        out.append(ManifestEntry(e.status, snapshot_id, seq, file_seq, f))
    return out
