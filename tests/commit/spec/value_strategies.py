"""Hypothesis strategies for single values in calving's internal representation, plus
converters to pyiceberg types and Arrow arrays, shared by the transform, partition and
value tests."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from calving.commit.spec.types import PRIMITIVE_NAMES, PrimitiveType, decimal, fixed
from calving.commit.spec.values import decimal_from_unscaled

EPOCH_DATE = dt.date(1970, 1, 1)
# Ranges Python's datetime (and so pyiceberg) can represent: years 1..9999.
MIN_DAYS = (dt.date(1, 1, 1) - EPOCH_DATE).days
MAX_DAYS = (dt.date(9999, 12, 31) - EPOCH_DATE).days
MICROS_PER_DAY = 86_400_000_000
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)

ALL_TYPES: list[PrimitiveType] = [PrimitiveType(n) for n in PRIMITIVE_NAMES if n != "unknown"] + [
    decimal(9, 2),
    decimal(38, 10),
    decimal(1, 0),
    fixed(1),
    fixed(16),
]

utf8_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=20)


def values_of(ptype: PrimitiveType, datetime_range: bool = False) -> st.SearchStrategy[Any]:
    """Values of ``ptype``; with ``datetime_range`` temporal values stay within the
    years 1..9999 that Python's datetime (used by pyiceberg) can hold."""
    name = ptype.name
    if name == "boolean":
        return st.booleans()
    if name == "int":
        return st.integers(*INT32)
    if name == "long":
        return st.integers(*INT64)
    if name == "float":
        return st.floats(width=32)
    if name == "double":
        return st.floats()
    if name == "decimal":
        bound = 10**ptype.precision - 1
        return st.integers(-bound, bound).map(lambda u: decimal_from_unscaled(u, ptype.scale))
    if name == "date":
        return st.integers(MIN_DAYS, MAX_DAYS) if datetime_range else st.integers(*INT32)
    if name == "time":
        return st.integers(0, MICROS_PER_DAY - 1)
    if name in ("timestamp", "timestamptz"):
        if datetime_range:
            return st.integers(MIN_DAYS * MICROS_PER_DAY, (MAX_DAYS + 1) * MICROS_PER_DAY - 1)
        return st.integers(*INT64)
    if name in ("timestamp_ns", "timestamptz_ns"):
        return st.integers(*INT64)  # int64 nanos span 1677..2262, inside datetime's range
    if name == "string":
        return utf8_text
    if name == "uuid":
        return st.uuids()
    if name == "fixed":
        return st.binary(min_size=ptype.length, max_size=ptype.length)
    if name == "binary":
        return st.binary(max_size=20)
    raise AssertionError(f"no strategy for {ptype}")


def arrow_type(ptype: PrimitiveType) -> pa.DataType:
    name = ptype.name
    simple = {
        "boolean": pa.bool_(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "date": pa.date32(),
        "time": pa.time64("us"),
        "timestamp": pa.timestamp("us"),
        "timestamptz": pa.timestamp("us", "UTC"),
        "timestamp_ns": pa.timestamp("ns"),
        "timestamptz_ns": pa.timestamp("ns", "UTC"),
        "string": pa.string(),
        "uuid": pa.binary(16),
        "binary": pa.binary(),
    }
    if name in simple:
        return simple[name]
    if name == "decimal":
        return pa.decimal128(ptype.precision, ptype.scale)
    if name == "fixed":
        return pa.binary(ptype.length)
    raise AssertionError(f"no Arrow type for {ptype}")


def to_arrow(values: list[Any], ptype: PrimitiveType) -> pa.Array:
    """An Arrow array of internal-representation values (None = null)."""
    target = arrow_type(ptype)
    name = ptype.name
    if name == "uuid":
        return pa.array([None if v is None else v.bytes for v in values], target)
    if name in ("date",):
        return pa.array(values, pa.int32()).cast(target)
    if name in ("time", "timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns"):
        return pa.array(values, pa.int64()).cast(target)
    return pa.array(values, target)


def pyiceberg_type(ptype: PrimitiveType) -> Any:
    from pyiceberg import types as t

    name = ptype.name
    if name == "decimal":
        return t.DecimalType(ptype.precision, ptype.scale)
    if name == "fixed":
        return t.FixedType(ptype.length)
    classes = {
        "boolean": t.BooleanType,
        "int": t.IntegerType,
        "long": t.LongType,
        "float": t.FloatType,
        "double": t.DoubleType,
        "date": t.DateType,
        "time": t.TimeType,
        "timestamp": t.TimestampType,
        "timestamptz": t.TimestamptzType,
        "timestamp_ns": t.TimestampNanoType,
        "timestamptz_ns": t.TimestamptzNanoType,
        "string": t.StringType,
        "uuid": t.UUIDType,
        "binary": t.BinaryType,
        "unknown": t.UnknownType,
    }
    return classes[name]()
