"""The task writer partitions by every transform of the nanosecond timestamp types (and
``identity`` of the microsecond ones and of ``time``, which failed before: the grouped
partition values came back as Python datetimes instead of calving's integers).

Each file's partition value is checked against values computed here from the spec
(floor division of nanoseconds, civil months, Murmur3 of the microseconds via ``mmh3``),
and the table is read back by the readers that can: pyiceberg and pyiceberg-core read
the nanosecond types except in identity partitions (their manifest readers fail on a
nanosecond partition value); DuckDB 1.5.5 reads ``timestamp_ns`` but does not know
``timestamptz_ns``. The README's reader table says the same; these tests keep it true.
"""

from __future__ import annotations

import datetime as dt
import struct
from typing import Any

import mmh3
import pyarrow as pa
import pytest

from calving.commit.spec.partition import spec_builder
from calving.commit.spec.schema import Schema
from calving.commit.spec.transforms import IDENTITY, Transform, bucket
from calving.commit.spec.types import (
    LONG,
    TIME,
    TIMESTAMP_NS,
    TIMESTAMPTZ,
    TIMESTAMPTZ_NS,
    NestedField,
    PrimitiveType,
)
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.table import Table, create_table
from calving.ingest.write.task_writer import TaskWriter
from tests.support.oracles import ALL_READERS

# Around midnight, month ends and before the epoch; sub-microsecond parts everywhere.
NANOS = [
    1_767_225_599_999_999_999,  # 2025-12-31T23:59:59.999999999
    1_767_225_600_000_000_001,  # 2026-01-01T00:00:00.000000001
    1_510_871_468_000_001_001,  # 2017-11-16T22:31:08.000001001 (the spec's hash example)
    -1_000_000_001,  # 1969-12-31T23:59:58.999999999
    1_767_323_045_123_456_789,
]
DAY_NS = 86_400 * 10**9


def _expected(transform: str, ns: int) -> Any:
    if transform == "identity":
        return ns
    if transform == "hour":
        return ns // (3_600 * 10**9)
    if transform == "day":
        return ns // DAY_NS
    civil = dt.date(1970, 1, 1) + dt.timedelta(days=ns // DAY_NS)
    if transform == "year":
        return civil.year - 1970
    if transform == "month":
        return (civil.year - 1970) * 12 + civil.month - 1
    assert transform == "bucket"  # spec: nanoseconds hash as their microseconds
    return (mmh3.hash(struct.pack("<q", ns // 1000)) & 0x7FFFFFFF) % 4


def _write(table: Table, schema: Schema, data: pa.Table) -> list[tuple[Any, ...]]:
    spec = table.metadata.spec
    writer = TaskWriter(table.io, table.metadata.location, schema, spec, file_prefix="t")
    writer.write(data)
    written = writer.close()
    table.commit_or_raise(FastAppend(tuple(w.data_file for w in written)))
    return [w.data_file.partition for w in written]


@pytest.mark.parametrize("ptype", [TIMESTAMP_NS, TIMESTAMPTZ_NS], ids=str)
@pytest.mark.parametrize("transform", ["identity", "year", "month", "day", "hour", "bucket"])
def test_nanosecond_partitions_and_read_back(
    sqlite_catalog: Any, ptype: PrimitiveType, transform: str
) -> None:
    schema = Schema((NestedField(1, "id", LONG, True), NestedField(2, "ts", ptype)))
    t = bucket(4) if transform == "bucket" else Transform(transform)
    table = create_table(
        sqlite_catalog,
        ("db", f"{ptype.name}_{transform}"),
        schema,
        spec=spec_builder(schema, fields=[("ts", t)]),
    )
    arrow_type = pa.timestamp("ns", tz="UTC" if ptype == TIMESTAMPTZ_NS else None)
    data = pa.table(
        {"id": pa.array(range(len(NANOS)), pa.int64()), "ts": pa.array(NANOS, arrow_type)}
    )
    partitions = _write(table, schema, data)
    assert sorted(p[0] for p in partitions) == sorted({_expected(transform, ns) for ns in NANOS})

    want = sorted(zip(range(len(NANOS)), NANOS))
    for name, reader in ALL_READERS.items():
        unreadable = (name == "duckdb" and ptype == TIMESTAMPTZ_NS) or (
            name != "duckdb" and transform == "identity"
        )
        if unreadable:
            with pytest.raises(Exception, match="timestamp-nanos|timestamptz_ns|type mismatch"):
                reader(table.metadata_location, ["id", "ts"])
            continue
        rows = reader(table.metadata_location, ["id", "ts"])
        assert [(i, pa.scalar(v, arrow_type).value) for i, v in rows] == want, name


@pytest.mark.parametrize(
    ("ptype", "arrow_type", "value"),
    [
        (TIMESTAMPTZ, pa.timestamp("us", tz="UTC"), 1_767_225_600_000_001),
        (TIME, pa.time64("us"), 81_068_123_456),
    ],
    ids=["timestamptz", "time"],
)
def test_identity_partitions_of_microsecond_types(
    sqlite_catalog: Any, ptype: PrimitiveType, arrow_type: pa.DataType, value: int
) -> None:
    schema = Schema((NestedField(1, "id", LONG, True), NestedField(2, "v", ptype)))
    table = create_table(
        sqlite_catalog,
        ("db", f"identity_{ptype.name}"),
        schema,
        spec=spec_builder(schema, fields=[("v", IDENTITY)]),
    )
    data = pa.table({"id": pa.array([1], pa.int64()), "v": pa.array([value], arrow_type)})
    assert _write(table, schema, data) == [(value,)]
    for name, reader in ALL_READERS.items():
        [(_, got)] = reader(table.metadata_location, ["id", "v"])
        assert pa.scalar(got, arrow_type).value == value, name
