"""The content of manifests and manifest lists, as plain frozen values."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class FileContent(IntEnum):
    DATA = 0
    POSITION_DELETES = 1
    EQUALITY_DELETES = 2


class EntryStatus(IntEnum):
    EXISTING = 0
    ADDED = 1
    DELETED = 2


class ManifestContent(IntEnum):
    DATA = 0
    DELETES = 1


@dataclass(frozen=True)
class DataFile:
    content: FileContent
    file_path: str
    file_format: str  # PARQUET | AVRO | ORC | PUFFIN
    partition: tuple[Any, ...]  # spec field order, internal value forms
    record_count: int
    file_size_in_bytes: int
    column_sizes: dict[int, int] | None = None
    value_counts: dict[int, int] | None = None
    null_value_counts: dict[int, int] | None = None
    nan_value_counts: dict[int, int] | None = None
    lower_bounds: dict[int, bytes] | None = None  # single-value serialized
    upper_bounds: dict[int, bytes] | None = None
    key_metadata: bytes | None = None
    split_offsets: tuple[int, ...] | None = None
    equality_ids: tuple[int, ...] | None = None
    sort_order_id: int | None = None
    first_row_id: int | None = None
    referenced_data_file: str | None = None
    content_offset: int | None = None
    content_size_in_bytes: int | None = None
    spec_id: int = 0  # from the manifest, not stored per entry


@dataclass(frozen=True)
class ManifestEntry:
    status: EntryStatus
    snapshot_id: int | None
    sequence_number: int | None  # data sequence number; null = inherit
    file_sequence_number: int | None
    data_file: DataFile


@dataclass(frozen=True)
class FieldSummary:
    contains_null: bool
    contains_nan: bool | None = None
    lower_bound: bytes | None = None
    upper_bound: bytes | None = None


@dataclass(frozen=True)
class ManifestFile:
    manifest_path: str
    manifest_length: int
    partition_spec_id: int
    content: ManifestContent
    sequence_number: int
    min_sequence_number: int
    added_snapshot_id: int
    added_files_count: int
    existing_files_count: int
    deleted_files_count: int
    added_rows_count: int
    existing_rows_count: int
    deleted_rows_count: int
    partitions: tuple[FieldSummary, ...] | None = None
    key_metadata: bytes | None = None
    first_row_id: int | None = None
