"""Partition and sort transforms: identity, bucket[N], truncate[W], year, month, day,
hour, void.

``Transform.apply`` works on one value in calving's internal representation (see
``calving.commit.spec.values``), ``Transform.apply_arrow`` on a pyarrow array; both give the same
results, nulls stay null. Temporal transforms use floor semantics, so instants before
1970 land in the right (negative) year, month, day or hour.

A transform name this module does not know is kept as an unknown transform when
``parse_transform(..., allow_unknown=True)``: v3 readers must load such specs, but
nothing can be computed (or written) with it.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from calving.commit.errors import SchemaError, UnsupportedFeatureError
from calving.commit.spec.murmur3 import hash_long, hash_long_array, murmur3_32
from calving.commit.spec.types import DATE, INT, STRING, PrimitiveType
from calving.commit.spec.values import decimal_from_unscaled, min_big_endian, unscaled_value

KNOWN_TRANSFORMS = ("identity", "bucket", "truncate", "year", "month", "day", "hour", "void")
_TEMPORAL = frozenset({"year", "month", "day", "hour"})
_MICROS = frozenset({"timestamp", "timestamptz"})
_NANOS = frozenset({"timestamp_ns", "timestamptz_ns"})
_DATE_SOURCES = frozenset({"date"}) | _MICROS | _NANOS
_LONG_HASHED = frozenset({"int", "long", "date", "time"}) | _MICROS
_BUCKET_SOURCES = _LONG_HASHED | _NANOS | {"decimal", "string", "uuid", "fixed", "binary"}
_TRUNCATE_SOURCES = frozenset({"int", "long", "decimal", "string", "binary"})
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_MICROS_PER_DAY = 86_400_000_000
_MICROS_PER_HOUR = 3_600_000_000
_PARAMETERIZED = re.compile(r"^(bucket|truncate)\[\s*(-?\d+)\s*\]$")

Value = Any
Binder = Callable[[Value], Value]


@dataclass(frozen=True)
class Transform:
    """A transform as the spec's JSON names it. ``param`` is N for bucket, W for
    truncate, 0 otherwise. For an unknown transform ``name`` holds its full text."""

    name: str
    param: int = 0

    def __str__(self) -> str:
        if self.name in ("bucket", "truncate"):
            return f"{self.name}[{self.param}]"
        return self.name

    @property
    def is_known(self) -> bool:
        return self.name in KNOWN_TRANSFORMS

    @property
    def is_void(self) -> bool:
        return self.name == "void"

    @property
    def is_temporal(self) -> bool:
        return self.name in _TEMPORAL

    def can_transform(self, source: PrimitiveType) -> bool:
        kind = source.name
        if self.name in ("identity", "void"):
            return True
        if self.name == "bucket":
            return kind in _BUCKET_SOURCES
        if self.name == "truncate":
            return kind in _TRUNCATE_SOURCES
        if self.name in ("year", "month", "day"):
            return kind in _DATE_SOURCES
        if self.name == "hour":
            return kind in _MICROS or kind in _NANOS
        return False

    def result_type(self, source: PrimitiveType) -> PrimitiveType:
        """The partition value's type. ``day`` gives ``date`` (an int of days, as Java
        and pyiceberg type it); unknown transforms read as strings, like Java's."""
        if self.name in ("identity", "void", "truncate"):
            return source
        if self.name == "day":
            return DATE
        if self.name in ("bucket", "year", "month", "hour"):
            return INT
        return STRING

    # ------------------------------------------------------------ single values

    def bind(self, source: PrimitiveType) -> Binder:
        """A function computing this transform of non-null values of type ``source``."""
        return _bind(self, source)

    def apply(self, value: Value, source: PrimitiveType) -> Value:
        """This transform of ``value`` (internal representation) of type ``source``."""
        if value is None:
            return None
        return _bind(self, source)(value)

    # ------------------------------------------------------------ arrow

    def apply_arrow(self, array: pa.Array | pa.ChunkedArray, source: PrimitiveType) -> pa.Array:
        """This transform over an Arrow array of ``source`` values (nulls stay null).

        Result types: identity and truncate keep the input type, void gives nulls of
        it, bucket/year/month/hour give int32, day gives date32.
        """
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        self._check(source)
        if self.name == "identity":
            return array
        if self.name == "void":
            return pa.nulls(len(array), type=array.type)
        storage = array.storage if isinstance(array.type, pa.ExtensionType) else array
        try:
            if self.name == "bucket":
                return self._bucket_arrow(storage, source)
            if self.name == "truncate":
                return self._truncate_arrow(array, source)
            return _temporal_arrow(self.name, storage, source)
        except pa.ArrowInvalid as exc:
            raise SchemaError(f"{self} of {source} values: {exc}") from None

    def _bucket_arrow(self, array: pa.Array, source: PrimitiveType) -> pa.Array:
        if source.name in _LONG_HASHED or source.name in _NANOS:
            ints = _as_int64(array, source)
            if source.name in _NANOS:
                ints = _floor_div(ints, 1000)
            hashes = hash_long_array(ints)
            positive = pc.bit_wise_and(hashes, pa.scalar(0x7FFFFFFF, pa.int32()))
            return pc.modulo(positive, pa.scalar(self.param, pa.int32())).cast(pa.int32())
        if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
            array = array.cast(pa.large_binary())
        bucket = self.bind(source)
        raw: list[Any] = array.to_pylist()  # str as bytes, uuid as its 16 bytes
        return pa.array([None if v is None else bucket(v) for v in raw], pa.int32())

    def _truncate_arrow(self, array: pa.Array, source: PrimitiveType) -> pa.Array:
        width = self.param
        if source.name in ("int", "long"):
            return pc.subtract_checked(array, pc.modulo(array, pa.scalar(width, array.type)))
        if source.name == "string":
            return pc.utf8_slice_codeunits(array, 0, width)
        if source.name == "binary":
            return pc.binary_slice(array, 0, width)
        truncate = self.bind(source)
        return pa.array([None if v is None else truncate(v) for v in array.to_pylist()], array.type)

    # ------------------------------------------------------------ display

    def to_human_string(self, value: Value, source: PrimitiveType) -> str:
        """Readable form of a partition value (this transform's output), as used in
        Hive-style partition paths: ``2017``, ``2017-11``, ``2017-11-16``,
        ``2017-11-16-22``; binary as base64; null as ``null``."""
        if value is None or self.name == "void":
            return "null"
        if self.name == "year":
            return f"{1970 + value:04d}"
        if self.name == "month":
            return f"{1970 + value // 12:04d}-{value % 12 + 1:02d}"
        if self.name == "day":
            return human_date(value)
        if self.name == "hour":
            return f"{human_date(value // 24)}-{value % 24:02d}"
        return human_value(value, self.result_type(source))

    def _check(self, source: PrimitiveType) -> None:
        if not self.is_known:
            raise UnsupportedFeatureError(f"transform {self} is not supported")
        if not self.can_transform(source):
            raise SchemaError(f"transform {self} cannot apply to {source}")


def parse_transform(text: str, allow_unknown: bool = False) -> Transform:
    """The transform named by its JSON string; unknown names raise
    ``UnsupportedFeatureError`` unless ``allow_unknown`` (then kept verbatim)."""
    text = text.strip()
    if text in KNOWN_TRANSFORMS and text not in ("bucket", "truncate"):
        return Transform(text)
    match = _PARAMETERIZED.match(text)
    if match:
        return _parameterized(match.group(1), int(match.group(2)))
    if allow_unknown and text:
        return Transform(text)
    raise UnsupportedFeatureError(f"unknown partition transform {text!r}")


def _parameterized(name: str, param: int) -> Transform:
    if param < 1:
        raise SchemaError(f"{name} parameter must be positive, got {param}")
    return Transform(name, param)


IDENTITY = Transform("identity")
VOID = Transform("void")
YEAR = Transform("year")
MONTH = Transform("month")
DAY = Transform("day")
HOUR = Transform("hour")


def bucket(num_buckets: int) -> Transform:
    return _parameterized("bucket", num_buckets)


def truncate(width: int) -> Transform:
    return _parameterized("truncate", width)


# ---------------------------------------------------------------- single-value kernels


@functools.lru_cache(maxsize=512)
def _bind(transform: Transform, source: PrimitiveType) -> Binder:
    transform._check(source)
    name, kind = transform.name, source.name
    if name == "identity":
        return lambda v: v
    if name == "void":
        return lambda v: None
    if name == "bucket":
        hasher = _hasher(source)
        n = transform.param
        return lambda v: (hasher(v) & 0x7FFFFFFF) % n
    if name == "truncate":
        return _truncater(source, transform.param)
    if name == "hour":
        per_hour = _MICROS_PER_HOUR * (1000 if kind in _NANOS else 1)
        return lambda v: _int32(v // per_hour, source)
    to_days = _days_function(source)
    if name == "day":
        return to_days
    if name == "year":
        return lambda v: civil_from_days(to_days(v))[0] - 1970
    return lambda v: _months(to_days(v))


def hash_value(value: Value, source: PrimitiveType) -> int:
    """The spec's 32-bit hash (Appendix B) of a non-null ``value`` of a bucketable type."""
    if source.name not in _BUCKET_SOURCES:
        raise SchemaError(f"values of type {source} are not hashed for bucketing")
    return int(_hasher(source)(value))


def _hasher(source: PrimitiveType) -> Binder:
    kind = source.name
    if kind in _LONG_HASHED:
        return hash_long
    if kind in _NANOS:  # spec: nanoseconds hash as microseconds, like timestamp
        return lambda v: hash_long(v // 1000)
    if kind == "decimal":
        scale = source.scale
        return lambda v: murmur3_32(min_big_endian(unscaled_value(v, scale)))
    if kind == "string":
        return lambda v: murmur3_32(v if isinstance(v, bytes) else v.encode("utf-8"))
    if kind == "uuid":
        return lambda v: murmur3_32(v if isinstance(v, bytes) else v.bytes)
    return murmur3_32  # fixed, binary


def _truncater(source: PrimitiveType, width: int) -> Binder:
    kind = source.name
    if kind in _INT_RANGE:
        low = _INT_RANGE[kind][0]

        def truncate_int(v: int) -> int:
            out = v - v % width  # Python's % is already the spec's positive remainder
            if out < low:
                raise SchemaError(f"truncate[{width}] of {v} overflows {kind}")
            return out

        return truncate_int
    if kind == "decimal":
        scale, limit = source.scale, 10**source.precision

        def truncate_decimal(v: Any) -> Any:
            unscaled = unscaled_value(v, scale)
            out = unscaled - unscaled % width
            if out <= -limit:  # rounding down gained a digit the type cannot hold
                raise SchemaError(f"truncate[{width}] of {v} overflows {source}")
            return decimal_from_unscaled(out, scale)

        return truncate_decimal
    return lambda v: v[:width]  # string: code points; binary: bytes


def _days_function(source: PrimitiveType) -> Binder:
    if source.name == "date":
        return lambda v: v
    per_day = _MICROS_PER_DAY * (1000 if source.name in _NANOS else 1)
    return lambda v: v // per_day


def _months(days: int) -> int:
    year, month, _ = civil_from_days(days)
    return (year - 1970) * 12 + month - 1


def _int32(value: int, source: PrimitiveType) -> int:
    if not -(2**31) <= value < 2**31:
        raise SchemaError(f"transform result {value} from {source} does not fit an int")
    return value


def civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of the proleptic Gregorian date ``days`` after 1970-01-01,
    for any integer (no ``datetime`` range limit)."""
    shifted = days + 719_468  # days since 0000-03-01
    era = shifted // 146_097
    day_of_era = shifted - era * 146_097
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    month_index = (5 * day_of_year + 2) // 153  # March = 0
    day = day_of_year - (153 * month_index + 2) // 5 + 1
    month = month_index + 3 if month_index < 10 else month_index - 9
    year = year_of_era + era * 400 + (1 if month <= 2 else 0)
    return year, month, day


# ---------------------------------------------------------------- arrow kernels


def _as_int64(array: pa.Array, source: PrimitiveType) -> pa.Array:
    """Integer view of an int/date/time/timestamp array in the unit ``source`` uses."""
    kind = array.type
    if pa.types.is_date(kind):
        return array.cast(pa.date32()).cast(pa.int32()).cast(pa.int64())
    if pa.types.is_timestamp(kind):
        unit = "ns" if source.name in _NANOS else "us"
        return array.cast(pa.timestamp(unit, kind.tz)).cast(pa.int64())
    if pa.types.is_time(kind):
        return array.cast(pa.time64("us")).cast(pa.int64())
    return array.cast(pa.int64())


def _floor_div(values: pa.Array, divisor: int) -> pa.Array:
    """Floor division without the overflow of ``x - x mod d`` near int64's minimum."""
    quotient = pc.divide(values, pa.scalar(divisor, pa.int64()))  # truncates toward zero
    negative_rest = pc.less(pc.remainder(values, pa.scalar(divisor, pa.int64())), 0)
    return pc.subtract(quotient, negative_rest.cast(pa.int64()))


def _temporal_arrow(name: str, array: pa.Array, source: PrimitiveType) -> pa.Array:
    ints = _as_int64(array, source)
    scale = 1000 if source.name in _NANOS else 1
    if name == "hour":
        return _floor_div(ints, _MICROS_PER_HOUR * scale).cast(pa.int32())
    days = ints if source.name == "date" else _floor_div(ints, _MICROS_PER_DAY * scale)
    if name == "day":
        return days.cast(pa.int32()).cast(pa.date32())
    years, months = _civil_year_month_arrow(days)
    years = pc.subtract(years, 1970)
    if name == "year":
        return years.cast(pa.int32())
    return pc.add(pc.multiply(years, 12), pc.subtract(months, 1)).cast(pa.int32())


def _civil_year_month_arrow(days: pa.Array) -> tuple[pa.Array, pa.Array]:
    """``civil_from_days`` over an int64 array (pyarrow's own ``year`` kernel is wrong
    for dates tens of millennia away, which timestamps can reach)."""

    def div(x: pa.Array, d: int) -> pa.Array:  # operands are non-negative from here on
        return pc.divide(x, pa.scalar(d, pa.int64()))

    shifted = pc.add(days, 719_468)
    era = _floor_div(shifted, 146_097)
    day_of_era = pc.subtract(shifted, pc.multiply(era, 146_097))
    year_of_era = div(
        pc.subtract(
            pc.add(pc.subtract(day_of_era, div(day_of_era, 1460)), div(day_of_era, 36_524)),
            div(day_of_era, 146_096),
        ),
        365,
    )
    day_of_year = pc.subtract(
        day_of_era,
        pc.subtract(
            pc.add(pc.multiply(year_of_era, 365), div(year_of_era, 4)), div(year_of_era, 100)
        ),
    )
    month_index = div(pc.add(pc.multiply(day_of_year, 5), 2), 153)
    january_or_february = pc.greater_equal(month_index, 10)
    month = pc.if_else(january_or_february, pc.subtract(month_index, 9), pc.add(month_index, 3))
    year = pc.add(pc.add(year_of_era, pc.multiply(era, 400)), january_or_february.cast(pa.int64()))
    return year, month


# ---------------------------------------------------------------- human strings


def human_date(days: int) -> str:
    year, month, day = civil_from_days(days)
    return f"{year:04d}-{month:02d}-{day:02d}"


def _human_time_of_day(micros: int, fraction_digits: int, fraction: int) -> str:
    seconds = micros // 1_000_000
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return f"{text}.{fraction:0{fraction_digits}d}" if fraction else text


def human_value(value: Value, ptype: PrimitiveType) -> str:
    """Readable form of a value of ``ptype`` (internal representation)."""
    if value is None:
        return "null"
    kind = ptype.name
    if kind == "boolean":
        return "true" if value else "false"
    if kind == "date":
        return human_date(value)
    if kind == "time":
        return _human_time_of_day(value, 6, value % 1_000_000)
    if kind in _MICROS or kind in _NANOS:
        nanos = kind in _NANOS
        per_second = 1_000_000_000 if nanos else 1_000_000
        per_day = _MICROS_PER_DAY * (1000 if nanos else 1)
        days, rest = divmod(value, per_day)
        micros_of_day = rest // 1000 if nanos else rest
        clock = _human_time_of_day(micros_of_day, 9 if nanos else 6, rest % per_second)
        zone = "+00:00" if kind.startswith("timestamptz") else ""
        return f"{human_date(days)}T{clock}{zone}"
    if kind == "decimal":
        return str(decimal_from_unscaled(unscaled_value(value, ptype.scale), ptype.scale))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)
