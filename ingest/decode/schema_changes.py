"""How a table's schema changed between two versions of its source schema.

``classify_changes(table, old, new)`` compares two Iceberg schemas by column name
(nested struct fields by dotted path, list elements as ``col.element``, map parts as
``col.key`` / ``col.value``). ``old`` is normally the table's current schema, ``new`` the
one a change event's Connect schema maps to (``connect_schema``); field ids and order
do not matter. Every difference becomes one typed value:

* ``AddedColumn``: a column (or nested field) only ``new`` has; the table adds it as
  optional (existing rows have no value for it), whatever ``new`` says.
* ``WidenedType``: a promotion Iceberg allows (``can_promote``: int -> long, float ->
  double, date -> timestamp, a decimal's precision widened at the same scale).
* ``MadeOptional``: required in ``old``, optional in ``new``.
* ``DroppedColumn``: only ``old`` has it. The column stays in the table and new rows get
  nulls, so a required column must become optional (``make_optional``).
* ``IncompatibleChange``: anything else (string -> int, a decimal's scale, a struct
  becoming a primitive, a map's key type, a changed primary key, a dropped key column). Only that table's
  records should stop; ``message`` names table and column.

A narrower type in ``new`` than the table has (long -> int), optional -> required and a
timestamp of the other precision (micro- vs nanoseconds: the table's precision stays,
values that do not fit it become dead letters) need no table change and are not
reported.
"""

from __future__ import annotations

from dataclasses import dataclass

from calving.commit.errors import SchemaError
from calving.commit.spec.schema import Schema
from calving.commit.spec.type_strings import type_text
from calving.commit.spec.types import (
    IcebergType,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
    can_promote,
)


@dataclass(frozen=True)
class AddedColumn:
    table: str
    column: str
    field_type: IcebergType


@dataclass(frozen=True)
class WidenedType:
    table: str
    column: str
    old: PrimitiveType
    new: PrimitiveType


@dataclass(frozen=True)
class MadeOptional:
    table: str
    column: str


@dataclass(frozen=True)
class DroppedColumn:
    table: str
    column: str
    #: The table's column is required: it must become optional to take nulls.
    make_optional: bool


@dataclass(frozen=True)
class IncompatibleChange:
    table: str
    column: str
    reason: str

    @property
    def message(self) -> str:
        return f"table {self.table}: column {self.column!r}: {self.reason}"

    def error(self) -> IncompatibleSchemaChangeError:
        return IncompatibleSchemaChangeError(self)


class IncompatibleSchemaChangeError(SchemaError):
    """A source schema change the table cannot follow (see ``IncompatibleChange``)."""

    def __init__(self, change: IncompatibleChange) -> None:
        self.change = change
        super().__init__(change.message)


SchemaChange = AddedColumn | WidenedType | MadeOptional | DroppedColumn | IncompatibleChange


@dataclass(frozen=True)
class SchemaChanges:
    table: str
    changes: tuple[SchemaChange, ...]

    @property
    def incompatible(self) -> tuple[IncompatibleChange, ...]:
        return tuple(c for c in self.changes if isinstance(c, IncompatibleChange))

    @property
    def compatible(self) -> bool:
        return not self.incompatible

    def __bool__(self) -> bool:
        return bool(self.changes)


#: Timestamp kinds that differ only in precision (no promotion between them exists; a
#: source announcing the other precision is decoded into the table's).
_PRECISIONS = {
    "timestamp": "timestamp",
    "timestamp_ns": "timestamp",
    "timestamptz": "timestamptz",
    "timestamptz_ns": "timestamptz",
}


def classify_changes(table: str, old: Schema, new: Schema) -> SchemaChanges:
    out: list[SchemaChange] = []
    old_keys, new_keys = old.identifier_field_names, new.identifier_field_names
    if old_keys and new_keys and set(old_keys) != set(new_keys):
        out.append(
            IncompatibleChange(
                table,
                ", ".join(new_keys),
                f"primary key changed from {list(old_keys)} to {list(new_keys)}",
            )
        )
    _Walk(table, set(old_keys), out).fields(old.fields, new.fields, "")
    return SchemaChanges(table, tuple(out))


class _Walk:
    def __init__(self, table: str, keys: set[str], out: list[SchemaChange]) -> None:
        self.table = table
        self.keys = keys
        self.out = out

    def incompatible(self, column: str, reason: str) -> None:
        self.out.append(IncompatibleChange(self.table, column, reason))

    def fields(
        self, old: tuple[NestedField, ...], new: tuple[NestedField, ...], prefix: str
    ) -> None:
        new_by_name = {f.name: f for f in new}
        old_names = {f.name for f in old}
        for f in old:
            path = prefix + f.name
            now = new_by_name.get(f.name)
            if now is None:
                if path in self.keys:
                    self.incompatible(path, "the primary-key column was dropped")
                else:
                    self.out.append(DroppedColumn(self.table, path, f.required))
                continue
            self.field(f, now, path)
        for f in new:
            if f.name not in old_names:
                self.out.append(AddedColumn(self.table, prefix + f.name, f.field_type))

    def field(self, old: NestedField, new: NestedField, path: str) -> None:
        self.type(old.field_type, new.field_type, path)
        if old.required and not new.required:
            self.out.append(MadeOptional(self.table, path))

    def type(self, old: IcebergType, new: IcebergType, path: str) -> None:
        if isinstance(old, PrimitiveType) and isinstance(new, PrimitiveType):
            self.primitive(old, new, path)
        elif isinstance(old, StructType) and isinstance(new, StructType):
            self.fields(old.fields, new.fields, path + ".")
        elif isinstance(old, ListType) and isinstance(new, ListType):
            self.field(old.element_field, new.element_field, path + ".element")
        elif isinstance(old, MapType) and isinstance(new, MapType):
            self.map_key(old.key_type, new.key_type, path + ".key")
            self.field(old.value_field, new.value_field, path + ".value")
        else:
            self.incompatible(path, f"changed from {type_text(old)} to {type_text(new)}")

    def primitive(self, old: PrimitiveType, new: PrimitiveType, path: str) -> None:
        if old == new or can_promote(new, old):
            return  # the same, or narrower than the table's type: every value still fits
        if _PRECISIONS.get(old.name) == _PRECISIONS.get(new.name) is not None:
            return  # micro- vs nanosecond timestamps: the table keeps its own precision
        if can_promote(old, new):
            self.out.append(WidenedType(self.table, path, old, new))
            return
        reason = f"changed from {old} to {new}"
        if old.name == new.name == "decimal":
            reason += " (a decimal's scale cannot change)"
        self.incompatible(path, reason)

    def map_key(self, old: IcebergType, new: IcebergType, path: str) -> None:
        narrower = isinstance(new, PrimitiveType) and can_promote(new, old)
        if old != new and not narrower:  # Iceberg cannot update a map's key type
            self.incompatible(path, f"map key changed from {type_text(old)} to {type_text(new)}")
