"""Manifest lists: write format version 3, read versions 1-3 (pure, bytes only)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from commit.errors import CorruptFileError
from commit.spec.avro_file import read_container, write_container
from commit.spec.avro_schemas import manifest_file_schema
from commit.spec.data_file import FieldSummary, ManifestContent, ManifestFile


@dataclass(frozen=True)
class ManifestList:
    format_version: int
    manifests: tuple[ManifestFile, ...]
    metadata: dict[str, str]
    sync_marker: bytes


def _record(m: ManifestFile) -> dict[str, Any]:
    return {
        "manifest_path": m.manifest_path,
        "manifest_length": m.manifest_length,
        "partition_spec_id": m.partition_spec_id,
        "content": int(m.content),
        "sequence_number": m.sequence_number,
        "min_sequence_number": m.min_sequence_number,
        "added_snapshot_id": m.added_snapshot_id,
        "added_files_count": m.added_files_count,
        "existing_files_count": m.existing_files_count,
        "deleted_files_count": m.deleted_files_count,
        "added_rows_count": m.added_rows_count,
        "existing_rows_count": m.existing_rows_count,
        "deleted_rows_count": m.deleted_rows_count,
        "partitions": None if m.partitions is None else [
            {"contains_null": s.contains_null, "contains_nan": s.contains_nan,
             "lower_bound": s.lower_bound, "upper_bound": s.upper_bound}
            for s in m.partitions
        ],
        "key_metadata": m.key_metadata,
        "first_row_id": m.first_row_id,
    }


def write_manifest_list(
    manifests: Sequence[ManifestFile],
    *,
    snapshot_id: int,
    parent_snapshot_id: int | None,
    sequence_number: int,
    first_row_id: int | None,
    format_version: int = 3,
    sync_marker: bytes | None = None,
) -> bytes:
    if format_version != 3:
        raise ValueError("calving writes format-version 3 manifest lists only")
    metadata = {
        "snapshot-id": str(snapshot_id),
        "parent-snapshot-id": "null" if parent_snapshot_id is None else str(parent_snapshot_id),
        "sequence-number": str(sequence_number),
        "format-version": "3",
    }
    if first_row_id is not None:
        metadata["first-row-id"] = str(first_row_id)
    return write_container(manifest_file_schema(3), [_record(m) for m in manifests], metadata,
                           sync_marker)


def _from_record(r: dict[str, Any]) -> ManifestFile:
    def first(*names: str, default: Any = 0) -> Any:
        for n in names:
            if r.get(n) is not None:
                return r[n]
        return default

    parts = r.get("partitions")
    return ManifestFile(
        manifest_path=r["manifest_path"],
        manifest_length=int(r["manifest_length"]),
        partition_spec_id=int(r["partition_spec_id"]),
        content=ManifestContent(r.get("content", 0)),
        sequence_number=int(r.get("sequence_number", 0)),
        min_sequence_number=int(r.get("min_sequence_number", 0)),
        added_snapshot_id=int(first("added_snapshot_id")),
        added_files_count=int(first("added_files_count", "added_data_files_count")),
        existing_files_count=int(first("existing_files_count", "existing_data_files_count")),
        deleted_files_count=int(first("deleted_files_count", "deleted_data_files_count")),
        added_rows_count=int(first("added_rows_count")),
        existing_rows_count=int(first("existing_rows_count")),
        deleted_rows_count=int(first("deleted_rows_count")),
        partitions=None if parts is None else tuple(
            FieldSummary(bool(p["contains_null"]), p.get("contains_nan"), p.get("lower_bound"),
                         p.get("upper_bound")) for p in parts),
        key_metadata=r.get("key_metadata"),
        first_row_id=r.get("first_row_id"),
    )


def read_manifest_list(data: bytes, source: str) -> ManifestList:
    records, meta, sync, _ = read_container(data, source)
    try:
        manifests = tuple(_from_record(r) for r in records)
        version = int(meta.get("format-version", "1"))
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptFileError(source, f"malformed manifest list entry: {type(exc).__name__}: "
                               f"{exc}") from None
    return ManifestList(version, manifests, meta, sync)
