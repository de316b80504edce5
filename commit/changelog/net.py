"""Net changes: one change per ``_row_id`` over a whole range, from the range's changes
(sorted by snapshot, ``_row_id`` and change type). A row's first change tells whether it
existed before the range (DELETE, UPDATE_BEFORE: with those values), its last whether it
exists after it (INSERT, UPDATE_AFTER: with those values). Existing on both sides with
other values is an UPDATE_BEFORE / UPDATE_AFTER pair; on one side, a DELETE or an
INSERT; with the same values, or on neither side, nothing. Each net change carries its
row's last ``_change_ordinal`` and ``_commit_snapshot_id``. Rows without a ``_row_id``
(files written before row lineage) cannot be followed and pass through unchanged."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from calving.commit.changelog.columns import (
    CHANGE_ORDINAL,
    CHANGE_TYPE,
    COMMIT_SNAPSHOT_ID,
    DELETE,
    INSERT,
    ROW_ID,
    UPDATE_AFTER,
    UPDATE_BEFORE,
)


def _mask(t: pa.Table, types: Sequence[str]) -> np.ndarray:
    mask: np.ndarray = pc.is_in(t.column(CHANGE_TYPE), pa.array(types)).to_numpy(
        zero_copy_only=False
    )
    return mask


def _restamp(rows: pa.Table, stamps: pa.Table, change_type: str) -> pa.Table:
    """``rows`` as ``change_type``, with the ordinal and snapshot of ``stamps``."""
    rows = rows.set_column(
        rows.schema.get_field_index(CHANGE_TYPE),
        CHANGE_TYPE,
        pa.repeat(pa.scalar(change_type), rows.num_rows),
    )
    for name in (CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID):
        rows = rows.set_column(rows.schema.get_field_index(name), name, stamps.column(name))
    return rows


def net_changes(changes: pa.Table, data_columns: Sequence[str]) -> pa.Table:
    """One change per row (see the module doc); not sorted."""
    valid = pc.is_valid(changes.column(ROW_ID))
    keyed = changes.filter(valid)
    loose = changes.filter(pc.invert(valid))
    if keyed.num_rows == 0:
        return changes
    index = pa.array(np.arange(keyed.num_rows), pa.int64())
    spans = (
        keyed.select([ROW_ID])
        .append_column("_i", index)
        .group_by(ROW_ID, use_threads=False)
        .aggregate([("_i", "min"), ("_i", "max")])
    )
    first = keyed.take(spans.column("_i_min"))
    last = keyed.take(spans.column("_i_max"))
    before = _mask(first, [DELETE, UPDATE_BEFORE])
    after = _mask(last, [INSERT, UPDATE_AFTER])
    both = before & after & ~same_values(first, last, data_columns)
    gone, new = before & ~after, after & ~before

    def pick(rows: pa.Table, mask: np.ndarray) -> pa.Table:
        return rows.filter(pa.array(mask))

    return pa.concat_tables(
        [
            _restamp(pick(first, gone), pick(last, gone), DELETE),
            _restamp(pick(first, both), pick(last, both), UPDATE_BEFORE),
            _restamp(pick(last, both), pick(last, both), UPDATE_AFTER),
            _restamp(pick(last, new), pick(last, new), INSERT),
            loose,
        ]
    )


def same_values(a: pa.Table, b: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """Row by row: whether ``a`` and ``b`` hold equal values (nulls equal) in ``columns``."""
    same = np.ones(a.num_rows, dtype=bool)
    for name in columns:
        x, y = a.column(name), b.column(name)
        try:
            eq = pc.fill_null(pc.equal(x, y), False)
            both_null = pc.and_(pc.is_null(x), pc.is_null(y))
            same &= pc.or_(eq, both_null).to_numpy(zero_copy_only=False)
        except pa.ArrowNotImplementedError:  # nested types: compare as Python values
            same &= np.array([p == q for p, q in zip(x.to_pylist(), y.to_pylist())], dtype=bool)
    return same
