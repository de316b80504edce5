"""Sorting rows by a table's sort order: per-field direction and null placement,
transforms applied before comparing, stable ties, typed refusals."""

from __future__ import annotations

import pyarrow as pa
import pytest

from calving.commit.errors import SchemaError, UnsupportedFeatureError
from calving.commit.spec.schema import Schema
from calving.commit.spec.sort_order import NULLS_FIRST, NULLS_LAST, UNSORTED, SortOrder, asc, desc
from calving.commit.spec.transforms import Transform, bucket, hash_value
from calving.commit.spec.types import DATE, LONG, STRING, NestedField
from calving.ingest.write.sort_rows import sort_indices

SCHEMA = Schema(
    (
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "name", STRING),
        NestedField(3, "day", DATE),
    )
)
ROWS = pa.table(
    {
        "id": pa.array([5, 3, 9, 1, 7], pa.int64()),
        "name": pa.array(["bb", None, "ab", "ba", None]),
        "day": pa.array([20000, 19000, None, 20000, 19500], pa.int32()).cast(pa.date32()),
    }
)


def _ids(order: SortOrder) -> list[int]:
    idx = sort_indices(ROWS, SCHEMA, order)
    assert idx is not None
    return [ROWS.column("id")[int(i)].as_py() for i in idx]


def test_unsorted_keeps_the_input_order() -> None:
    assert sort_indices(ROWS, SCHEMA, UNSORTED) is None


def test_direction_and_null_order_per_field() -> None:
    assert _ids(SortOrder(1, (asc(2, null_order=NULLS_FIRST), asc(1)))) == [3, 7, 9, 1, 5]
    assert _ids(SortOrder(1, (asc(2, null_order=NULLS_LAST), desc(1)))) == [9, 1, 5, 7, 3]
    assert _ids(SortOrder(1, (desc(2, null_order=NULLS_FIRST), asc(1)))) == [3, 7, 5, 1, 9]
    assert _ids(SortOrder(1, (desc(2), asc(1)))) == [5, 1, 9, 3, 7]  # desc: nulls last


def test_transforms_sort_by_the_transformed_value_and_ties_keep_input_order() -> None:
    # truncate[1] of name: "b", None, "a", "b", None -> ties (5, 1) and (3, 7) stay in order.
    assert _ids(SortOrder(1, (asc(2, Transform("truncate", 1)),))) == [3, 7, 9, 5, 1]
    # month of day: 19000 -> 624, 19500 -> 640, 20000 -> 657 (nulls first).
    assert _ids(SortOrder(1, (asc(3, Transform("month")), asc(1)))) == [9, 3, 7, 1, 5]
    buckets = {i: hash_value(i, LONG) % 16 for i in (5, 3, 9, 1, 7)}
    want = sorted(buckets, key=lambda i: (buckets[i], [5, 3, 9, 1, 7].index(i)))
    assert _ids(SortOrder(1, (asc(1, bucket(16)),))) == want


def test_unknown_transforms_and_missing_columns_are_refused_by_name() -> None:
    with pytest.raises(UnsupportedFeatureError, match="'name'.*zorder"):
        sort_indices(ROWS, SCHEMA, SortOrder(1, (asc(2, Transform("zorder")),)))
    with pytest.raises(SchemaError, match="source id 8"):
        sort_indices(ROWS, SCHEMA, SortOrder(1, (asc(8),)))
