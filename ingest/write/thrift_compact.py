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


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ThriftError(f"struct ends early, at byte {self.pos}")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        out, shift = 0, 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 70:
                raise ThriftError(f"varint too long at byte {self.pos}")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ThriftError(f"{n} bytes wanted at byte {self.pos}, {len(self.data)} in all")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def value(self, wire_type: int) -> Any:
        if wire_type in _INTS:
            return self.zigzag()
        if wire_type == BINARY:
            return self.take(self.varint())
        if wire_type == STRUCT:
            return self.struct()
        if wire_type in (LIST, SET):
            return self.list()
        if wire_type == BYTE:
            b = self.byte()
            return b - 256 if b > 127 else b
        if wire_type in (TRUE, FALSE):  # an element of a collection: one byte
            return self.byte() == TRUE
        if wire_type == DOUBLE:
            return _struct.unpack("<d", self.take(8))[0]
        if wire_type == MAP:
            return self.map()
        raise ThriftError(f"unknown wire type {wire_type} at byte {self.pos}")

    def list(self) -> ListValue:
        header = self.byte()
        size, element_type = header >> 4, header & 0x0F
        if size == 15:
            size = self.varint()
        return ListValue(element_type, [self.value(element_type) for _ in range(size)])

    def map(self) -> MapValue:
        size = self.varint()
        if not size:
            return MapValue(0, 0, [])
        types = self.byte()
        kt, vt = types >> 4, types & 0x0F
        return MapValue(kt, vt, [(self.value(kt), self.value(vt)) for _ in range(size)])

    def struct(self) -> Struct:
        out = Struct()
        last = 0
        while True:
            header = self.byte()
            if header == STOP:
                return out
            wire_type, delta = header & 0x0F, header >> 4
            field_id = last + delta if delta else self.zigzag()
            if wire_type in (TRUE, FALSE):
                out.fields.append(Field(field_id, TRUE, wire_type == TRUE))
            else:
                out.fields.append(Field(field_id, wire_type, self.value(wire_type)))
            last = field_id


def decode_struct(data: bytes) -> Struct:
    """The struct ``data`` holds, which must be all of it."""
    reader = _Reader(data)
    out = reader.struct()
    if reader.pos != len(data):
        raise ThriftError(f"{len(data) - reader.pos} bytes after the struct")
    return out


# ---------------------------------------------------------------- encoding


def _varint(n: int, out: bytearray) -> None:
    while True:
        if n < 0x80:
            out.append(n)
            return
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def _zigzag(n: int, out: bytearray) -> None:
    _varint((n << 1) ^ (n >> 63), out)


def _value(wire_type: int, v: Any, out: bytearray) -> None:
    if wire_type in _INTS:
        _zigzag(int(v), out)
    elif wire_type == BINARY:
        _varint(len(v), out)
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
        _varint(size, out)
    for item in v.items:
        _value(v.element_type, item, out)


def _map(v: MapValue, out: bytearray) -> None:
    _varint(len(v.items), out)
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
        if wire_type not in (TRUE, FALSE):
            _value(wire_type, f.value, out)
        last = f.id
    out.append(STOP)


def encode_struct(s: Struct) -> bytes:
    out = bytearray()
    _struct_into(s, out)
    return bytes(out)
