"""Thrift's compact protocol as a schema-less tree: enough to read a Parquet footer
(``FileMetaData``), change a few fields and write it back byte for byte.

Nothing here knows Parquet: a struct is its fields in wire order, each with its field id,
wire type and value, so a footer that is decoded and encoded again is the same bytes,
fields this module has never heard of included. A caller that only passes some structs
through (a footer's column chunks, when columns are appended) names them in ``raw``:
they are skipped over, kept as their bytes (``RawStruct``) and written back verbatim.
Codecs on bytes only (no I/O).
"""

from __future__ import annotations

import struct as _struct
from dataclasses import dataclass, field
from typing import Any

# Compact-protocol wire types.
STOP = 0
TRUE = 1
FALSE = 2
BYTE = 3
I16 = 4
I32 = 5
I64 = 6
DOUBLE = 7
BINARY = 8
LIST = 9
SET = 10
MAP = 11
STRUCT = 12

_INTS = (I16, I32, I64)


class ThriftError(ValueError):
    """Bytes that are not a well-formed compact-protocol struct."""


@dataclass
class ListValue:
    """A list (or set): its element wire type and elements."""

    element_type: int
    items: list[Any]


@dataclass
class MapValue:
    """A map: key and value wire types and its entries in wire order."""

    key_type: int
    value_type: int
    items: list[tuple[Any, Any]]


@dataclass
class Field:
    id: int
    type: int  # TRUE stands for any boolean field
    value: Any


@dataclass(frozen=True)
class RawStruct:
    """A struct kept as its encoded bytes (``decode_struct``'s ``raw``), written back as
    they are; ``ids`` are its top-level field ids."""

    data: bytes
    ids: frozenset[int]

    def has(self, field_id: int) -> bool:
        return field_id in self.ids


#: ``decode_struct``'s ``raw``: field id -> ``RAW`` (that field's structs, or a list's,
#: are kept as bytes) or a nested ``raw`` for the structs of that field.
RawSpec = dict[int, Any]
RAW = "raw"


@dataclass
class Struct:
    fields: list[Field] = field(default_factory=list)

    def get(self, field_id: int, default: Any = None) -> Any:
        for f in self.fields:
            if f.id == field_id:
                return f.value
        return default

    def has(self, field_id: int) -> bool:
        return any(f.id == field_id for f in self.fields)

    def set(self, field_id: int, wire_type: int, value: Any) -> None:
        """Set a field, in place if present, else in field-id order."""
        for f in self.fields:
            if f.id == field_id:
                f.type, f.value = wire_type, value
                return
        at = next((i for i, f in enumerate(self.fields) if f.id > field_id), len(self.fields))
        self.fields.insert(at, Field(field_id, wire_type, value))


# ---------------------------------------------------------------- decoding


def _ends_early(pos: int) -> ThriftError:
    return ThriftError(f"struct ends early, at byte {pos}")


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    try:
        b = data[pos]
        if b < 0x80:  # most of a footer's numbers: one byte
            return b, pos + 1
        out, shift = b & 0x7F, 7
        while True:
            pos += 1
            b = data[pos]
            out |= (b & 0x7F) << shift
            if b < 0x80:
                return out, pos + 1
            shift += 7
            if shift > 70:
                raise ThriftError(f"varint too long at byte {pos + 1}")
    except IndexError:
        raise _ends_early(len(data)) from None


def _read_zigzag(data: bytes, pos: int) -> tuple[int, int]:
    n, pos = _read_varint(data, pos)
    return (n >> 1) ^ -(n & 1), pos


def _take(data: bytes, pos: int, n: int) -> tuple[bytes, int]:
    if n < 0 or pos + n > len(data):
        raise ThriftError(f"{n} bytes wanted at byte {pos}, {len(data)} in all")
    return data[pos : pos + n], pos + n


def _byte(data: bytes, pos: int) -> int:
    if pos >= len(data):
        raise _ends_early(pos)
    return data[pos]


def _read_value(data: bytes, pos: int, wire_type: int) -> tuple[Any, int]:
    """The value of ``wire_type`` at ``pos`` and the position after it. A function per
    value over ``(data, pos)``, not a reader object's methods: a footer is mostly small
    ints, and a call per byte was most of the decoding time."""
    if wire_type == I32 or wire_type == I64 or wire_type == I16:
        return _read_zigzag(data, pos)
    if wire_type == BINARY:
        n, pos = _read_varint(data, pos)
        return _take(data, pos, n)
    if wire_type == STRUCT:
        return _read_struct(data, pos)
    if wire_type == LIST or wire_type == SET:
        return _read_list(data, pos)
    if wire_type == BYTE:
        b = _byte(data, pos)
        return (b - 256 if b > 127 else b), pos + 1
    if wire_type == TRUE or wire_type == FALSE:  # an element of a collection: one byte
        return _byte(data, pos) == TRUE, pos + 1
    if wire_type == DOUBLE:
        raw, pos = _take(data, pos, 8)
        return _struct.unpack("<d", raw)[0], pos
    if wire_type == MAP:
        return _read_map(data, pos)
    raise ThriftError(f"unknown wire type {wire_type} at byte {pos}")


def _read_list(data: bytes, pos: int) -> tuple[ListValue, int]:
    header = _byte(data, pos)
    pos += 1
    size, element_type = header >> 4, header & 0x0F
    if size == 15:
        size, pos = _read_varint(data, pos)
    items = []
    for _ in range(size):
        item, pos = _read_value(data, pos, element_type)
        items.append(item)
    return ListValue(element_type, items), pos


def _read_map(data: bytes, pos: int) -> tuple[MapValue, int]:
    size, pos = _read_varint(data, pos)
    if not size:
        return MapValue(0, 0, []), pos
    types = _byte(data, pos)
    pos += 1
    kt, vt = types >> 4, types & 0x0F
    items = []
    for _ in range(size):
        k, pos = _read_value(data, pos, kt)
        v, pos = _read_value(data, pos, vt)
        items.append((k, v))
    return MapValue(kt, vt, items), pos


def _read_struct(data: bytes, pos: int, spec: RawSpec | None = None) -> tuple[Struct, int]:
    """The struct at ``pos``; fields ``spec`` names are read by ``_read_special``."""
    fields: list[Field] = []
    last = 0
    while True:
        header = _byte(data, pos)
        pos += 1
        if header == STOP:
            return Struct(fields), pos
        wire_type, delta = header & 0x0F, header >> 4
        if delta:
            field_id = last + delta
        else:
            field_id, pos = _read_zigzag(data, pos)
        if wire_type == TRUE or wire_type == FALSE:
            fields.append(Field(field_id, TRUE, wire_type == TRUE))
        elif wire_type == I32 or wire_type == I64 or wire_type == I16:  # most fields
            value, pos = _read_zigzag(data, pos)
            fields.append(Field(field_id, wire_type, value))
        else:
            inner = spec.get(field_id) if spec is not None else None
            if inner is not None and wire_type in (STRUCT, LIST, SET):
                value, pos = _read_special(data, pos, wire_type, inner)
            else:
                value, pos = _read_value(data, pos, wire_type)
            fields.append(Field(field_id, wire_type, value))
        last = field_id


def _skip(data: bytes, pos: int, wire_type: int) -> int:
    """The position after the value of ``wire_type`` at ``pos``, nothing decoded: one
    loop over a stack of open structs (None) and lists ([left, element type]), every
    small value inline (a call per value was most of the time)."""
    n = len(data)
    frames: list[list[int] | None] = []
    t = wire_type
    try:
        while True:
            if t == I32 or t == I64 or t == I16:
                while data[pos] >= 0x80:
                    pos += 1
                pos += 1
            elif t == BINARY:
                length, pos = _read_varint(data, pos)
                pos += length
            elif t == STRUCT:
                frames.append(None)
            elif t == LIST or t == SET:
                header = data[pos]
                pos += 1
                size = header >> 4
                if size == 15:
                    size, pos = _read_varint(data, pos)
                frames.append([size, header & 0x0F])
            elif t == BYTE:
                pos += 1
            elif t == DOUBLE:
                pos += 8
            elif t == MAP:
                pos = _skip_map(data, pos)
            elif t != TRUE and t != FALSE:  # a struct's booleans are in their header
                raise ThriftError(f"unknown wire type {t} at byte {pos}")
            if pos > n:
                raise _ends_early(n)
            # The next value: a field of the open struct, or an element of the list.
            while True:
                if not frames:
                    return pos
                top = frames[-1]
                if top is None:
                    header = data[pos]
                    pos += 1
                    if header == STOP:
                        frames.pop()
                        continue
                    if not header >> 4:  # the field id written long
                        while data[pos] >= 0x80:
                            pos += 1
                        pos += 1
                    t = header & 0x0F
                    break
                if not top[0]:
                    frames.pop()
                    continue
                top[0] -= 1
                t = top[1]
                if t == TRUE or t == FALSE:  # a list's booleans: a byte each
                    pos += 1
                    continue
                break
    except IndexError:
        raise _ends_early(n) from None


def _skip_map(data: bytes, pos: int) -> int:
    size, pos = _read_varint(data, pos)
    if size:
        types = _byte(data, pos)
        pos += 1
        for _ in range(size):
            pos = _skip(data, _skip(data, pos, types >> 4), types & 0x0F)
    return pos


def _raw_struct(data: bytes, pos: int) -> tuple[RawStruct, int]:
    start, last = pos, 0
    ids: set[int] = set()
    while True:
        header = _byte(data, pos)
        pos += 1
        if header == STOP:
            return RawStruct(data[start:pos], frozenset(ids)), pos
        wire_type, delta = header & 0x0F, header >> 4
        if delta:
            field_id = last + delta
        else:
            field_id, pos = _read_zigzag(data, pos)
        ids.add(field_id)
        if wire_type != TRUE and wire_type != FALSE:
            pos = _skip(data, pos, wire_type)
        last = field_id


def _read_special(data: bytes, pos: int, wire_type: int, spec: Any) -> tuple[Any, int]:
    """A struct field's value, or a list's structs, read as ``spec`` says."""
    if wire_type == STRUCT:
        return _raw_struct(data, pos) if spec == RAW else _read_struct(data, pos, spec)
    header = _byte(data, pos)
    if header & 0x0F != STRUCT:
        return _read_list(data, pos)
    pos += 1
    size = header >> 4
    if size == 15:
        size, pos = _read_varint(data, pos)
    items = []
    for _ in range(size):
        item, pos = _read_special(data, pos, STRUCT, spec)
        items.append(item)
    return ListValue(STRUCT, items), pos


def decode_struct(data: bytes, raw: RawSpec | None = None) -> Struct:
    """The struct ``data`` holds, which must be all of it; the structs ``raw`` names
    are kept as their bytes (``RawStruct``)."""
    out, pos = _read_struct(data, 0, raw)
    if pos != len(data):
        raise ThriftError(f"{len(data) - pos} bytes after the struct")
    return out


# ---------------------------------------------------------------- encoding


def put_varint(n: int, out: bytearray) -> None:
    """Append ``n`` (>= 0) as an unsigned LEB128 varint (Thrift's, and Parquet's RLE
    run headers')."""
    while True:
        if n < 0x80:
            out.append(n)
            return
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def _zigzag(n: int, out: bytearray) -> None:
    put_varint((n << 1) ^ (n >> 63), out)


def _value(wire_type: int, v: Any, out: bytearray) -> None:
    if wire_type in _INTS:
        _zigzag(int(v), out)
    elif wire_type == BINARY:
        put_varint(len(v), out)
        out += v
    elif wire_type == STRUCT:
        if isinstance(v, RawStruct):
            out += v.data
        else:
            _struct_into(v, out)
    elif wire_type in (LIST, SET):
        _list(v, out)
    elif wire_type == BYTE:
        out.append(v & 0xFF)
    elif wire_type in (TRUE, FALSE):
        out.append(TRUE if v else FALSE)
    elif wire_type == DOUBLE:
        out += _struct.pack("<d", v)
    elif wire_type == MAP:
        _map(v, out)
    else:
        raise ThriftError(f"unknown wire type {wire_type}")


def _list(v: ListValue, out: bytearray) -> None:
    size = len(v.items)
    if size < 15:
        out.append(size << 4 | v.element_type)
    else:
        out.append(0xF0 | v.element_type)
        put_varint(size, out)
    for item in v.items:
        _value(v.element_type, item, out)


def _map(v: MapValue, out: bytearray) -> None:
    put_varint(len(v.items), out)
    if v.items:
        out.append(v.key_type << 4 | v.value_type)
        for k, val in v.items:
            _value(v.key_type, k, out)
            _value(v.value_type, val, out)


def _struct_into(s: Struct, out: bytearray) -> None:
    last = 0
    for f in s.fields:
        wire_type = (TRUE if f.value else FALSE) if f.type in (TRUE, FALSE) else f.type
        delta = f.id - last
        if 0 < delta <= 15:
            out.append(delta << 4 | wire_type)
        else:
            out.append(wire_type)
            _zigzag(f.id, out)
        if wire_type == I32 or wire_type == I64 or wire_type == I16:  # most fields
            _zigzag(int(f.value), out)
        elif wire_type != TRUE and wire_type != FALSE:
            _value(wire_type, f.value, out)
        last = f.id
    out.append(STOP)


def encode_struct(s: Struct) -> bytes:
    out = bytearray()
    _struct_into(s, out)
    return bytes(out)
