"""Iceberg types: primitives, struct, list, map; JSON form as in the table spec.

Pure data. Field ids live on ``NestedField`` and on the element/key/value ids of
list and map types, exactly as the spec's JSON carries them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from calving.commit.errors import SchemaError

_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_FIXED = re.compile(r"^fixed\[\s*(\d+)\s*\]$")

PRIMITIVE_NAMES = (
    "boolean",
    "int",
    "long",
    "float",
    "double",
    "date",
    "time",
    "timestamp",
    "timestamptz",
    "timestamp_ns",
    "timestamptz_ns",
    "string",
    "uuid",
    "binary",
    "unknown",
)


@dataclass(frozen=True)
class PrimitiveType:
    """A primitive type. ``name`` is the bare kind: ``decimal`` and ``fixed`` carry
    their parameters in ``precision``/``scale`` and ``length``."""

    name: str
    precision: int = 0
    scale: int = 0
    length: int = 0

    def __str__(self) -> str:
        if self.name == "decimal":
            return f"decimal({self.precision}, {self.scale})"
        if self.name == "fixed":
            return f"fixed[{self.length}]"
        return self.name

    @property
    def is_primitive(self) -> bool:
        return True

    def to_json(self) -> str:
        return str(self)


BOOLEAN = PrimitiveType("boolean")
INT = PrimitiveType("int")
LONG = PrimitiveType("long")
FLOAT = PrimitiveType("float")
DOUBLE = PrimitiveType("double")
DATE = PrimitiveType("date")
TIME = PrimitiveType("time")
TIMESTAMP = PrimitiveType("timestamp")
TIMESTAMPTZ = PrimitiveType("timestamptz")
TIMESTAMP_NS = PrimitiveType("timestamp_ns")
TIMESTAMPTZ_NS = PrimitiveType("timestamptz_ns")
STRING = PrimitiveType("string")
UUID = PrimitiveType("uuid")
BINARY = PrimitiveType("binary")
UNKNOWN = PrimitiveType("unknown")


def decimal(precision: int, scale: int) -> PrimitiveType:
    if not 1 <= precision <= 38:
        raise SchemaError(f"decimal precision must be 1..38, got {precision}")
    if scale > precision:
        raise SchemaError(f"decimal scale {scale} exceeds precision {precision}")
    return PrimitiveType("decimal", precision=precision, scale=scale)


def fixed(length: int) -> PrimitiveType:
    if length < 1:
        raise SchemaError(f"fixed length must be positive, got {length}")
    return PrimitiveType("fixed", length=length)


@dataclass(frozen=True)
class NestedField:
    field_id: int
    name: str
    field_type: IcebergType
    required: bool = False
    doc: str | None = None
    initial_default: Any = None
    write_default: Any = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.field_id,
            "name": self.name,
            "required": self.required,
            "type": type_to_json(self.field_type),
        }
        if self.doc is not None:
            out["doc"] = self.doc
        if self.initial_default is not None:
            out["initial-default"] = self.initial_default
        if self.write_default is not None:
            out["write-default"] = self.write_default
        return out

    @staticmethod
    def from_json(obj: dict[str, Any]) -> NestedField:
        try:
            return NestedField(
                field_id=int(obj["id"]),
                name=str(obj["name"]),
                field_type=type_from_json(obj["type"]),
                required=bool(obj["required"]),
                doc=obj.get("doc"),
                initial_default=obj.get("initial-default"),
                write_default=obj.get("write-default"),
            )
        except KeyError as exc:
            raise SchemaError(f"field JSON lacks key {exc.args[0]!r}: {obj!r}") from None


@dataclass(frozen=True)
class StructType:
    fields: tuple[NestedField, ...] = field(default_factory=tuple)

    @property
    def is_primitive(self) -> bool:
        return False

    def field_by_id(self, field_id: int) -> NestedField | None:
        for f in self.fields:
            if f.field_id == field_id:
                return f
        return None

    def field_by_name(self, name: str) -> NestedField | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None


@dataclass(frozen=True)
class ListType:
    element_id: int
    element_type: IcebergType
    element_required: bool = False

    @property
    def is_primitive(self) -> bool:
        return False

    @property
    def element_field(self) -> NestedField:
        return NestedField(self.element_id, "element", self.element_type, self.element_required)


@dataclass(frozen=True)
class MapType:
    key_id: int
    key_type: IcebergType
    value_id: int
    value_type: IcebergType
    value_required: bool = False

    @property
    def is_primitive(self) -> bool:
        return False

    @property
    def key_field(self) -> NestedField:
        return NestedField(self.key_id, "key", self.key_type, True)

    @property
    def value_field(self) -> NestedField:
        return NestedField(self.value_id, "value", self.value_type, self.value_required)


IcebergType = PrimitiveType | StructType | ListType | MapType


def primitive_from_string(text: str) -> PrimitiveType:
    text = text.strip()
    if text in PRIMITIVE_NAMES:
        return PrimitiveType(text)
    m = _DECIMAL.match(text)
    if m:
        return decimal(int(m.group(1)), int(m.group(2)))
    m = _FIXED.match(text)
    if m:
        return fixed(int(m.group(1)))
    raise SchemaError(f"unknown or unsupported Iceberg type {text!r}")


def type_to_json(t: IcebergType) -> Any:
    if isinstance(t, PrimitiveType):
        return str(t)
    if isinstance(t, StructType):
        return {"type": "struct", "fields": [f.to_json() for f in t.fields]}
    if isinstance(t, ListType):
        return {
            "type": "list",
            "element-id": t.element_id,
            "element": type_to_json(t.element_type),
            "element-required": t.element_required,
        }
    if isinstance(t, MapType):
        return {
            "type": "map",
            "key-id": t.key_id,
            "key": type_to_json(t.key_type),
            "value-id": t.value_id,
            "value": type_to_json(t.value_type),
            "value-required": t.value_required,
        }
    raise SchemaError(f"not an Iceberg type: {t!r}")


def type_from_json(obj: Any) -> IcebergType:
    if isinstance(obj, str):
        return primitive_from_string(obj)
    if not isinstance(obj, dict):
        raise SchemaError(f"type JSON must be a string or object, got {obj!r}")
    kind = obj.get("type")
    try:
        if kind == "struct":
            return StructType(tuple(NestedField.from_json(f) for f in obj["fields"]))
        if kind == "list":
            return ListType(
                int(obj["element-id"]),
                type_from_json(obj["element"]),
                bool(obj["element-required"]),
            )
        if kind == "map":
            return MapType(
                int(obj["key-id"]),
                type_from_json(obj["key"]),
                int(obj["value-id"]),
                type_from_json(obj["value"]),
                bool(obj["value-required"]),
            )
    except KeyError as exc:
        raise SchemaError(f"{kind} type JSON lacks key {exc.args[0]!r}") from None
    raise SchemaError(f"unknown nested type {kind!r}")


def same_shape(a: IcebergType, b: IcebergType) -> bool:
    """Equal types, ignoring field ids and the requiredness of nested fields."""
    if isinstance(a, PrimitiveType) or isinstance(b, PrimitiveType):
        return a == b
    if isinstance(a, StructType) and isinstance(b, StructType):
        return len(a.fields) == len(b.fields) and all(
            x.name == y.name and same_shape(x.field_type, y.field_type)
            for x, y in zip(a.fields, b.fields)
        )
    if isinstance(a, ListType) and isinstance(b, ListType):
        return same_shape(a.element_type, b.element_type)
    if isinstance(a, MapType) and isinstance(b, MapType):
        return same_shape(a.key_type, b.key_type) and same_shape(a.value_type, b.value_type)
    return False


def can_promote(old: IcebergType, new: IcebergType) -> bool:
    """Type promotions a schema update may make (spec: schema evolution)."""
    if old == new:
        return True
    if not (isinstance(old, PrimitiveType) and isinstance(new, PrimitiveType)):
        return False
    if old.name == "int" and new.name == "long":
        return True
    if old.name == "float" and new.name == "double":
        return True
    if old.name == "date" and new.name in ("timestamp", "timestamp_ns"):
        return True
    if old.name == "decimal" and new.name == "decimal":
        return new.scale == old.scale and new.precision >= old.precision
    return False
