"""Tests of ingest.decode; ``kafka_batch`` builds the Kafka source's Arrow batch."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from calving.ingest.decode.batch import DecodedBatch


def kafka_batch(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    *,
    topic: str = "orders",
    partition: int = 0,
    first_offset: int = 100,
) -> pa.Table:
    n = len(values)
    keys = list(keys) if keys is not None else [None] * n
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(list(values), pa.binary()),
            "topic": pa.array([topic] * n, pa.string()),
            "partition": pa.array([partition] * n, pa.int32()),
            "offset": pa.array(range(first_offset, first_offset + n), pa.int64()),
            "timestamp": pa.array(
                [1_700_000_000_000_000 + i for i in range(n)], pa.timestamp("us", tz="UTC")
            ),
            "timestampType": pa.array([0] * n, pa.int32()),
        }
    )


def assert_partitioned(batch: pa.Table, decoded: DecodedBatch) -> None:
    """Every input offset is in exactly one of rows / dead letters."""
    offsets = batch.column("offset").to_pylist()
    got = (
        decoded.rows.column("_offset").to_pylist()
        + decoded.dead_letters.column("offset").to_pylist()
    )
    assert sorted(got) == sorted(offsets)


def data_rows(decoded: DecodedBatch) -> list[dict]:
    """Rows without the metadata columns."""
    table = decoded.rows.drop_columns(["_op", "_partition", "_offset", "_topic"])
    return table.to_pylist()
