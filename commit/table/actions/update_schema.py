"""Schema evolution a stream needs: add optional columns, widen int->long and
float->double (and other promotions the spec allows)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from calving.commit.errors import SchemaError
from calving.commit.io import FileIO
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.schema import FieldIds, Schema, assign_fresh_ids
from calving.commit.spec.types import (
    IcebergType,
    NestedField,
    PrimitiveType,
    can_promote,
    same_shape,
)
from calving.commit.spec.updates import AddSchema, AssertCurrentSchemaId, SetCurrentSchema
from calving.commit.table.actions.base import MetadataUpdates, NoChange, Plan


@dataclass(frozen=True)
class AddColumn:
    name: str  # top-level column name
    field_type: IcebergType  # nested ids inside are reassigned
    doc: str | None = None


@dataclass(frozen=True)
class UpdateSchema:
    add: tuple[AddColumn, ...] = ()
    promote: tuple[tuple[str, PrimitiveType], ...] = ()
    #: Top-level required columns that become optional (a source column made nullable
    #: or dropped: new rows have no value). Identifier fields stay required.
    make_optional: tuple[str, ...] = ()

    def plan(self, base: TableMetadata, io: FileIO, commit_id: str) -> Plan:
        schema = base.schema
        fields = list(schema.fields)
        ids = FieldIds(base.last_column_id)
        changed = False
        for col in self.add:
            existing = schema.find_field_by_name(col.name)
            if existing is not None:
                if same_shape(existing.field_type, col.field_type):
                    continue  # added already (e.g. by a concurrent writer)
                raise SchemaError(
                    f"column {col.name!r} exists as {existing.field_type}, cannot add it as "
                    f"{col.field_type}"
                )
            column = NestedField(0, col.name, col.field_type, False, col.doc)
            fields.extend(assign_fresh_ids([column], ids))
            changed = True
        for name, new_type in self.promote:
            idx = next((i for i, f in enumerate(fields) if f.name == name), None)
            if idx is None:
                raise SchemaError(f"cannot promote column {name!r}: no such column")
            old = fields[idx]
            if old.field_type == new_type:
                continue
            if not can_promote(old.field_type, new_type):
                raise SchemaError(
                    f"column {name!r} cannot change from {old.field_type} to {new_type}: "
                    "only int->long, float->double, date->timestamp and decimal precision "
                    "widening are allowed"
                )
            fields[idx] = replace(old, field_type=new_type)
            changed = True
        for name in self.make_optional:
            idx = next((i for i, f in enumerate(fields) if f.name == name), None)
            if idx is None:
                raise SchemaError(f"cannot make column {name!r} optional: no such column")
            old = fields[idx]
            if old.field_id in schema.identifier_field_ids:
                raise SchemaError(f"column {name!r} is an identifier field; it stays required")
            if old.required:
                fields[idx] = replace(old, required=False)
                changed = True
        if not changed:
            return NoChange("schema already has these changes")
        candidate = Schema(tuple(fields), 0, schema.identifier_field_ids)
        for s in base.schemas:  # reuse an identical earlier schema's id, as Java does
            if (
                s.fields == candidate.fields
                and s.identifier_field_ids == schema.identifier_field_ids
            ):
                return MetadataUpdates(
                    (SetCurrentSchema(s.schema_id),),
                    (AssertCurrentSchemaId(base.current_schema_id),),
                )
        new_id = max(s.schema_id for s in base.schemas) + 1
        new_schema = replace(candidate, schema_id=new_id)
        return MetadataUpdates(
            (AddSchema(new_schema, max(ids.last, base.last_column_id)), SetCurrentSchema(new_id)),
            (AssertCurrentSchemaId(base.current_schema_id),),
        )
