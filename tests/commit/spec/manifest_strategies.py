"""Hypothesis strategies for manifest entries, partition types and manifest-list entries."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from calving.commit.spec.avro_schemas import avro_name
from calving.commit.spec.data_file import (
    DataFile,
    EntryStatus,
    FieldSummary,
    FileContent,
    ManifestContent,
    ManifestEntry,
    ManifestFile,
)
from calving.commit.spec.types import NestedField, PrimitiveType, StructType, decimal, fixed
from tests.commit.spec.strategies import names
from tests.commit.spec.value_strategies import ALL_TYPES, INT32, INT64, values_of

# pyiceberg 0.12 cannot read Avro's timestamp-nanos logical type.
NANOS = frozenset({"timestamp_ns", "timestamptz_ns"})

longs = st.integers(*INT64)
counts = st.integers(0, 2**63 - 1)
ints = st.integers(*INT32)

partition_field_types = st.one_of(
    st.sampled_from(ALL_TYPES),
    st.builds(lambda p, s: decimal(p, min(s, p)), st.integers(1, 38), st.integers(0, 38)),
    st.builds(fixed, st.integers(1, 20)),
)


@st.composite
def partition_types(draw: st.DrawFn, max_fields: int = 5, nanos: bool = True) -> StructType:
    field_types = draw(
        st.lists(
            partition_field_types.filter(lambda t: nanos or t.name not in NANOS),
            max_size=max_fields,
        )
    )
    field_names = draw(
        st.lists(
            names | st.sampled_from(["ts_day", "id_bucket", "1st", "a-b", "région"]),
            min_size=len(field_types),
            max_size=len(field_types),
            unique_by=avro_name,
        )
    )
    first_id = draw(st.integers(1000, 5000))
    return StructType(
        tuple(
            NestedField(first_id + i, name, ftype)
            for i, (name, ftype) in enumerate(zip(field_names, field_types))
        )
    )


def _optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


def _int_map(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return _optional(st.dictionaries(st.integers(1, 2**31 - 1), values, max_size=4))


def _partition(ptype: StructType, datetime_range: bool) -> st.SearchStrategy[tuple[Any, ...]]:
    parts = []
    for f in ptype.fields:
        assert isinstance(f.field_type, PrimitiveType)
        parts.append(_optional(values_of(f.field_type, datetime_range)))
    return st.tuples(*parts)


@st.composite
def data_files(
    draw: st.DrawFn,
    ptype: StructType,
    spec_id: int = 0,
    v3_fields: bool = True,
    datetime_range: bool = False,
) -> DataFile:
    v3 = _optional(counts) if v3_fields else st.none()
    return DataFile(
        content=draw(st.sampled_from(FileContent)),
        file_path="s3://bucket/t/data/" + draw(st.text(max_size=30)),
        file_format=draw(st.sampled_from(["PARQUET", "AVRO", "ORC", "PUFFIN"])),
        partition=draw(_partition(ptype, datetime_range)),
        record_count=draw(counts),
        file_size_in_bytes=draw(counts),
        column_sizes=draw(_int_map(counts)),
        value_counts=draw(_int_map(counts)),
        null_value_counts=draw(_int_map(counts)),
        nan_value_counts=draw(_int_map(counts)),
        lower_bounds=draw(_int_map(st.binary(max_size=16))),
        upper_bounds=draw(_int_map(st.binary(max_size=16))),
        key_metadata=draw(_optional(st.binary(max_size=16))),
        split_offsets=draw(_optional(st.lists(counts, max_size=4).map(tuple))),
        equality_ids=draw(_optional(st.lists(st.integers(1, 10_000), max_size=4).map(tuple))),
        sort_order_id=draw(_optional(st.integers(0, 100))),
        first_row_id=draw(v3),
        referenced_data_file=draw(_optional(st.text(max_size=30))),
        content_offset=draw(v3),
        content_size_in_bytes=draw(v3),
        spec_id=spec_id,
    )


@st.composite
def manifest_entries(
    draw: st.DrawFn, ptype: StructType, spec_id: int = 0, v3_fields: bool = True
) -> ManifestEntry:
    return ManifestEntry(
        status=draw(st.sampled_from(EntryStatus)),
        snapshot_id=draw(_optional(longs)),
        sequence_number=draw(_optional(counts)),
        file_sequence_number=draw(_optional(counts)),
        data_file=draw(data_files(ptype, spec_id, v3_fields)),
    )


field_summaries = st.builds(
    FieldSummary,
    contains_null=st.booleans(),
    contains_nan=_optional(st.booleans()),
    lower_bound=_optional(st.binary(max_size=16)),
    upper_bound=_optional(st.binary(max_size=16)),
)


@st.composite
def manifest_files(draw: st.DrawFn, v3_fields: bool = True) -> ManifestFile:
    return ManifestFile(
        manifest_path="s3://bucket/t/metadata/" + draw(st.text(max_size=30)) + ".avro",
        manifest_length=draw(counts),
        partition_spec_id=draw(st.integers(0, 2**31 - 1)),
        content=draw(st.sampled_from(ManifestContent)),
        sequence_number=draw(counts),
        min_sequence_number=draw(counts),
        added_snapshot_id=draw(longs),
        added_files_count=draw(st.integers(0, 2**31 - 1)),
        existing_files_count=draw(st.integers(0, 2**31 - 1)),
        deleted_files_count=draw(st.integers(0, 2**31 - 1)),
        added_rows_count=draw(counts),
        existing_rows_count=draw(counts),
        deleted_rows_count=draw(counts),
        partitions=draw(_optional(st.lists(field_summaries, max_size=4).map(tuple))),
        key_metadata=draw(_optional(st.binary(max_size=16))),
        first_row_id=draw(_optional(counts)) if v3_fields else None,
    )


def comparable(value: Any) -> Any:
    """``value`` with float NaNs replaced by a marker, so == treats NaN as equal."""
    if isinstance(value, float) and math.isnan(value):
        return "<NaN>"
    if isinstance(value, tuple):
        return tuple(comparable(v) for v in value)
    if isinstance(value, DataFile):
        return DataFile(**{**value.__dict__, "partition": comparable(value.partition)})
    if isinstance(value, ManifestEntry):
        return ManifestEntry(
            value.status,
            value.snapshot_id,
            value.sequence_number,
            value.file_sequence_number,
            comparable(value.data_file),
        )
    return value
