"""Table metadata JSON: read format versions 1-3, write version 3.

Pure: ``parse_metadata(bytes, source)`` and ``serialize_metadata(metadata)``.
Serialization is deterministic (fixed key order, compact separators) so that
``serialize(parse(serialize(m))) == serialize(m)`` byte for byte. Keys calving
does not model are kept in ``extra`` and written back unchanged.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from calving.commit.errors import CorruptFileError, SchemaError, UnsupportedFeatureError
from calving.commit.spec.list_text import LIST_TEXTS, Part
from calving.commit.spec.partition import PartitionSpec
from calving.commit.spec.schema import Schema
from calving.commit.spec.snapshot import (
    MetadataLogEntry,
    Snapshot,
    SnapshotLogEntry,
    SnapshotRef,
)
from calving.commit.spec.sort_order import SortOrder
from calving.commit.spec.statistics import StatisticsFile, statistics_from_json

MAIN_BRANCH = "main"

#: The first bytes of a gzip stream (RFC 1952).
GZIP_MAGIC = b"\x1f\x8b"

_KNOWN_KEYS = frozenset(
    {
        "format-version",
        "table-uuid",
        "location",
        "last-sequence-number",
        "last-updated-ms",
        "last-column-id",
        "current-schema-id",
        "schemas",
        "schema",
        "default-spec-id",
        "partition-specs",
        "partition-spec",
        "last-partition-id",
        "default-sort-order-id",
        "sort-orders",
        "properties",
        "current-snapshot-id",
        "refs",
        "snapshots",
        "statistics",
        "partition-statistics",
        "snapshot-log",
        "metadata-log",
        "next-row-id",
    }
)


@dataclass(frozen=True)
class TableMetadata:
    format_version: int
    table_uuid: str
    location: str
    last_sequence_number: int
    last_updated_ms: int
    last_column_id: int
    schemas: tuple[Schema, ...]
    current_schema_id: int
    partition_specs: tuple[PartitionSpec, ...]
    default_spec_id: int
    last_partition_id: int
    sort_orders: tuple[SortOrder, ...]
    default_sort_order_id: int
    properties: Mapping[str, str] = field(default_factory=dict)
    current_snapshot_id: int | None = None
    refs: Mapping[str, SnapshotRef] = field(default_factory=dict)
    snapshots: tuple[Snapshot, ...] = ()
    statistics: tuple[StatisticsFile, ...] = ()
    partition_statistics: tuple[Mapping[str, Any], ...] = ()
    snapshot_log: tuple[SnapshotLogEntry, ...] = ()
    metadata_log: tuple[MetadataLogEntry, ...] = ()
    next_row_id: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------ lookups

    @property
    def schema(self) -> Schema:
        return self.schema_by_id(self.current_schema_id)

    def schema_by_id(self, schema_id: int) -> Schema:
        for s in self.schemas:
            if s.schema_id == schema_id:
                return s
        raise SchemaError(f"table {self.table_uuid} has no schema with id {schema_id}")

    @property
    def spec(self) -> PartitionSpec:
        return self.spec_by_id(self.default_spec_id)

    def spec_by_id(self, spec_id: int) -> PartitionSpec:
        for s in self.partition_specs:
            if s.spec_id == spec_id:
                return s
        raise SchemaError(f"table {self.table_uuid} has no partition spec with id {spec_id}")

    @property
    def current_snapshot(self) -> Snapshot | None:
        if self.current_snapshot_id is None:
            return None
        return self.snapshot_by_id(self.current_snapshot_id)

    def snapshot_by_id(self, snapshot_id: int) -> Snapshot | None:
        # Indexed once per (immutable) metadata object: commits look snapshots up by id
        # several times, and a linear scan grows with history.
        index = self.__dict__.get("_snapshot_index")
        if index is None:
            index = {s.snapshot_id: s for s in self.snapshots}
            object.__setattr__(self, "_snapshot_index", index)
        return index.get(snapshot_id)

    def ancestors(self, snapshot_id: int | None = None) -> list[Snapshot]:
        """The current snapshot (or the one given) and its parents, newest first,
        stopping where history was expired."""
        by_id = {s.snapshot_id: s for s in self.snapshots}
        out: list[Snapshot] = []
        next_id = self.current_snapshot_id if snapshot_id is None else snapshot_id
        while next_id is not None and next_id in by_id:
            snap = by_id[next_id]
            out.append(snap)
            next_id = snap.parent_snapshot_id
        return out

    def with_changes(self, **changes: Any) -> TableMetadata:
        changed = replace(self, **changes)
        # Carry the snapshot index over instead of rebuilding it (O(history)) on the
        # next lookup: unchanged when the snapshots are, extended when one was appended.
        index = self.__dict__.get("_snapshot_index")
        if index is not None:
            new, old = changed.snapshots, self.snapshots
            if new is old:
                object.__setattr__(changed, "_snapshot_index", index)
            elif len(new) == len(old) + 1 and new[:-1] == old and new[-1].snapshot_id not in index:
                extended = dict(index)
                extended[new[-1].snapshot_id] = new[-1]
                object.__setattr__(changed, "_snapshot_index", extended)
        return changed


# ---------------------------------------------------------------- writing


def metadata_to_json(m: TableMetadata, *, histories: bool = True) -> dict[str, Any]:
    """The metadata as a JSON object; ``histories=False`` leaves the ``snapshots``,
    ``snapshot-log`` and ``metadata-log`` lists empty (their keys stay in place) for
    ``serialize_metadata``."""
    if m.format_version != 3:
        raise UnsupportedFeatureError(f"calving writes format-version 3, not {m.format_version}")
    out: dict[str, Any] = {
        "format-version": m.format_version,
        "table-uuid": m.table_uuid,
        "location": m.location,
        "last-sequence-number": m.last_sequence_number,
        "last-updated-ms": m.last_updated_ms,
        "last-column-id": m.last_column_id,
        "current-schema-id": m.current_schema_id,
        "schemas": [s.to_json() for s in m.schemas],
        "default-spec-id": m.default_spec_id,
        "partition-specs": [s.to_json() for s in m.partition_specs],
        "last-partition-id": m.last_partition_id,
        "default-sort-order-id": m.default_sort_order_id,
        "sort-orders": [s.to_json() for s in m.sort_orders],
        "properties": dict(m.properties),
        "current-snapshot-id": -1 if m.current_snapshot_id is None else m.current_snapshot_id,
        "refs": {name: ref.to_json() for name, ref in m.refs.items()},
        "snapshots": [s.to_json() for s in m.snapshots] if histories else [],
        "statistics": [s.to_json() for s in m.statistics],
        "partition-statistics": [dict(s) for s in m.partition_statistics],
        "snapshot-log": [e.to_json() for e in m.snapshot_log] if histories else [],
        "metadata-log": [e.to_json() for e in m.metadata_log] if histories else [],
        "next-row-id": m.next_row_id if m.next_row_id is not None else 0,
    }
    for key, value in m.extra.items():
        out.setdefault(key, value)
    return out


#: One encoder for every value (``json.dumps`` with options builds a new one per call).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def serialize_metadata(m: TableMetadata) -> bytes:
    """``metadata_to_json`` as compact JSON, the same bytes as ``json.dumps`` of it: the
    pieces of ``metadata_parts`` joined once."""
    return b"".join(piece for piece, _ in metadata_parts(m))


def metadata_parts(m: TableMetadata) -> list[Part]:
    """The compact JSON of ``metadata_to_json`` in pieces, each with whether it is a
    settled segment of a history list (``ListTexts.parts``).

    Written key by key so that the lists growing with history splice in cheaply: the
    text of ``snapshots``, ``snapshot-log`` and ``metadata-log`` is kept per table with
    the entry objects it was made from (``calving.commit.spec.list_text``), and the next
    metadata, which reuses those objects, encodes only its new entries. Every commit
    rewrites the whole history, so this keeps its encoding cost from growing with the
    snapshots (the bytes, unless compressed by ``metadata_gzip``, still do)."""
    parts: list[Part] = [(b"{", False)]
    for i, (key, value) in enumerate(metadata_to_json(m, histories=False).items()):
        parts.append((f"{',' if i else ''}{_dumps(key)}:".encode(), False))
        if key in _HISTORY_LISTS:
            items, encode = _HISTORY_LISTS[key](m)
            parts.extend(LIST_TEXTS.parts(m.table_uuid, key, items, encode))
        else:
            parts.append((_dumps(value).encode("utf-8"), False))
    parts.append((b"}", False))
    return parts


def task_metadata_json(m: TableMetadata) -> bytes:
    """The metadata a writer task needs (schemas, partition specs, sort orders, location,
    properties) as metadata JSON without what grows with every commit: no snapshots,
    refs, statistics or logs, and no current snapshot. Its size (pickled into every
    task) and parse time stay flat however long the table has been written."""
    bare = replace(m, current_snapshot_id=None, refs={}, statistics=(), partition_statistics=())
    return _dumps(metadata_to_json(bare, histories=False)).encode("utf-8")


def _metadata_log_text(entry: MetadataLogEntry) -> str:
    return _dumps(entry.to_json())


_HISTORY_LISTS: dict[str, Callable[[TableMetadata], tuple[Sequence[Any], Callable[[Any], str]]]] = {
    "snapshots": lambda m: (m.snapshots, Snapshot.to_json_text),
    "snapshot-log": lambda m: (m.snapshot_log, SnapshotLogEntry.to_json_text),
    "metadata-log": lambda m: (m.metadata_log, _metadata_log_text),
}


# ---------------------------------------------------------------- reading


def metadata_json(data: bytes, source: str) -> bytes:
    """The JSON of a metadata file's bytes: gzip-compressed files (Iceberg's
    ``write.metadata.compression-codec = gzip``, ``*.gz.metadata.json``) are known by
    their magic bytes, as no JSON text starts with them."""
    if not data.startswith(GZIP_MAGIC):
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise CorruptFileError(source, f"gzip table metadata does not decompress: {exc}") from None


def parse_metadata(data: bytes, source: str) -> TableMetadata:
    data = metadata_json(data, source)
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptFileError(source, f"table metadata is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise CorruptFileError(source, "table metadata JSON is not an object")
    try:
        return _from_json(obj, source)
    except CorruptFileError:
        raise
    except SchemaError as exc:
        raise CorruptFileError(source, f"invalid schema or spec: {exc}") from None
    except KeyError as exc:
        raise CorruptFileError(source, f"table metadata lacks {exc.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise CorruptFileError(source, f"malformed table metadata: {exc}") from None


def _from_json(obj: dict[str, Any], source: str) -> TableMetadata:
    version = int(obj["format-version"])
    if version not in (1, 2, 3):
        raise CorruptFileError(source, f"unsupported format-version {version}")

    if "schemas" in obj:
        schemas = tuple(Schema.from_json(s) for s in obj["schemas"])
        current_schema_id = int(obj["current-schema-id"])
    else:  # v1 tables may carry only the single "schema"
        schemas = (Schema.from_json(obj["schema"]),)
        current_schema_id = schemas[0].schema_id

    if "partition-specs" in obj:
        specs = tuple(PartitionSpec.from_json(s) for s in obj["partition-specs"])
        default_spec_id = int(obj["default-spec-id"])
    else:
        specs = (PartitionSpec.from_json({"spec-id": 0, "fields": obj["partition-spec"]}),)
        default_spec_id = 0
    last_partition_id = obj.get("last-partition-id")
    if last_partition_id is None:
        last_partition_id = max((f.field_id for s in specs for f in s.fields), default=999)

    sort_orders = tuple(SortOrder.from_json(s) for s in obj.get("sort-orders", []))
    if not sort_orders:
        sort_orders = (SortOrder.from_json({"order-id": 0, "fields": []}),)

    snapshots = tuple(Snapshot.from_json(s, source) for s in obj.get("snapshots") or [])
    current = obj.get("current-snapshot-id")
    current_id = None if current is None or int(current) == -1 else int(current)
    refs = {k: SnapshotRef.from_json(v) for k, v in (obj.get("refs") or {}).items()}
    if current_id is not None and MAIN_BRANCH not in refs:
        refs[MAIN_BRANCH] = SnapshotRef(current_id)

    last_seq = int(obj.get("last-sequence-number", 0))
    next_row_id = obj.get("next-row-id")
    if version == 3 and next_row_id is None:
        raise CorruptFileError(source, "format-version 3 metadata lacks 'next-row-id'")

    return TableMetadata(
        format_version=version,
        table_uuid=str(obj["table-uuid"]) if "table-uuid" in obj else "",
        location=str(obj["location"]),
        last_sequence_number=last_seq,
        last_updated_ms=int(obj["last-updated-ms"]),
        last_column_id=int(obj["last-column-id"]),
        schemas=schemas,
        current_schema_id=current_schema_id,
        partition_specs=specs,
        default_spec_id=default_spec_id,
        last_partition_id=int(last_partition_id),
        sort_orders=sort_orders,
        default_sort_order_id=int(obj.get("default-sort-order-id", 0)),
        properties={str(k): str(v) for k, v in (obj.get("properties") or {}).items()},
        current_snapshot_id=current_id,
        refs=refs,
        snapshots=snapshots,
        statistics=tuple(statistics_from_json(s, source) for s in obj.get("statistics") or ()),
        partition_statistics=tuple(obj.get("partition-statistics") or ()),
        snapshot_log=tuple(
            SnapshotLogEntry(int(e["timestamp-ms"]), int(e["snapshot-id"]))
            for e in obj.get("snapshot-log") or []
        ),
        metadata_log=tuple(
            MetadataLogEntry(int(e["timestamp-ms"]), str(e["metadata-file"]))
            for e in obj.get("metadata-log") or []
        ),
        next_row_id=None if next_row_id is None else int(next_row_id),
        extra={k: v for k, v in obj.items() if k not in _KNOWN_KEYS},
    )
