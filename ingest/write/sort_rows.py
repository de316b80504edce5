"""The row order a table's sort order asks for: indices that sort an Arrow table.

Each sort field sorts by its transform of the source column (identity, bucket, truncate,
year/month/day/hour, void), ascending or descending, with nulls first or last per field
as the field says. Strings compare by UTF-8 bytes, as Iceberg orders them. Ties keep
their input order (the sort is stable).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from calving.commit.errors import SchemaError
from calving.commit.spec.schema import Schema
from calving.commit.spec.sort_order import ASC, NULLS_LAST, SortOrder
from calving.commit.spec.types import PrimitiveType


def sort_indices(table: pa.Table, schema: Schema, order: SortOrder) -> np.ndarray | None:
    """Positions of ``table``'s rows in ``order`` (None when the order is unsorted).
    Raises ``SchemaError`` / ``UnsupportedFeatureError`` naming the column when a sort
    field cannot apply (missing column, unknown transform)."""
    if order.is_unsorted:
        return None
    order.validate(schema)
    keys: dict[str, pa.Array] = {}
    sort_keys: list[tuple[str, str]] = []
    for i, f in enumerate(order.fields):
        source = schema.find_field(f.source_id)
        assert source is not None and isinstance(source.field_type, PrimitiveType)
        values = f.transform.apply_arrow(_column(table, schema, f.source_id), source.field_type)
        # Per-field null placement: a flag that sorts nulls before or after the values.
        flag = pc.is_null(values) if f.null_order == NULLS_LAST else pc.is_valid(values)
        keys[f"n{i}"], keys[f"v{i}"] = flag, values
        sort_keys.append((f"n{i}", "ascending"))
        sort_keys.append((f"v{i}", "ascending" if f.direction == ASC else "descending"))
    indices = pc.sort_indices(pa.table(keys), sort_keys=sort_keys)
    return np.asarray(indices.to_numpy(zero_copy_only=False), dtype=np.int64)


def _column(table: pa.Table, schema: Schema, field_id: int) -> pa.Array:
    name = schema.column_name(field_id)
    parts = (name or "").split(".")
    if name is None or parts[0] not in table.column_names:
        raise SchemaError(f"sort column {name!r} is not in the rows being sorted")
    col: Any = table.column(parts[0])
    for part in parts[1:]:
        col = pc.struct_field(col, part)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
