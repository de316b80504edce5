"""Partition transforms: identity, bucket[N], truncate[W], year, month, day, hour, void.

``apply`` works on one value in calving's internal form (see ``values``);
``apply_arrow`` on a pyarrow array. Both give the same results.
"""

from __future__ import annotations

import datetime as _dt
import re
import struct
import uuid as _uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from commit.errors import SchemaError, UnsupportedFeatureError
from commit.spec.murmur3 import murmur3_32
from commit.spec.types import DATE, INT, PrimitiveType
from commit.spec.values import min_big_endian as decimal_bytes, unscaled_value as unscaled

_EPOCH = _dt.date(1970, 1, 1)
_MICROS_PER_HOUR = 3_600_000_000
_MICROS_PER_DAY = 86_400_000_000
_TEMPORAL = {"date", "timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns"}
_BUCKETABLE = {
    "int", "long", "decimal", "date", "time", "timestamp", "timestamptz", "timestamp_ns",
    "timestamptz_ns", "string", "uuid", "fixed", "binary",
}


def _to_micros(source: PrimitiveType, v: int) -> int:
    if source.name in ("timestamp_ns", "timestamptz_ns"):
        return v // 1000
    return v


def bucket_hash(source: PrimitiveType, v: Any) -> int:
    n = source.name
    if n in ("int", "long", "date", "time", "timestamp", "timestamptz"):
        return murmur3_32(struct.pack("<q", v))
    if n in ("timestamp_ns", "timestamptz_ns"):
        return murmur3_32(struct.pack("<q", v // 1000))  # spec: hashed as microseconds
    if n == "decimal":
        return murmur3_32(decimal_bytes(unscaled(v, source.scale)))
    if n == "string":
        return murmur3_32(v.encode("utf-8"))
    if n == "uuid":
        return murmur3_32(v.bytes if isinstance(v, _uuid.UUID) else _uuid.UUID(str(v)).bytes)
    if n in ("fixed", "binary"):
        return murmur3_32(bytes(v))
    raise SchemaError(f"bucket transform cannot hash {source}")


def _months(days: int) -> int:
    d = _EPOCH + _dt.timedelta(days=days)
    return (d.year - 1970) * 12 + d.month - 1


@dataclass(frozen=True)
class Transform:
    name: str  # identity bucket truncate year month day hour void
    param: int = 0

    def __str__(self) -> str:
        if self.name in ("bucket", "truncate"):
            return f"{self.name}[{self.param}]"
        return self.name

    def can_transform(self, source: PrimitiveType) -> bool:
        n = source.name
        if self.name in ("identity", "void"):
            return True
        if self.name == "bucket":
            return n in _BUCKETABLE
        if self.name == "truncate":
            return n in ("int", "long", "decimal", "string", "binary")
        if self.name in ("year", "month", "day"):
            return n in _TEMPORAL
        if self.name == "hour":
            return n in _TEMPORAL - {"date"}
        return False

    def result_type(self, source: PrimitiveType) -> PrimitiveType:
        if self.name in ("identity", "void", "truncate"):
            return source
        if self.name == "day":
            return DATE
        return INT

    def apply(self, source: PrimitiveType, v: Any) -> Any:
        if v is None or self.name == "void":
            return None
        if self.name == "identity":
            return v
        if self.name == "bucket":
            return (bucket_hash(source, v) & 0x7FFFFFFF) % self.param
        if self.name == "truncate":
            w = self.param
            if source.name in ("int", "long"):
                return v - (v % w)
            if source.name == "decimal":
                u = unscaled(v, source.scale)
                u -= u % w
                return type(v)(u).scaleb(-source.scale)
            return v[:w]  # string: code points; binary: bytes
        days_src = source.name == "date"
        if self.name == "hour":
            return _to_micros(source, v) // _MICROS_PER_HOUR
        days = v if days_src else _to_micros(source, v) // _MICROS_PER_DAY
        if self.name == "day":
            return days
        if self.name == "month":
            return _months(days)
        if self.name == "year":
            return (_EPOCH + _dt.timedelta(days=days)).year - 1970
        raise UnsupportedFeatureError(f"transform {self}")

    def apply_arrow(self, source: PrimitiveType, array: pa.Array) -> pa.Array:
        """Vectorized where pyarrow has the kernels; per value otherwise."""
        if self.name == "identity":
            return array
        if self.name == "void":
            return pa.nulls(len(array), type=array.type)
        if self.name == "truncate" and source.name in ("int", "long"):
            rem = pc.subtract(array, pc.multiply(pc.floor(pc.divide(
                pc.cast(array, pa.float64()), float(self.param))), float(self.param)))
            if source.name == "long":  # float maths loses precision past 2**53
                return pa.array([self.apply(source, v) for v in array.to_pylist()], array.type)
            return pc.cast(pc.subtract(pc.cast(array, pa.int64()), pc.cast(rem, pa.int64())),
                           array.type)
        if self.name in ("day", "hour") and source.name in ("timestamp", "timestamptz"):
            ints = pc.cast(array.cast(pa.int64()) if not pa.types.is_integer(array.type)
                           else array, pa.int64())
            unit = _MICROS_PER_DAY if self.name == "day" else _MICROS_PER_HOUR
            out = pc.floor(pc.divide(pc.cast(ints, pa.float64()), float(unit)))
            out = pc.cast(out, pa.int32())
            return out.cast(pa.date32()) if self.name == "day" else out
        values = _arrow_to_internal(source, array)
        result = [self.apply(source, v) for v in values]
        rtype = self.result_type(source)
        if rtype.name == "date":
            return pa.array(result, pa.int32()).cast(pa.date32())
        if rtype.name == "int":
            return pa.array(result, pa.int32())
        return pa.array(result, array.type)


def _arrow_to_internal(source: PrimitiveType, array: pa.Array) -> list[Any]:
    t = array.type
    if pa.types.is_date32(t):
        return array.cast(pa.int32()).to_pylist()
    if pa.types.is_timestamp(t) or pa.types.is_time(t):
        return array.cast(pa.int64()).to_pylist()
    if source.name == "uuid" and pa.types.is_fixed_size_binary(t):
        return [None if b is None else _uuid.UUID(bytes=b) for b in array.to_pylist()]
    return array.to_pylist()


_PARAM = re.compile(r"^(bucket|truncate)\[\s*(\d+)\s*\]$")


def parse_transform(text: str) -> Transform:
    text = text.strip()
    if text in ("identity", "year", "month", "day", "hour", "void"):
        return Transform(text)
    m = _PARAM.match(text)
    if m and int(m.group(2)) > 0:
        return Transform(m.group(1), int(m.group(2)))
    raise UnsupportedFeatureError(f"unknown partition transform {text!r}")


IDENTITY = Transform("identity")
VOID = Transform("void")


def bucket(n: int) -> Transform:
    return Transform("bucket", n)


def truncate(w: int) -> Transform:
    return Transform("truncate", w)
