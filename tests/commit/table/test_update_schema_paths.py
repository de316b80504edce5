"""``UpdateSchema`` by path: fields added inside structs (also a list's element struct and
a map's value struct), nested promotions and columns made optional, defaults as
initial-default and write-default, the record of columns the source dropped, and the
refusals (a default of the wrong type, a path through a primitive)."""

from __future__ import annotations

from typing import Any

import pytest

from calving.commit.errors import SchemaError
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import (
    INT,
    LONG,
    STRING,
    ListType,
    MapType,
    NestedField,
    StructType,
)
from calving.commit.table.actions.update_schema import (
    DROPPED_AT_SOURCE,
    AddColumn,
    UpdateSchema,
    dropped_at_source,
)
from calving.commit.table.table import create_table

SCHEMA = Schema(
    (
        NestedField(1, "id", LONG, True),
        NestedField(2, "addr", StructType((NestedField(5, "n", INT, True),))),
        NestedField(3, "lines", ListType(6, StructType((NestedField(7, "sku", STRING),)))),
        NestedField(4, "tags", MapType(8, STRING, 9, StructType((NestedField(10, "v", INT),)))),
    ),
    identifier_field_ids=(1,),
)


def test_fields_added_promoted_and_made_optional_by_path(sqlite_catalog: Any) -> None:
    table = create_table(sqlite_catalog, ("db", "paths"), SCHEMA)
    table.commit_or_raise(
        UpdateSchema(
            add=(
                AddColumn("addr.zip", STRING),
                AddColumn("lines.element.qty", INT, default=1),
                AddColumn("tags.value.w", STRING),
                AddColumn("top", LONG, default=42),
            ),
            promote=(("addr.n", LONG),),
            make_optional=("addr.n",),
        )
    )
    schema = table.metadata.schema
    found = {p: schema.find_field_by_name(p) for p in ("addr.zip", "addr.n", "top")}
    assert [f.field_id for f in found.values() if f] == [11, 5, 14]
    n = found["addr.n"]
    assert n is not None and str(n.field_type) == "long" and not n.required
    lines = schema.find_field_by_name("lines")
    assert lines is not None and isinstance(lines.field_type, ListType)
    element = lines.field_type.element_type
    assert isinstance(element, StructType)
    qty = element.field_by_name("qty")
    assert qty is not None and (qty.initial_default, qty.write_default) == (1, 1)
    top = found["top"]
    assert top is not None and (top.initial_default, top.write_default) == (42, 42)
    assert table.metadata.last_column_id == 14
    # The same changes again change nothing.
    again = UpdateSchema(add=(AddColumn("addr.zip", STRING),), promote=(("addr.n", LONG),))
    assert table.commit(again).__class__.__name__ == "Skipped"


def test_refusals(sqlite_catalog: Any) -> None:
    table = create_table(sqlite_catalog, ("db", "refusals"), SCHEMA)
    with pytest.raises(SchemaError, match="default 'x' is not a valid int"):
        table.commit_or_raise(UpdateSchema(add=(AddColumn("q", INT, default="x"),)))
    with pytest.raises(SchemaError, match="'id.x': long has no field to change there"):
        table.commit_or_raise(UpdateSchema(add=(AddColumn("id.x", INT),)))
    with pytest.raises(SchemaError, match="no column 'nope'"):
        table.commit_or_raise(UpdateSchema(add=(AddColumn("nope.x", INT),)))
    with pytest.raises(SchemaError, match="identifier field"):
        table.commit_or_raise(UpdateSchema(make_optional=("id",)))


def test_the_record_of_dropped_columns(sqlite_catalog: Any) -> None:
    table = create_table(sqlite_catalog, ("db", "dropped"), SCHEMA)
    table.commit_or_raise(UpdateSchema(dropped_at_source=("tags", "addr.n")))
    assert table.metadata.properties[DROPPED_AT_SOURCE] == '["addr.n", "tags"]'
    assert dropped_at_source(table.metadata) == ["addr.n", "tags"]
    assert table.metadata.current_schema_id == 0  # metadata only
    assert table.commit(UpdateSchema(dropped_at_source=("addr.n", "tags"))).__class__.__name__ == (
        "Skipped"
    )
    table.commit_or_raise(UpdateSchema(dropped_at_source=()))
    assert DROPPED_AT_SOURCE not in table.metadata.properties
