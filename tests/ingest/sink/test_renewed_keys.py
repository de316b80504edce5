"""Keys a batch deleted and then upserted again are new rows (v3 row lineage): the task
reports them (``KeysRenewed``) beside the file of their new rows, for one key column and
for composite keys; keys only upserted, or deleted last, are not reported."""

from __future__ import annotations

import pyarrow as pa

from calving.ingest.sink.executor import renewed_keys


def test_one_key_column() -> None:
    upserted = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64())})
    deleted = pa.table({"id": pa.array([3, 9, 3, 1], pa.int64())})
    assert renewed_keys(upserted, deleted).column("id").to_pylist() == [1, 3]


def test_composite_keys_match_on_every_column() -> None:
    upserted = pa.table({"region": ["eu", "eu", "us"], "n": pa.array([1, 2, 1], pa.int64())})
    deleted = pa.table({"region": ["us", "eu"], "n": pa.array([2, 2], pa.int64())})
    assert renewed_keys(upserted, deleted).to_pylist() == [{"region": "eu", "n": 2}]
