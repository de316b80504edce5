"""``last_per_key``: each key's last row, in Python for a small batch and by an Arrow
group-by past it; both give the rows a group-by gives."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.ingest.sink import executor

_KEYS = st.tuples(st.one_of(st.none(), st.integers(0, 5)), st.sampled_from([b"x", b"y", None]))


def _group_by(data: pa.Table, keys: list[str]) -> list[int]:
    last = data.group_by(keys, use_threads=False).aggregate([("_seq", "max")])
    return sorted(last.column("_seq_max").to_pylist())


@settings(max_examples=200, deadline=None)
@given(st.lists(_KEYS, min_size=1, max_size=3 * executor.SMALL_BATCH), st.booleans())
def test_last_rows_per_key_equal_a_group_bys(rows, two_keys):
    data = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "region": pa.array([r[1] for r in rows], pa.binary()),
            "_seq": pa.array(range(len(rows)), pa.int64()),
        }
    )
    keys = ["id", "region"] if two_keys else ["id"]
    got = executor.last_per_key(data, keys)
    assert got.dtype == np.int64
    assert got.tolist() == _group_by(data, keys)
