"""Column metrics from the Parquet footer equal Iceberg's rules applied value by value:
bounds of every primitive type over several row groups, nulls, NaN (counted, never a
bound; an all-NaN column has none), +-0.0, strings ordered by UTF-8 bytes and truncated
to 16 code points (upper bound rounded up, or absent when it cannot be), binary, nested
struct leaves bounded, list elements counted but not bounded. Values too long for
Parquet statistics fall back to computed bounds."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import random
from typing import Any

import pyarrow as pa
import pytest

from calving.commit.io import FileIO
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import (
    ListType,
    NestedField,
    PrimitiveType,
    StructType,
)
from calving.commit.spec.types import (
    decimal as dec,
)
from calving.commit.spec.values import to_bytes, truncate_lower_bound, truncate_upper_bound
from calving.ingest.write.arrow_schema import schema_to_arrow
from calving.ingest.write.parquet_writer import TRUNCATE_WIDTH, _to_internal, write_data_file

P = PrimitiveType
UTC = dt.timezone.utc
FIELDS = [
    ("b", P("boolean")), ("i", P("int")), ("l", P("long")), ("f", P("float")),
    ("d", P("double")), ("day", P("date")), ("ts", P("timestamp")), ("tstz", P("timestamptz")),
    ("s", P("string")), ("bin", P("binary")), ("amount", dec(12, 2)), ("t", P("time")),
]  # fmt: skip


def _schema() -> Schema:
    fields = [NestedField(i + 1, n, t, False) for i, (n, t) in enumerate(FIELDS)]
    inner = StructType(
        (NestedField(21, "x", P("long"), False), NestedField(22, "y", P("string"), False))
    )
    fields.append(NestedField(20, "nested", inner, False))
    fields.append(NestedField(30, "tags", ListType(31, P("string")), False))
    return Schema(tuple(fields))


def _value(name: str, rng: random.Random) -> Any:
    if rng.random() < 0.1:
        return None
    r = rng.randint(-(10**6), 10**6)
    return {
        "b": r % 2 == 0,
        "i": r,
        "l": r * 10**9,
        "f": rng.choice([r / 7, math.nan, -0.0, 0.0]),
        "d": rng.choice([r / 3, math.nan, -0.0, 0.0, math.inf]),
        "day": dt.date(2000, 1, 1) + dt.timedelta(days=r % 9000),
        "ts": dt.datetime(2020, 1, 1) + dt.timedelta(microseconds=r * 1013),
        "tstz": dt.datetime(2020, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=r),
        "s": rng.choice(["", "a", "zz", "é" * 20, "\U0001f600x", "abc" * 9, "\U0010ffff" * 17])
        + str(r % 7),
        "bin": bytes([r % 256]) * (r % 40) + (b"\xff" * 17 if r % 5 == 0 else b""),
        "amount": decimal.Decimal(r).scaleb(-2),
        "t": dt.time(r % 24, r % 60, r % 60, r % 1000000),
    }[name]


def _rows(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        row = {name: _value(name, rng) for name, _ in FIELDS}
        row["nested"] = (
            None
            if rng.random() < 0.1
            else {"x": rng.randint(0, 99), "y": rng.choice(["p", "q", None])}
        )
        row["tags"] = [rng.choice(["u", "v"])] if rng.random() < 0.8 else None
        out.append(row)
    return out


def _expected(values: list[Any], t: PrimitiveType) -> tuple[bytes | None, bytes | None]:
    """Iceberg's bounds, value by value in Python (the reference)."""
    present = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not present:
        return None, None
    key = (lambda v: v.encode("utf-8")) if t.name == "string" else None
    lo, hi = _to_internal(t, min(present, key=key)), _to_internal(t, max(present, key=key))
    if t.name in ("string", "binary"):
        lo = truncate_lower_bound(t, lo, TRUNCATE_WIDTH)
        hi = truncate_upper_bound(t, hi, TRUNCATE_WIDTH)
    return to_bytes(t, lo), None if hi is None else to_bytes(t, hi)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_footer_bounds_equal_iceberg_rules_value_by_value(tmp_path, seed, monkeypatch):
    from calving.ingest.write import parquet_writer

    computed: list[str] = []
    compute = parquet_writer.computed_bounds

    def spy(col: Any, t: PrimitiveType) -> Any:
        computed.append(t.name)
        return compute(col, t)

    monkeypatch.setattr(parquet_writer, "computed_bounds", spy)
    schema = _schema()
    rows = _rows(3000, seed)
    table = pa.Table.from_pylist(rows, schema=schema_to_arrow(schema))
    f = write_data_file(FileIO(), f"file://{tmp_path}/d.parquet", table, schema, row_group_size=700)
    assert len(f.split_offsets or ()) == 5  # several row groups were combined
    for field_id, (name, t) in enumerate(FIELDS, start=1):
        values = [r[name] for r in rows]
        lo, hi = _expected(values, t)
        assert f.lower_bounds.get(field_id) == lo, name
        assert f.upper_bounds.get(field_id) == hi, name
        assert f.null_value_counts[field_id] == sum(v is None for v in values), name
        assert f.value_counts[field_id] == len(rows)
        if t.name in ("float", "double"):
            nans = sum(isinstance(v, float) and math.isnan(v) for v in values)
            assert f.nan_value_counts[field_id] == nans > 0
    assert computed == ["time"]  # every other bound came from the footer
    ys = [None if r["nested"] is None else r["nested"]["y"] for r in rows]
    assert (f.lower_bounds[22], f.upper_bounds[22]) == _expected(ys, P("string"))
    # List elements: Parquet's entry counts (an element each, one entry per null list),
    # no bounds; every field has its compressed size.
    assert f.value_counts[31] == sum(len(r["tags"] or [None]) for r in rows)
    assert f.null_value_counts[31] == sum(r["tags"] is None for r in rows)
    assert 31 not in f.lower_bounds
    assert set(f.column_sizes) >= {i for i in range(1, len(FIELDS) + 1)} | {21, 22, 31}


def test_all_nan_all_null_and_over_long_values(tmp_path):
    schema = Schema(
        (NestedField(1, "nan", P("double"), False), NestedField(2, "none", P("string"), False),
         NestedField(3, "big", P("binary"), False))
    )  # fmt: skip
    big = [bytes([i]) * 10_000 for i in (3, 9, 5)]  # over Parquet's statistics size limit
    table = pa.table(
        {"nan": [math.nan] * 3, "none": pa.array([None] * 3, pa.string()), "big": big},
        schema=schema_to_arrow(schema),
    )
    f = write_data_file(FileIO(), f"file://{tmp_path}/d.parquet", table, schema)
    assert 1 not in f.lower_bounds and f.nan_value_counts[1] == 3
    assert 2 not in f.lower_bounds and f.null_value_counts[2] == 3
    assert f.lower_bounds[3] == bytes([3]) * 16  # computed: the footer had no statistics
    assert f.upper_bounds[3] == bytes([9]) * 15 + bytes([10])
