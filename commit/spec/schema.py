"""Iceberg schemas: fields with ids, identifier fields, JSON form."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from calving.commit.errors import SchemaError
from calving.commit.spec.types import (
    IcebergType,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
)


@dataclass(frozen=True)
class Schema:
    fields: tuple[NestedField, ...]
    schema_id: int = 0
    identifier_field_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        seen: set[int] = set()
        for f in _walk(self.as_struct()):
            if f.field_id in seen:
                raise SchemaError(f"field id {f.field_id} ({f.name!r}) is used twice")
            seen.add(f.field_id)
        for fid in self.identifier_field_ids:
            ident = self.find_field(fid)
            if ident is None:
                raise SchemaError(f"identifier field id {fid} is not in the schema")
            f = ident
            if not isinstance(f.field_type, PrimitiveType):
                raise SchemaError(f"identifier field {f.name!r} must be a primitive")
            if f.field_type.name in ("float", "double"):
                raise SchemaError(f"identifier field {f.name!r} cannot be {f.field_type}")
            if not f.required:
                raise SchemaError(f"identifier field {f.name!r} must be required")

    def as_struct(self) -> StructType:
        return StructType(self.fields)

    def all_fields(self) -> Iterator[NestedField]:
        """Every field, nested ones included, depth first."""
        return _walk(self.as_struct())

    def find_field(self, field_id: int) -> NestedField | None:
        for f in _walk(self.as_struct()):
            if f.field_id == field_id:
                return f
        return None

    def find_field_by_name(self, name: str) -> NestedField | None:
        """Top-level lookup, or a dotted path through structs."""
        parts = name.split(".")
        current: StructType = self.as_struct()
        found: NestedField | None = None
        for i, part in enumerate(parts):
            found = current.field_by_name(part)
            if found is None:
                return None
            if i < len(parts) - 1:
                if not isinstance(found.field_type, StructType):
                    return None
                current = found.field_type
        return found

    def column_name(self, field_id: int) -> str | None:
        for path, f in _walk_named(self.as_struct(), ""):
            if f.field_id == field_id:
                return path
        return None

    @property
    def highest_field_id(self) -> int:
        return max((f.field_id for f in _walk(self.as_struct())), default=0)

    @property
    def identifier_field_names(self) -> tuple[str, ...]:
        return tuple(self.column_name(i) or str(i) for i in self.identifier_field_ids)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "struct",
            "schema-id": self.schema_id,
        }
        if self.identifier_field_ids:
            out["identifier-field-ids"] = list(self.identifier_field_ids)
        out["fields"] = [f.to_json() for f in self.fields]
        return out

    @staticmethod
    def from_json(obj: dict[str, Any]) -> Schema:
        try:
            return Schema(
                fields=tuple(NestedField.from_json(f) for f in obj["fields"]),
                schema_id=int(obj.get("schema-id", 0)),
                identifier_field_ids=tuple(int(i) for i in obj.get("identifier-field-ids", [])),
            )
        except KeyError as exc:
            raise SchemaError(f"schema JSON lacks key {exc.args[0]!r}") from None


# ---------------------------------------------------------------- fresh field ids


class FieldIds:
    """Hands out fresh field ids above ``last`` (e.g. a table's last-column-id);
    ``last`` is the highest id handed out so far."""

    def __init__(self, last: int = 0) -> None:
        self.last = last

    def __call__(self) -> int:
        self.last += 1
        return self.last


def assign_fresh_ids(
    fields: Sequence[NestedField], next_id: Callable[[], int]
) -> tuple[NestedField, ...]:
    """``fields`` with every field id, nested ones included, replaced by ids from
    ``next_id``, in Iceberg's order: the fields of a level first, then each field's
    subtree in turn (a list's element id, a map's key and value ids, then theirs). Table
    creation, schema inference, config types and added columns all number this way."""
    ids = [next_id() for _ in fields]
    return tuple(
        replace(f, field_id=fid, field_type=assign_fresh_type_ids(f.field_type, next_id))
        for fid, f in zip(ids, fields)
    )


def assign_fresh_type_ids(t: IcebergType, next_id: Callable[[], int]) -> IcebergType:
    """``t`` with the ids of everything nested in it fresh from ``next_id`` (see
    ``assign_fresh_ids``); a primitive is returned as it is."""
    if isinstance(t, StructType):
        return StructType(assign_fresh_ids(t.fields, next_id))
    if isinstance(t, ListType):
        element_id = next_id()
        element = assign_fresh_type_ids(t.element_type, next_id)
        return ListType(element_id, element, t.element_required)
    if isinstance(t, MapType):
        key_id, value_id = next_id(), next_id()
        key = assign_fresh_type_ids(t.key_type, next_id)
        value = assign_fresh_type_ids(t.value_type, next_id)
        return MapType(key_id, key, value_id, value, t.value_required)
    return t


def _children(t: IcebergType) -> tuple[NestedField, ...]:
    if isinstance(t, StructType):
        return t.fields
    if isinstance(t, ListType):
        return (t.element_field,)
    if isinstance(t, MapType):
        return (t.key_field, t.value_field)
    return ()


def _walk(t: IcebergType) -> Iterator[NestedField]:
    for f in _children(t):
        yield f
        yield from _walk(f.field_type)


def _walk_named(t: IcebergType, prefix: str) -> Iterator[tuple[str, NestedField]]:
    for f in _children(t):
        path = f"{prefix}{f.name}"
        yield path, f
        yield from _walk_named(f.field_type, path + ".")
