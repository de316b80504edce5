"""Single-value binary serialization (spec Appendix D) and column-bound truncation.

Internal value forms, used everywhere in calving:

=====================================  =========================================
Iceberg type                           Python value
=====================================  =========================================
boolean                                ``bool``
int, long                              ``int``
float, double                          ``float``
decimal(P, S)                          ``decimal.Decimal`` (exponent ``-S``)
date                                   ``int`` days since 1970-01-01
time                                   ``int`` microseconds since midnight
timestamp, timestamptz                 ``int`` microseconds since the epoch
timestamp_ns, timestamptz_ns           ``int`` nanoseconds since the epoch
string                                 ``str``
uuid                                   ``uuid.UUID``
fixed[L], binary                       ``bytes``
=====================================  =========================================
"""

from __future__ import annotations

import decimal as _decimal
import struct
import uuid as _uuid
from typing import Any

from calving.commit.errors import CorruptFileError, SchemaError
from calving.commit.spec.types import PrimitiveType

_INT = struct.Struct("<i")
_LONG = struct.Struct("<q")
_FLOAT = struct.Struct("<f")
_DOUBLE = struct.Struct("<d")

_LONG_LIKE = frozenset(
    {"long", "time", "timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns"}
)
_TIMESTAMPS = frozenset({"timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns"})
_MICROS_PER_DAY = 86_400_000_000
# Precision 38 needs 16 bytes; a longer unscaled value cannot belong to any decimal type.
_MAX_DECIMAL_BYTES = 16


# ---------------------------------------------------------------- decimals


def unscaled_value(value: _decimal.Decimal, scale: int) -> int:
    """The unscaled integer of ``value`` at ``scale``, exactly (no context rounding).

    Trailing zeros beyond ``scale`` are fine; non-zero digits beyond it are not.
    """
    if not isinstance(value, _decimal.Decimal) or not value.is_finite():
        raise SchemaError(f"decimal value must be a finite Decimal, got {value!r}")
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite, checked above
    magnitude = int("".join(map(str, digits)) or "0")
    shift = exponent + scale
    if shift >= 0:
        magnitude *= 10**shift
    else:
        magnitude, dropped = divmod(magnitude, 10**-shift)
        if dropped:
            raise SchemaError(f"decimal value {value} has more than {scale} fractional digits")
    return int(-magnitude if sign else magnitude)


def decimal_from_unscaled(unscaled: int, scale: int) -> _decimal.Decimal:
    """The Decimal with exponent ``-scale`` whose unscaled value is ``unscaled``."""
    digits = tuple(int(c) for c in str(abs(unscaled)))
    return _decimal.Decimal((1 if unscaled < 0 else 0, digits, -scale))


def min_big_endian(unscaled: int) -> bytes:
    """Fewest big-endian two's complement bytes holding ``unscaled`` (at least one)."""
    bits = unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()
    return unscaled.to_bytes(bits // 8 + 1, "big", signed=True)


# ---------------------------------------------------------------- serialization


def to_bytes(ptype: PrimitiveType, value: Any) -> bytes:
    """Appendix D binary form of ``value`` (internal representation) of type ``ptype``."""
    name = ptype.name
    try:
        if name == "boolean":
            return b"\x01" if value else b"\x00"
        if name in ("int", "date"):
            return _INT.pack(value)
        if name in _LONG_LIKE:
            return _LONG.pack(value)
        if name == "float":
            return _FLOAT.pack(value)
        if name == "double":
            return _DOUBLE.pack(value)
        if name == "string":
            return str(value).encode("utf-8")
        if name == "uuid":
            return _as_uuid(value).bytes
        if name == "fixed":
            data = bytes(value)
            if len(data) != ptype.length:
                raise SchemaError(f"{ptype} value has {len(data)} bytes")
            return data
        if name == "binary":
            return bytes(value)
        if name == "decimal":
            return min_big_endian(unscaled_value(value, ptype.scale))
    except (struct.error, OverflowError, UnicodeEncodeError, TypeError) as exc:
        raise SchemaError(f"cannot serialize {value!r} as {ptype}: {exc}") from None
    raise SchemaError(f"type {ptype} has no single-value serialization")


def from_bytes(ptype: PrimitiveType, data: bytes, source: str = "<bytes>") -> Any:
    """Inverse of ``to_bytes``. Reads bounds written before a type promotion too:
    4-byte int for long, 4-byte float for double, 4-byte date for timestamps.
    Malformed bytes raise ``CorruptFileError`` naming ``source``."""
    name = ptype.name
    size = len(data)

    def bad_length(expected: str) -> CorruptFileError:
        return CorruptFileError(source, f"{ptype} value must be {expected} bytes, got {size}")

    if name == "boolean":
        if size != 1:
            raise bad_length("1")
        return data[0] != 0
    if name in ("int", "date"):
        if size != 4:
            raise bad_length("4")
        return _INT.unpack(data)[0]
    if name in _LONG_LIKE:
        if size == 8:
            return _LONG.unpack(data)[0]
        if size == 4 and name == "long":
            return _INT.unpack(data)[0]
        if size == 4 and name in _TIMESTAMPS:
            days = _INT.unpack(data)[0]
            per_day = _MICROS_PER_DAY * (1000 if name.endswith("_ns") else 1)
            return days * per_day
        raise bad_length("8")
    if name == "float":
        if size != 4:
            raise bad_length("4")
        return _FLOAT.unpack(data)[0]
    if name == "double":
        if size == 8:
            return _DOUBLE.unpack(data)[0]
        if size == 4:
            return _FLOAT.unpack(data)[0]
        raise bad_length("8")
    if name == "string":
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptFileError(source, f"string value is not UTF-8: {exc}") from None
    if name == "uuid":
        if size != 16:
            raise bad_length("16")
        return _uuid.UUID(bytes=bytes(data))
    if name == "fixed":
        if size != ptype.length:
            raise bad_length(str(ptype.length))
        return bytes(data)
    if name == "binary":
        return bytes(data)
    if name == "decimal":
        if not 1 <= size <= _MAX_DECIMAL_BYTES:
            raise bad_length(f"1 to {_MAX_DECIMAL_BYTES}")
        return decimal_from_unscaled(int.from_bytes(data, "big", signed=True), ptype.scale)
    raise SchemaError(f"type {ptype} has no single-value serialization")


def _as_uuid(value: Any) -> _uuid.UUID:
    if isinstance(value, _uuid.UUID):
        return value
    if isinstance(value, (bytes, bytearray)):
        return _uuid.UUID(bytes=bytes(value))
    return _uuid.UUID(str(value))


# ---------------------------------------------------------------- bounds

_MAX_CODE_POINT = 0x10FFFF
_SURROGATES = range(0xD800, 0xE000)


def truncate_lower_bound(ptype: PrimitiveType, value: Any, width: int) -> Any:
    """A lower bound of at most ``width`` code points (string) or bytes (binary).

    A prefix never sorts after the value it came from. Other types pass unchanged.
    """
    _check_width(width)
    if ptype.name in ("string", "binary"):
        return value[:width]
    return value


def truncate_upper_bound(ptype: PrimitiveType, value: Any, width: int) -> Any | None:
    """An upper bound of at most ``width`` code points (string) or bytes (binary) that
    sorts at or after every value starting with the same prefix; ``None`` if none exists
    (every unit of the prefix is already the maximum). Other types pass unchanged.

    Order is that of UTF-8 bytes / raw bytes, unsigned, as Iceberg compares bounds.
    """
    _check_width(width)
    if ptype.name == "string":
        if len(value) <= width:
            return value
        return _increment_string(value[:width])
    if ptype.name == "binary":
        if len(value) <= width:
            return bytes(value)
        return _increment_bytes(bytes(value[:width]))
    return value


def _check_width(width: int) -> None:
    if width < 1:
        raise SchemaError(f"bound truncation width must be positive, got {width}")


def _increment_string(prefix: str) -> str | None:
    for i in range(len(prefix) - 1, -1, -1):
        code_point = ord(prefix[i]) + 1
        if code_point in _SURROGATES:  # not encodable in UTF-8; the next scalar value
            code_point = _SURROGATES.stop
        if code_point <= _MAX_CODE_POINT:
            return prefix[:i] + chr(code_point)
    return None


def _increment_bytes(prefix: bytes) -> bytes | None:
    for i in range(len(prefix) - 1, -1, -1):
        if prefix[i] < 0xFF:
            return prefix[:i] + bytes([prefix[i] + 1])
    return None


_FIXED_WIDTH_NUMPY = {"int": "<i4", "date": "<i4", "float": "<f4", "double": "<f8"}


def arrow_to_bytes(ptype: PrimitiveType, array: Any) -> list[bytes]:
    """The single-value serialization of every non-null value of a pyarrow array of
    ``ptype``'s Arrow type, in order (what ``to_bytes`` gives for each value, a column at
    a time: fixed-width kinds through one numpy buffer, the rest value by value)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = pc.drop_null(array)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    name = ptype.name
    dtype = _FIXED_WIDTH_NUMPY.get(name) or ("<i8" if name in _LONG_LIKE else None)
    if dtype is not None:
        width = 4 if dtype.endswith("4") else 8
        if name in ("int", "date"):
            values = values.cast(pa.int32())
        elif name in _LONG_LIKE:
            values = values.cast(pa.int64())
        raw = values.to_numpy(zero_copy_only=False).astype(dtype, copy=False).tobytes()
        return [raw[i : i + width] for i in range(0, len(raw), width)]
    if name == "boolean":
        return [b"\x01" if v else b"\x00" for v in values.to_pylist()]
    if name == "string":
        return [v.encode("utf-8") for v in values.to_pylist()]
    return [to_bytes(ptype, v) for v in values.to_pylist()]
