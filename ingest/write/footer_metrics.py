"""Column bounds and null counts from a written Parquet file's footer.

The writer keeps per row group statistics (min, max, null count) as it encodes, so the
file's bounds are the min of the mins and the max of the maxes over its row groups: no
pass over the values in Python. Parquet orders strings and binary as unsigned bytes (the
UTF-8 byte order Iceberg bounds use) and leaves NaN out of float min/max (Iceberg's rule
too); the NaN counts Iceberg also wants are not in the footer and are counted by the
caller. A column whose statistics are missing from any row group that holds values
(pyarrow drops them for binary values over its statistics size limit) is left out: the
caller computes that column's bounds from the data instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ColumnStats:
    """One leaf column's statistics over every row group."""

    null_count: int
    #: Leaf entries written (Parquet ``num_values``: for a list element, every element
    #: plus one entry per null or empty list), as Iceberg Java counts them.
    values: int
    lower: Any | None  # None: no non-null value, or the footer has no bounds
    upper: Any | None
    complete: bool  # every row group with values had min/max


def footer_stats(metadata: Any) -> dict[str, ColumnStats]:
    """``path_in_schema`` -> statistics of that leaf, from ``pyarrow`` ``FileMetaData``."""
    acc: dict[str, list[Any]] = {}
    for rg in range(metadata.num_row_groups):
        group = metadata.row_group(rg)
        for c in range(group.num_columns):
            column = group.column(c)
            acc.setdefault(column.path_in_schema, []).append((column, group.num_rows))
    return {path: _combine(chunks) for path, chunks in acc.items()}


def _combine(chunks: list[tuple[Any, int]]) -> ColumnStats:
    nulls, values, lower, upper, complete = 0, 0, None, None, True
    for column, _ in chunks:
        stats = column.statistics
        values += column.num_values
        if stats is None or not stats.has_null_count:
            return ColumnStats(0, values, None, None, False)
        nulls += stats.null_count
        if stats.num_values == 0:  # only nulls in this row group: nothing to bound
            continue
        if not stats.has_min_max:
            complete = False
            continue
        lo, hi = stats.min, stats.max
        lower = lo if lower is None or lo < lower else lower
        upper = hi if upper is None or hi > upper else upper
    return ColumnStats(nulls, values, lower, upper, complete)
