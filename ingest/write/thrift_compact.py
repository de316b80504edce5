"""Thrift's compact protocol as a schema-less tree: enough to read a Parquet footer
(``FileMetaData``), change a few fields and write it back byte for byte.

Nothing here knows Parquet: a struct is its fields in wire order, each with its field id,
wire type and value, so a footer that is decoded and encoded again is the same bytes,
fields this module has never heard of included. Codecs on bytes only (no I/O).
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


def _read_struct(data: bytes, pos: int) -> tuple[Struct, int]:
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
            value, pos = _read_value(data, pos, wire_type)
            fields.append(Field(field_id, wire_type, value))
        last = field_id


def decode_struct(data: bytes) -> Struct:
    """The struct ``data`` holds, which must be all of it."""
    out, pos = _read_struct(data, 0)
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
