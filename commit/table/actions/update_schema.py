"""Schema evolution a stream needs: add optional columns and nested struct fields, widen
int->long and float->double (and other promotions the spec allows), make columns
optional, and record which columns the source no longer sends.

Paths name nested fields: ``address.zip`` is field ``zip`` of struct column ``address``;
a list's element is ``.element``, a map's value ``.value`` (``lines.element.sku``). An
added field may carry a default (JSON single-value form): it becomes the field's
``initial-default`` (rows written before read it) and ``write-default``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from calving.commit.errors import SchemaError
from calving.commit.io import FileIO
from calving.commit.spec.json_values import value_from_json
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.schema import FieldIds, Schema, assign_fresh_ids
from calving.commit.spec.types import (
    IcebergType,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
    can_promote,
    same_shape,
)
from calving.commit.spec.updates import (
    AddSchema,
    AssertCurrentSchemaId,
    RemoveProperties,
    SetCurrentSchema,
    SetProperties,
    TableUpdate,
)
from calving.commit.table.action import MetadataUpdates, NoChange, Plan

#: Table property: the columns (paths) the table has and its source no longer sends,
#: as a JSON list; absent when there are none. ``calving table show`` reports them.
DROPPED_AT_SOURCE = "calving.source.dropped-columns"


@dataclass(frozen=True)
class AddColumn:
    name: str  # a top-level column name, or the path of a field inside a struct
    field_type: IcebergType  # nested ids inside are reassigned
    doc: str | None = None
    #: JSON single-value default: initial-default and write-default of the new field.
    default: Any = None


@dataclass(frozen=True)
class UpdateSchema:
    add: tuple[AddColumn, ...] = ()
    promote: tuple[tuple[str, PrimitiveType], ...] = ()
    #: Required columns (paths) that become optional (a source column made nullable or
    #: dropped: new rows have no value). Identifier fields stay required.
    make_optional: tuple[str, ...] = ()
    #: The columns the source no longer sends (None: leave the record as it is).
    dropped_at_source: tuple[str, ...] | None = None

    def plan(self, base: TableMetadata, io: FileIO, commit_id: str) -> Plan:
        schema = base.schema
        ids = FieldIds(base.last_column_id)
        fields, changed = _Editor(schema, ids).apply(self)
        updates: list[TableUpdate] = []
        if changed:
            candidate = Schema(fields, 0, schema.identifier_field_ids)
            updates += _schema_updates(base, candidate, ids)
        updates += self._dropped_record(base)
        if not updates:
            return NoChange("schema already has these changes")
        return MetadataUpdates(tuple(updates), (AssertCurrentSchemaId(base.current_schema_id),))

    def _dropped_record(self, base: TableMetadata) -> list[TableUpdate]:
        if self.dropped_at_source is None:
            return []
        now = base.properties.get(DROPPED_AT_SOURCE)
        if not self.dropped_at_source:
            return [RemoveProperties((DROPPED_AT_SOURCE,))] if now is not None else []
        text = json.dumps(sorted(set(self.dropped_at_source)))
        return [SetProperties({DROPPED_AT_SOURCE: text})] if text != now else []


def dropped_at_source(metadata: TableMetadata) -> list[str]:
    """The columns the table's source no longer sends (see ``DROPPED_AT_SOURCE``)."""
    text = metadata.properties.get(DROPPED_AT_SOURCE)
    if not text:
        return []
    try:
        names = json.loads(text)
    except ValueError:
        return [text]
    return [str(n) for n in names] if isinstance(names, list) else [text]


def _schema_updates(base: TableMetadata, candidate: Schema, ids: FieldIds) -> list[TableUpdate]:
    for s in base.schemas:  # reuse an identical earlier schema's id, as Java does
        if (
            s.fields == candidate.fields
            and s.identifier_field_ids == candidate.identifier_field_ids
        ):
            return [SetCurrentSchema(s.schema_id)]
    new_id = max(s.schema_id for s in base.schemas) + 1
    return [
        AddSchema(replace(candidate, schema_id=new_id), max(ids.last, base.last_column_id)),
        SetCurrentSchema(new_id),
    ]


class _Editor:
    """Applies the changes to the schema's fields, by path."""

    def __init__(self, schema: Schema, ids: FieldIds) -> None:
        self.schema = schema
        self.ids = ids
        self.fields = schema.fields
        self.changed = False

    def apply(self, update: UpdateSchema) -> tuple[tuple[NestedField, ...], bool]:
        for col in update.add:
            self.add(col)
        for path, new_type in update.promote:
            self.edit(path, "promote", partial(self._promoted, new_type=new_type, path=path))
        for path in update.make_optional:
            self.edit(path, "make optional", partial(self._optional, path=path))
        return self.fields, self.changed

    def add(self, col: AddColumn) -> None:
        existing = self.schema.find_field_by_name(col.name)
        if existing is not None:
            if same_shape(existing.field_type, col.field_type):
                return  # added already (e.g. by a concurrent writer)
            raise SchemaError(
                f"column {col.name!r} exists as {existing.field_type}, cannot add it as "
                f"{col.field_type}"
            )
        if col.default is not None:
            if not isinstance(col.field_type, PrimitiveType):
                raise SchemaError(f"column {col.name!r}: only primitive columns take a default")
            value_from_json(col.field_type, col.default)  # a SchemaError if it does not fit
        *parents, name = _parts(col.name)
        new = NestedField(0, name, col.field_type, False, col.doc, col.default, col.default)
        [numbered] = assign_fresh_ids([new], self.ids)
        self.fields = _edit_struct(self.fields, parents, col.name, lambda fs: (*fs, numbered))
        self.changed = True

    def edit(self, path: str, what: str, change: Callable[[NestedField], NestedField]) -> None:
        *parents, name = _parts(path)

        def on(fields: tuple[NestedField, ...]) -> tuple[NestedField, ...]:
            at = next((i for i, f in enumerate(fields) if f.name == name), None)
            if at is None:
                raise SchemaError(f"cannot {what} column {path!r}: no such column")
            new = change(fields[at])
            self.changed |= new != fields[at]
            return (*fields[:at], new, *fields[at + 1 :])

        self.fields = _edit_struct(self.fields, parents, path, on)

    def _promoted(self, old: NestedField, new_type: PrimitiveType, path: str) -> NestedField:
        if old.field_type == new_type:
            return old
        if not can_promote(old.field_type, new_type):
            raise SchemaError(
                f"column {path!r} cannot change from {old.field_type} to {new_type}: "
                "only int->long, float->double, date->timestamp and decimal precision "
                "widening are allowed"
            )
        return replace(old, field_type=new_type)

    def _optional(self, old: NestedField, path: str) -> NestedField:
        if old.field_id in self.schema.identifier_field_ids:
            raise SchemaError(f"column {path!r} is an identifier field; it stays required")
        return replace(old, required=False)


def _parts(path: str) -> list[str]:
    return path.split(".")


def _edit_struct(
    fields: tuple[NestedField, ...],
    parents: list[str],
    path: str,
    edit: Callable[[tuple[NestedField, ...]], tuple[NestedField, ...]],
) -> tuple[NestedField, ...]:
    """``fields`` with the struct at ``parents`` (a path through structs, list elements
    and map values) replaced by ``edit`` of its fields."""
    if not parents:
        return edit(fields)
    head, rest = parents[0], parents[1:]
    at = next((i for i, f in enumerate(fields) if f.name == head), None)
    if at is None:
        raise SchemaError(f"{path!r}: no column {head!r} to change a field of")
    parent = fields[at]
    new_type = _edit_type(parent.field_type, rest, path, edit)
    return (*fields[:at], replace(parent, field_type=new_type), *fields[at + 1 :])


def _edit_type(
    t: IcebergType,
    rest: list[str],
    path: str,
    edit: Callable[[tuple[NestedField, ...]], tuple[NestedField, ...]],
) -> IcebergType:
    if isinstance(t, StructType):
        return StructType(_edit_struct(t.fields, rest, path, edit))
    if isinstance(t, ListType) and rest and rest[0] == "element":
        return replace(t, element_type=_edit_type(t.element_type, rest[1:], path, edit))
    if isinstance(t, MapType) and rest and rest[0] == "value":
        return replace(t, value_type=_edit_type(t.value_type, rest[1:], path, edit))
    raise SchemaError(f"{path!r}: {t} has no field to change there")
