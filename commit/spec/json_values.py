"""JSON single-value serialization (spec Appendix C) of primitive values: the form of a
field's ``initial-default`` and ``write-default`` in table metadata.

``value_to_json`` / ``value_from_json`` convert between it and calving's internal value
forms (``calving.commit.spec.values``); ``default_array`` is a column of ``n`` copies of
a field's default as Arrow. Nested defaults are not handled: a struct default may only
be an empty object (its fields carry their own), lists and maps default to null. Pure.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

import pyarrow as pa

from calving.commit.errors import SchemaError
from calving.commit.spec.types import PrimitiveType
from calving.commit.spec.values import unscaled_value

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DAY = dt.date(1970, 1, 1)
_NO_DEFAULT = frozenset({"unknown", "variant", "geometry", "geography"})


def _split_fraction(text: str) -> tuple[str, int, int]:
    """ISO date-time text -> (whole seconds part, fraction digits as int, digit count)."""
    if "." not in text:
        return text, 0, 0
    whole, frac = text.split(".", 1)
    if not frac.isdigit() or len(frac) > 9:
        raise ValueError(f"bad fraction of a second in {text!r}")
    return whole, int(frac), len(frac)


def _timestamp_units(text: str, utc: bool, per_second: int) -> int:
    body = text
    if utc:
        if not text.endswith("+00:00"):
            raise ValueError(f"{text!r}: a timestamptz default must end in +00:00")
        body = text[: -len("+00:00")]
    elif len(text) > 19 and text[19:].lstrip("0123456789.") != "":
        raise ValueError(f"{text!r}: a timestamp default must not carry a zone offset")
    whole, frac, digits = _split_fraction(body)
    seconds = int((dt.datetime.fromisoformat(whole) - _EPOCH).total_seconds())
    scale = len(str(per_second)) - 1
    if digits > scale:
        raise ValueError(f"{text!r} has more precision than the type")
    return seconds * per_second + frac * int(10 ** (scale - digits))


def _timestamp_text(units: int, utc: bool, per_second: int) -> str:
    seconds, frac = divmod(units, per_second)
    width = len(str(per_second)) - 1
    text = (_EPOCH + dt.timedelta(seconds=seconds)).isoformat() + f".{frac:0{width}d}"
    return text + ("+00:00" if utc else "")


def value_from_json(ptype: PrimitiveType, obj: Any) -> Any:
    """The internal value of ``obj`` for a field of type ``ptype``; ``SchemaError`` when
    it is not that type's JSON form."""
    name = ptype.name
    try:
        if name in _NO_DEFAULT:
            raise ValueError(f"{name} columns default to null")
        if name == "boolean" and isinstance(obj, bool):
            return obj
        if name in ("int", "long") and isinstance(obj, int) and not isinstance(obj, bool):
            return obj
        if name in ("float", "double") and isinstance(obj, int | float):
            return float(obj)
        if not isinstance(obj, str):
            raise TypeError(f"expected a JSON string, got {obj!r}")
        if name == "string":
            return obj
        if name == "decimal":
            value = decimal.Decimal(obj)
            unscaled_value(value, ptype.scale)  # checks the scale fits
            return value.quantize(decimal.Decimal(1).scaleb(-ptype.scale))
        if name == "date":
            return (dt.date.fromisoformat(obj) - _EPOCH_DAY).days
        if name == "time":
            whole, frac, digits = _split_fraction(obj)
            t = dt.time.fromisoformat(whole)
            return ((t.hour * 60 + t.minute) * 60 + t.second) * 10**6 + frac * 10 ** (6 - digits)
        if name in ("timestamp", "timestamptz"):
            return _timestamp_units(obj, name.endswith("tz"), 10**6)
        if name in ("timestamp_ns", "timestamptz_ns"):
            return _timestamp_units(obj, name == "timestamptz_ns", 10**9)
        if name == "uuid":
            return uuid.UUID(obj)
        if name in ("binary", "fixed"):
            return bytes.fromhex(obj)
    except (TypeError, ValueError, ArithmeticError, SchemaError) as err:
        raise SchemaError(f"default {obj!r} is not a valid {ptype}: {err}") from None
    raise SchemaError(f"default {obj!r} is not a valid {ptype}")


def value_to_json(ptype: PrimitiveType, value: Any) -> Any:
    """The JSON single-value form of an internal value."""
    name = ptype.name
    if name in ("boolean", "int", "long", "string"):
        return value
    if name in ("float", "double"):
        return float(value)
    if name == "decimal":
        return str(decimal.Decimal(value).quantize(decimal.Decimal(1).scaleb(-ptype.scale)))
    if name == "date":
        return (_EPOCH_DAY + dt.timedelta(days=value)).isoformat()
    if name == "time":
        seconds, micros = divmod(value, 10**6)
        minutes, second = divmod(seconds, 60)
        return f"{minutes // 60:02d}:{minutes % 60:02d}:{second:02d}.{micros:06d}"
    if name in ("timestamp", "timestamptz"):
        return _timestamp_text(value, name.endswith("tz"), 10**6)
    if name in ("timestamp_ns", "timestamptz_ns"):
        return _timestamp_text(value, name == "timestamptz_ns", 10**9)
    if name == "uuid":
        return str(value).lower()
    if name in ("binary", "fixed"):
        return bytes(value).hex()
    raise SchemaError(f"{ptype} columns have no default value")


def default_value(ptype: Any, default: Any) -> Any:
    """A field's JSON ``default`` as the value a column of it holds (internal form; a
    uuid as its 16 bytes, as Arrow stores it); None without one."""
    if default is None or not isinstance(ptype, PrimitiveType):
        return None
    value = value_from_json(ptype, default)
    return value.bytes if ptype.name == "uuid" else value


def default_array(ptype: Any, default: Any, n: int, arrow_type: pa.DataType) -> pa.Array:
    """``n`` copies of a field's JSON ``default`` (None: nulls) as ``arrow_type``."""
    value = default_value(ptype, default)
    if value is None:
        return pa.nulls(n, arrow_type)
    return pa.repeat(pa.scalar(value, arrow_type), n)
