"""Snapshots, refs and log entries of table metadata, and summary counters."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from calving.commit.errors import CorruptFileError

OPERATIONS = ("append", "replace", "overwrite", "delete")

# Summary counters calving maintains (Iceberg's SnapshotSummary names).
TOTAL_COUNTERS = (
    "total-records",
    "total-files-size",
    "total-data-files",
    "total-delete-files",
    "total-position-deletes",
    "total-equality-deletes",
)


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    parent_snapshot_id: int | None
    sequence_number: int
    timestamp_ms: int
    manifest_list: str
    summary: Mapping[str, str]
    schema_id: int | None = None
    first_row_id: int | None = None
    added_rows: int | None = None

    @property
    def operation(self) -> str:
        return self.summary.get("operation", "append")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"snapshot-id": self.snapshot_id}
        if self.parent_snapshot_id is not None:
            out["parent-snapshot-id"] = self.parent_snapshot_id
        out["sequence-number"] = self.sequence_number
        out["timestamp-ms"] = self.timestamp_ms
        out["summary"] = dict(self.summary)
        out["manifest-list"] = self.manifest_list
        if self.schema_id is not None:
            out["schema-id"] = self.schema_id
        if self.first_row_id is not None:
            out["first-row-id"] = self.first_row_id
        if self.added_rows is not None:
            out["added-rows"] = self.added_rows
        return out

    def to_json_text(self) -> str:
        """``to_json`` as compact JSON text, encoded once per snapshot object: snapshots
        are immutable and every commit rewrites all of them into the table metadata."""
        text = self.__dict__.get("_json_text")
        if text is None:
            text = json.dumps(
                self.to_json(), separators=(",", ":"), ensure_ascii=False, allow_nan=False
            )
            object.__setattr__(self, "_json_text", text)
        return text

    @staticmethod
    def from_json(obj: Mapping[str, Any], source: str) -> Snapshot:
        try:
            if "manifest-list" not in obj:
                raise CorruptFileError(
                    source,
                    f"snapshot {obj.get('snapshot-id')} has no manifest-list "
                    "(v1 inline manifests are not supported)",
                )
            summary = dict(obj.get("summary") or {"operation": "append"})
            return Snapshot(
                snapshot_id=int(obj["snapshot-id"]),
                parent_snapshot_id=_opt_int(obj.get("parent-snapshot-id")),
                sequence_number=int(obj.get("sequence-number", 0)),
                timestamp_ms=int(obj["timestamp-ms"]),
                manifest_list=str(obj["manifest-list"]),
                summary={str(k): str(v) for k, v in summary.items()},
                schema_id=_opt_int(obj.get("schema-id")),
                first_row_id=_opt_int(obj.get("first-row-id")),
                added_rows=_opt_int(obj.get("added-rows")),
            )
        except KeyError as exc:
            raise CorruptFileError(source, f"snapshot lacks {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise CorruptFileError(source, f"snapshot has a malformed value: {exc}") from None


@dataclass(frozen=True)
class SnapshotRef:
    snapshot_id: int
    ref_type: str = "branch"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"snapshot-id": self.snapshot_id, "type": self.ref_type}
        out.update(self.extra)
        return out

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> SnapshotRef:
        extra = {k: v for k, v in obj.items() if k not in ("snapshot-id", "type")}
        return SnapshotRef(int(obj["snapshot-id"]), str(obj.get("type", "branch")), extra)


@dataclass(frozen=True)
class SnapshotLogEntry:
    timestamp_ms: int
    snapshot_id: int

    def to_json(self) -> dict[str, Any]:
        return {"timestamp-ms": self.timestamp_ms, "snapshot-id": self.snapshot_id}

    def to_json_text(self) -> str:
        """Compact JSON text, made once per entry object (the log is rewritten whole by
        every commit, its entries are reused)."""
        text = self.__dict__.get("_json_text")
        if text is None:
            text = (
                f'{{"timestamp-ms":{int(self.timestamp_ms)},"snapshot-id":{int(self.snapshot_id)}}}'
            )
            object.__setattr__(self, "_json_text", text)
        return text


@dataclass(frozen=True)
class MetadataLogEntry:
    timestamp_ms: int
    metadata_file: str

    def to_json(self) -> dict[str, Any]:
        return {"timestamp-ms": self.timestamp_ms, "metadata-file": self.metadata_file}


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def updated_totals(previous: Mapping[str, str] | None, deltas: Mapping[str, int]) -> dict[str, str]:
    """Carry the ``total-*`` counters forward by the given signed deltas.

    ``deltas`` uses the total names (``total-records`` etc.). A previous summary
    missing a counter (written by a tool that does not keep it) restarts it from 0,
    as Java does.
    """
    out: dict[str, str] = {}
    for name in TOTAL_COUNTERS:
        base = int(previous.get(name, "0")) if previous else 0
        out[name] = str(max(0, base + deltas.get(name, 0)))
    return out
