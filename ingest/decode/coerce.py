"""Decoded values -> Python values that Arrow builds into the table's Arrow schema.

Every decoder (JSON, Avro, Debezium) ends up with plain Python objects: dicts, lists,
numbers, strings, and for Avro also ``datetime``/``date``/``Decimal``/``UUID``. A
``RowConverter`` compiled once per table schema checks each value against its Iceberg
type and converts it to what ``pa.array`` expects for the type ``schema_to_arrow`` gives
(epoch counts for temporal types, ``Decimal`` for decimals, bytes for binary/uuid,
``(key, value)`` pairs for maps). The rule: accept a value only when the conversion is
lossless; anything else raises ``CoercionError`` naming the field path.

Accepted inputs, by column type (beyond the value's own Python type):

* long/int: ints in range (never bools, never floats, even integral ones).
* double/float: ints and ``Decimal`` (JSON numbers read exactly); NaN and +-Infinity are
  accepted (Avro's IEEE values); JSON never brings them here (``json_values.parse_json``
  makes such records dead letters).
* decimal(P, S): ints, ``Decimal``, floats (via their shortest repr) and numeric strings
  (``[+-]digits[.digits][e[+-]digits]``), only when exact at scale S within precision P.
* date / time / timestamp[tz][_ns]: ISO-8601 strings (``DATE_PATTERN``, ``TIME_PATTERN``,
  ``TIMESTAMP_PATTERN``), ``datetime`` objects, ``EpochTime`` counts, and bare ints when
  ``epoch_unit`` is configured. A zoned string goes into a ``timestamp`` (without zone)
  column only when its offset is zero; a string without offset goes into a ``timestamptz``
  column only when ``naive_timestamps_as_utc`` is set.
* binary / fixed[L]: bytes, or strings holding standard base64 (JSON has no bytes;
  base64 is what Kafka Connect's JsonConverter and Debezium emit).
* uuid: canonical 8-4-4-4-12 hex strings, ``uuid.UUID``, 16 bytes.
* map: a dict; for non-string key types its (string) keys are converted like values,
  with integer keys read as decimal digits.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import math
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Context, Decimal, InvalidOperation
from typing import Any, Literal

from calving.commit.errors import ConfigError
from calving.commit.spec.json_values import default_value
from calving.commit.spec.types import (
    IcebergType,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
)

EpochUnit = Literal["ms", "us", "ns", "auto"]
#: The unit of an ``EpochTime``: days, or milli-, micro- or nanoseconds.
TimeUnit = Literal["D", "ms", "us", "ns"]

DATE_PATTERN = r"(\d{4})-(\d{2})-(\d{2})"
TIME_PATTERN = r"(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?"
OFFSET_PATTERN = r"(Z|[+-]\d{2}(?::?\d{2})?)"
TIMESTAMP_PATTERN = DATE_PATTERN + "[T ]" + TIME_PATTERN + OFFSET_PATTERN + "?"
DECIMAL_STRING_PATTERN = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"

_DATE_RE = re.compile(DATE_PATTERN + r"\Z")
_TIME_RE = re.compile(TIME_PATTERN + r"\Z")
_TIMESTAMP_RE = re.compile(TIMESTAMP_PATTERN + r"\Z")
_DECIMAL_RE = re.compile(DECIMAL_STRING_PATTERN + r"\Z")
_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\Z")
_INT_KEY_RE = re.compile(r"-?\d+\Z")

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_FLOAT32_MAX = 3.4028234663852886e38
_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_UNIT_NANOS = {"D": 86_400_000_000_000, "s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
_DECIMAL_CONTEXT = Context(prec=120)


class CoercionError(Exception):
    """A value does not fit its column. Internal: decoders turn it into a dead letter.

    ``path`` is filled in on the way up so that successful conversions pay nothing.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []

    def at(self, part: str) -> CoercionError:
        self.path.append(part)
        return self

    @property
    def field_path(self) -> str:
        out = ""
        for part in reversed(self.path):
            out += part if part.startswith("[") or not out else "." + part
        return out

    def describe(self) -> str:
        where = self.field_path
        return f"field {where!r}: {self.reason}" if where else self.reason


@dataclass(frozen=True, slots=True)
class EpochTime:
    """A temporal value given as a count of units: days since 1970-01-01 (``D``),
    or ms/us/ns since the epoch (timestamps) or since midnight (times).

    Decoders that know a field's encoding (Debezium's ``io.debezium.time.*`` names,
    Avro ``connect.name``) wrap ints in it so the unit is never guessed.
    """

    count: int
    unit: TimeUnit

    def __repr__(self) -> str:
        return f"{self.count} {self.unit}"


@dataclass(frozen=True)
class CoercionOptions:
    """How strictly values are matched to the table schema.

    ``epoch_unit``: unit of bare ints in timestamp/time columns (and days for date
    columns when set at all); ``None`` rejects bare ints there. ``"auto"`` reads
    timestamps by magnitude (< 1e14 ms, < 1e17 us, else ns; micros before 1973-03 are
    misread as millis) and times as micros.
    """

    case_insensitive: bool = False
    epoch_unit: EpochUnit | None = None
    naive_timestamps_as_utc: bool = False

    def __post_init__(self) -> None:
        if self.epoch_unit not in (None, "ms", "us", "ns", "auto"):
            raise ConfigError(f"epoch_unit must be ms, us, ns or auto, got {self.epoch_unit!r}")


class JsonFraction(Decimal):
    """A JSON number with a fraction or exponent, read exactly (for decimal columns)."""

    __slots__ = ()


Converter = Callable[[Any], Any]
UnknownFields = dict[str, set[str]]


def json_type_name(value: Any) -> str:
    """The Iceberg-ish name of a decoded value's type, for unknown-field reports."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, (float, JsonFraction)):
        return "double"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "struct"
    if isinstance(value, list):
        return "list"
    if isinstance(value, (bytes, bytearray)):
        return "binary"
    if isinstance(value, dt.datetime):
        return "timestamptz" if value.tzinfo is not None else "timestamp"
    if isinstance(value, dt.date):
        return "date"
    if isinstance(value, dt.time):
        return "time"
    if isinstance(value, uuid.UUID):
        return "uuid"
    return type(value).__name__


# ---------------------------------------------------------------- temporal parsing


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (any year, no range limit)."""
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _check_date(year: int, month: int, day: int) -> None:
    if year < 1:
        raise CoercionError("year 0000 is outside the supported range 0001-9999")
    if not 1 <= month <= 12:
        raise CoercionError(f"month {month} out of range")
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    last = 29 if month == 2 and leap else _DAYS_IN_MONTH[month - 1]
    if not 1 <= day <= last:
        raise CoercionError(f"day {day} out of range for {year:04d}-{month:02d}")


def _time_nanos(hh: str, mm: str, ss: str | None, frac: str | None) -> int:
    h, m, s = int(hh), int(mm), int(ss or 0)
    if h > 23 or m > 59 or s > 59:
        raise CoercionError(f"time {hh}:{mm}:{ss or '00'} out of range")
    nanos = int((frac or "").ljust(9, "0")) if frac else 0
    return ((h * 60 + m) * 60 + s) * 1_000_000_000 + nanos


def _offset_nanos(text: str) -> int:
    if text == "Z":
        return 0
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:4] or 0)
    if hours > 23 or minutes > 59:
        raise CoercionError(f"UTC offset {text} out of range")
    return sign * (hours * 60 + minutes) * 60_000_000_000


def _rescale(nanos: int, per_unit: int, what: Any) -> int:
    """nanos -> a count of ``per_unit``; ``what`` (shown only in the error) is the input."""
    count, rest = divmod(nanos, per_unit)
    if rest:
        raise CoercionError(f"{_show(what)} has more precision than the column keeps")
    return count


def parse_date(text: str) -> int:
    """``YYYY-MM-DD`` -> days since the epoch."""
    m = _DATE_RE.match(text)
    if m is None:
        raise CoercionError(f"{_show(text)} is not an ISO-8601 date (YYYY-MM-DD)")
    y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
    _check_date(y, mo, d)
    return days_from_civil(y, mo, d)


def parse_time(text: str, per_unit: int) -> int:
    """``HH:MM[:SS[.f{1,9}]]`` -> count of the column's unit since midnight."""
    m = _TIME_RE.match(text)
    if m is None:
        raise CoercionError(f"{_show(text)} is not an ISO-8601 time (HH:MM:SS[.fff])")
    return _rescale(_time_nanos(*m.groups()), per_unit, text)


def parse_timestamp(text: str, per_unit: int, zoned: bool, naive_as_utc: bool) -> int:
    """An ISO-8601 timestamp string -> count of the column's unit since the epoch.

    ``zoned`` is the column's kind (timestamptz); the offset rules are in the module doc.
    """
    m = _TIMESTAMP_RE.match(text)
    if m is None:
        raise CoercionError(
            f"{_show(text)} is not an ISO-8601 timestamp (YYYY-MM-DDTHH:MM[:SS[.f]][offset])"
        )
    y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
    _check_date(y, mo, d)
    nanos = days_from_civil(y, mo, d) * 86_400_000_000_000 + _time_nanos(*m.group(4, 5, 6, 7))
    offset = m.group(8)
    if offset is None:
        if zoned and not naive_as_utc:
            raise CoercionError(
                f"{_show(text)} has no UTC offset but the column is timestamptz "
                "(set naive_timestamps_as_utc to read it as UTC)"
            )
    else:
        shift = _offset_nanos(offset)
        if shift and not zoned:
            raise CoercionError(
                f"{_show(text)} has UTC offset {offset} but the column is a timestamp "
                "without time zone"
            )
        nanos -= shift
    return _rescale(nanos, per_unit, text) if per_unit > 1 else nanos


def _show(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- primitive converters


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _mismatch(v: Any, type_name: str) -> CoercionError:
    return CoercionError(f"expected {type_name}, got {json_type_name(v)} {_show(v)}")


def _integer(lo: int, hi: int, name: str) -> Converter:
    def convert(v: Any) -> Any:
        if type(v) is int:
            if lo <= v <= hi:
                return v
            raise CoercionError(f"{v} out of range for {name}")
        raise _mismatch(v, name)

    return convert


def _double(v: Any) -> Any:
    t = type(v)
    if t is float:
        return v
    if t is int or isinstance(v, Decimal):
        try:
            return float(v)
        except OverflowError:
            raise CoercionError(f"{_show(v)} out of range for double") from None
    raise _mismatch(v, "double")


def _float(v: Any) -> Any:
    f = _double(v)
    if math.isfinite(f) and abs(f) > _FLOAT32_MAX:
        raise CoercionError(f"{_show(v)} out of range for float")
    return f


def _boolean(v: Any) -> Any:
    if v is True or v is False:
        return v
    raise _mismatch(v, "boolean")


def _string(v: Any) -> Any:
    if type(v) is str:
        return v
    raise _mismatch(v, "string")


def _decimal(precision: int, scale: int) -> Converter:
    quantum = Decimal(1).scaleb(-scale)
    max_abs = Decimal(10) ** (precision - scale)
    name = f"decimal({precision}, {scale})"

    def convert(v: Any) -> Any:
        if isinstance(v, Decimal):
            d = v
        elif _is_int(v):
            d = Decimal(v)
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise CoercionError(f"{v} is not a finite {name}")
            d = Decimal(repr(v))
        elif isinstance(v, str):
            if _DECIMAL_RE.match(v) is None:
                raise CoercionError(f"{_show(v)} is not a decimal number")
            d = Decimal(v)
        else:
            raise _mismatch(v, name)
        if not d.is_finite():
            raise CoercionError(f"{_show(v)} is not a finite {name}")
        try:
            q = d.quantize(quantum, context=_DECIMAL_CONTEXT)
        except InvalidOperation:
            raise CoercionError(f"{_show(v)} does not fit {name}") from None
        if q != d:
            raise CoercionError(f"{_show(v)} has more than {scale} decimal places ({name})")
        if abs(q) >= max_abs:
            raise CoercionError(f"{_show(v)} needs more than {precision} digits ({name})")
        return q

    return convert


def decode_base64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise CoercionError(f"{_show(text)} is not standard base64") from None


def _binary(v: Any) -> Any:
    if isinstance(v, bytes):
        return v
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if type(v) is str:
        return decode_base64(v)
    raise _mismatch(v, "binary")


def _fixed(length: int) -> Converter:
    def convert(v: Any) -> Any:
        b = _binary(v)
        if len(b) != length:
            raise CoercionError(f"expected {length} bytes for fixed[{length}], got {len(b)}")
        return b

    return convert


def _uuid(v: Any) -> Any:
    if isinstance(v, uuid.UUID):
        return v.bytes
    if type(v) is str:
        if _UUID_RE.match(v) is None:
            raise CoercionError(f"{_show(v)} is not a canonical UUID")
        return uuid.UUID(v).bytes
    if isinstance(v, bytes) and len(v) == 16:
        return v
    raise _mismatch(v, "uuid")


def _epoch_count(v: EpochTime, per_unit: int, what: str) -> int:
    if v.unit == "D":
        raise CoercionError(f"a day count cannot fill a {what} column")
    return _rescale(v.count * _UNIT_NANOS[v.unit], per_unit, v)


def _auto_unit(n: int) -> str:
    a = abs(n)
    return "ms" if a < 10**14 else "us" if a < 10**17 else "ns"


def _date(options: CoercionOptions) -> Converter:
    def convert(v: Any) -> Any:
        if type(v) is str:
            return parse_date(v)
        if isinstance(v, dt.datetime):
            raise CoercionError(f"expected a date, got timestamp {_show(v)}")
        if isinstance(v, dt.date):
            return (v - _EPOCH_DATE).days
        if isinstance(v, EpochTime):
            if v.unit == "D":
                return v.count
            return _rescale(v.count * _UNIT_NANOS[v.unit], _UNIT_NANOS["D"], v)
        if type(v) is int and options.epoch_unit is not None:
            return v
        raise _mismatch(v, "date")

    return convert


def _time(per_unit: int, options: CoercionOptions) -> Converter:
    def convert(v: Any) -> Any:
        if type(v) is str:
            return parse_time(v, per_unit)
        if isinstance(v, dt.time):
            if v.tzinfo is not None:
                raise CoercionError(f"time {_show(v)} has a zone; time columns have none")
            nanos = ((v.hour * 60 + v.minute) * 60 + v.second) * 10**9 + v.microsecond * 1000
            return _rescale(nanos, per_unit, v)
        if isinstance(v, EpochTime):
            count = _epoch_count(v, per_unit, "time")
        elif type(v) is int and options.epoch_unit is not None:
            unit = "us" if options.epoch_unit == "auto" else options.epoch_unit
            count = _rescale(v * _UNIT_NANOS[unit], per_unit, f"{v} {unit}")
        else:
            raise _mismatch(v, "time")
        if not 0 <= count < 86_400_000_000_000 // per_unit:
            raise CoercionError(f"time of day {_show(v)} out of range")
        return count

    return convert


def _timestamp(per_unit: int, zoned: bool, options: CoercionOptions) -> Converter:
    naive_as_utc = options.naive_timestamps_as_utc
    kind = "timestamptz" if zoned else "timestamp"

    def convert(v: Any) -> Any:
        if type(v) is str:
            count = parse_timestamp(v, per_unit, zoned, naive_as_utc)
        elif isinstance(v, dt.datetime):
            if v.tzinfo is None:
                if zoned and not naive_as_utc:
                    raise CoercionError(f"{_show(v)} has no zone but the column is timestamptz")
                delta = v - _EPOCH_NAIVE
            else:
                off = v.utcoffset()
                if off and not zoned:
                    raise CoercionError(f"{_show(v)} has a UTC offset; column is {kind}")
                delta = v - _EPOCH
            nanos = (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000
            count = _rescale(nanos, per_unit, v)
        elif isinstance(v, EpochTime):
            count = _epoch_count(v, per_unit, kind)
        elif type(v) is int and options.epoch_unit is not None:
            unit = _auto_unit(v) if options.epoch_unit == "auto" else options.epoch_unit
            count = _rescale(v * _UNIT_NANOS[unit], per_unit, f"{v} {unit}")
        else:
            raise _mismatch(v, kind)
        if not _INT64[0] <= count <= _INT64[1]:
            raise CoercionError(f"{_show(v)} out of range for {kind}")
        return count

    return convert


def primitive_converter(t: PrimitiveType, options: CoercionOptions) -> Converter:
    n = t.name
    if n == "boolean":
        return _boolean
    if n == "int":
        return _integer(*_INT32, "int")
    if n == "long":
        return _integer(*_INT64, "long")
    if n == "float":
        return _float
    if n == "double":
        return _double
    if n == "string":
        return _string
    if n == "binary":
        return _binary
    if n == "uuid":
        return _uuid
    if n == "fixed":
        return _fixed(t.length)
    if n == "decimal":
        return _decimal(t.precision, t.scale)
    if n == "date":
        return _date(options)
    if n == "time":
        return _time(_UNIT_NANOS["us"], options)
    if n in ("timestamp", "timestamptz"):
        return _timestamp(_UNIT_NANOS["us"], n == "timestamptz", options)
    if n in ("timestamp_ns", "timestamptz_ns"):
        return _timestamp(1, n == "timestamptz_ns", options)
    raise ConfigError(f"column type {t} cannot be decoded from records")


# ---------------------------------------------------------------- nested converters


class StructConverter:
    """Converts a mapping to a dict keyed by the schema's field names (one pass)."""

    def __init__(self, fields: tuple[NestedField, ...], options: CoercionOptions) -> None:
        self.names = tuple(f.name for f in fields)
        self.required = tuple(f.required for f in fields)
        #: A field's ``write-default``: its value when a record does not carry the field
        #: at all (an explicit null stays null).
        self.defaults = tuple(default_value(f.field_type, f.write_default) for f in fields)
        self.converters = tuple(build_converter(f.field_type, options) for f in fields)
        self.case_insensitive = options.case_insensitive
        self.by_lower = {f.name.lower(): f.name for f in fields}
        self.name_set = frozenset(self.names)

    def values(
        self, obj: Mapping[str, Any], unknown: UnknownFields | None, prefix: str
    ) -> list[Any]:
        if self.case_insensitive:
            obj = self._fold(obj)
        out: list[Any] = []
        matched = 0
        name = ""
        try:
            for name, required, convert, default in zip(
                self.names, self.required, self.converters, self.defaults
            ):
                v = obj.get(name)
                if v is None:
                    if name in obj:
                        matched += 1
                    elif default is not None:
                        out.append(default)
                        continue
                    if required:
                        raise CoercionError("required field is missing or null")
                    out.append(None)
                    continue
                matched += 1
                if isinstance(convert, StructConverter):
                    if not isinstance(v, dict):
                        raise _mismatch(v, "struct")
                    inner = convert.values(v, unknown, f"{prefix}{name}.")
                    out.append(dict(zip(convert.names, inner)))
                else:
                    out.append(convert(v))
        except CoercionError as exc:
            # Unknown fields of a refused record are still worth reporting (a misspelt
            # or renamed column is often why it was refused).
            self._collect_unknown(obj, unknown, prefix)
            raise exc.at(name) from None
        if unknown is not None and matched != len(obj):
            self._collect_unknown(obj, unknown, prefix)
        return out

    def _collect_unknown(
        self, obj: Mapping[str, Any], unknown: UnknownFields | None, prefix: str
    ) -> None:
        if unknown is None:
            return
        for key, value in obj.items():
            if key not in self.name_set:
                unknown.setdefault(prefix + str(key), set()).add(json_type_name(value))

    def _fold(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        folded: dict[str, Any] = {}
        for key, value in obj.items():
            name = self.by_lower.get(key.lower(), key) if isinstance(key, str) else key
            if name in folded and folded[name] is not None:
                raise CoercionError(f"field {name!r} appears twice when case is ignored")
            folded[name] = value
        return folded

    def __call__(self, v: Any) -> Any:
        if not isinstance(v, dict):
            raise _mismatch(v, "struct")
        return dict(zip(self.names, self.values(v, None, "")))


def _list(t: ListType, options: CoercionOptions) -> Converter:
    convert = build_converter(t.element_type, options)
    required = t.element_required

    def convert_list(v: Any) -> Any:
        if not isinstance(v, list):
            raise _mismatch(v, "list")
        out: list[Any] = []
        for i, e in enumerate(v):
            if e is None:
                if required:
                    raise CoercionError("required list element is null").at(f"[{i}]")
                out.append(None)
                continue
            try:
                out.append(convert(e))
            except CoercionError as exc:
                raise exc.at(f"[{i}]") from None
        return out

    return convert_list


def _map_key(t: IcebergType, options: CoercionOptions) -> Converter:
    convert = build_converter(t, options)
    if isinstance(t, PrimitiveType) and t.name in ("int", "long"):

        def int_key(k: Any) -> Any:
            if type(k) is str and _INT_KEY_RE.match(k):
                k = int(k)
            return convert(k)

        return int_key
    return convert


def _map(t: MapType, options: CoercionOptions) -> Converter:
    convert_key = _map_key(t.key_type, options)
    convert_value = build_converter(t.value_type, options)
    required = t.value_required

    def convert_map(v: Any) -> Any:
        if not isinstance(v, dict):
            raise _mismatch(v, "map (object)")
        out = []
        for k, e in v.items():
            try:
                key = convert_key(k)
            except CoercionError as exc:
                raise exc.at(f"[key {_show(k, 30)}]") from None
            if e is None:
                if required:
                    raise CoercionError("required map value is null").at(f"[{_show(k, 30)}]")
                out.append((key, None))
                continue
            try:
                out.append((key, convert_value(e)))
            except CoercionError as exc:
                raise exc.at(f"[{_show(k, 30)}]") from None
        return out

    return convert_map


def build_converter(t: IcebergType, options: CoercionOptions) -> Converter:
    """A callable converting one decoded value of type ``t`` (never called with None)."""
    if isinstance(t, PrimitiveType):
        return primitive_converter(t, options)
    if isinstance(t, StructType):
        return StructConverter(t.fields, options)
    if isinstance(t, ListType):
        return _list(t, options)
    if isinstance(t, MapType):
        return _map(t, options)
    raise ConfigError(f"unsupported column type {t}")
