"""The content of manifests and manifest lists, as plain frozen values.

Partition tuples hold values in partition-spec field order, in calving's internal
representation (see ``calving.commit.spec.values``): ints for dates, times and timestamps,
``Decimal``, ``uuid.UUID``, ``bytes`` for fixed and binary. Bounds are already
single-value serialized bytes.
"""

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
    partition: tuple[Any, ...]
    record_count: int
    file_size_in_bytes: int
    column_sizes: dict[int, int] | None = None
    value_counts: dict[int, int] | None = None
    null_value_counts: dict[int, int] | None = None
    nan_value_counts: dict[int, int] | None = None
    lower_bounds: dict[int, bytes] | None = None
    upper_bounds: dict[int, bytes] | None = None
    key_metadata: bytes | None = None
    split_offsets: tuple[int, ...] | None = None
    equality_ids: tuple[int, ...] | None = None
    sort_order_id: int | None = None
    first_row_id: int | None = None  # null for new data files: inherited on read
    referenced_data_file: str | None = None  # deletion vectors: the data file they cover
    content_offset: int | None = None  # deletion vectors: blob offset in the Puffin file
    content_size_in_bytes: int | None = None  # deletion vectors: blob length
    spec_id: int = 0  # not stored per entry: the manifest's partition-spec-id


@dataclass(frozen=True)
class ManifestEntry:
    status: EntryStatus
    snapshot_id: int | None  # null = inherit the manifest's added_snapshot_id
    sequence_number: int | None  # data sequence number; null (ADDED only) = inherit
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
    """One manifest-list entry. Reading a v1 list, absent counts and sequence
    numbers read as 0 and content as DATA."""

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
