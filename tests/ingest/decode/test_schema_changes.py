"""Classifying source schema changes of one table (``schema_changes``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from calving.commit.spec.schema import Schema, assign_fresh_ids
from calving.commit.spec.type_strings import check_type, type_text
from calving.commit.spec.types import (
    DOUBLE,
    INT,
    LONG,
    STRING,
    NestedField,
    decimal,
)
from calving.ingest.decode.connect_schema import table_schema_from_json
from calving.ingest.decode.schema_changes import (
    AddedColumn,
    DroppedColumn,
    IncompatibleChange,
    IncompatibleSchemaChangeError,
    MadeOptional,
    WidenedType,
    classify_changes,
)

DATA = Path(__file__).resolve().parent / "connect_schemas"
T = "inventory.orders"


def _schema(*columns: tuple[str, str, bool], keys: tuple[str, ...] = ()) -> Schema:
    ids = iter(range(100, 10_000))
    fields = tuple(
        NestedField(i + 1, name, check_type(text), required)
        for i, (name, text, required) in enumerate(columns)
    )
    # Renumber nested ids so they do not collide with top-level ones.
    fields = assign_fresh_ids(fields, lambda: next(ids))
    by_name = {f.name: f.field_id for f in fields}
    return Schema(fields, identifier_field_ids=tuple(by_name[k] for k in keys))


BASE = _schema(
    ("id", "long", True),
    ("qty", "int", True),
    ("price", "decimal(10, 2)", False),
    ("weight", "float", False),
    ("note", "string", False),
    ("meta", "struct<a: int, b: string>", False),
    ("tags", "list<int>", False),
    ("attrs", "map<string, int>", False),
    keys=("id",),
)


def _ids_ignored(change: object) -> object:
    if isinstance(change, AddedColumn):  # nested ids: compare the type's shape
        return AddedColumn(change.table, change.column, check_type(type_text(change.field_type)))
    return change


def test_no_change_and_field_ids_or_order_do_not_matter():
    shuffled = Schema(tuple(reversed(BASE.fields)), 7, BASE.identifier_field_ids)
    changes = classify_changes(T, BASE, shuffled)
    assert not changes and changes.compatible and changes.changes == ()


def test_compatible_changes_are_typed():
    new = _schema(
        ("id", "long", True),
        ("qty", "long", False),  # widened and made optional
        ("price", "decimal(14, 2)", False),  # precision widened
        ("weight", "double", False),
        # note: dropped (optional)
        ("meta", "struct<a: long, b: string, c: date>", False),
        ("tags", "list<long>", False),
        ("attrs", "map<string, long>", False),
        ("added", "list<string>", True),
        keys=("id",),
    )
    changes = classify_changes(T, BASE, new)
    assert changes.compatible
    assert {_ids_ignored(c) for c in changes.changes} == {
        WidenedType(T, "qty", INT, LONG),
        MadeOptional(T, "qty"),
        WidenedType(T, "price", decimal(10, 2), decimal(14, 2)),
        WidenedType(T, "weight", check_type("float"), DOUBLE),
        DroppedColumn(T, "note", make_optional=False),
        WidenedType(T, "meta.a", INT, LONG),
        AddedColumn(T, "meta.c", check_type("date")),
        WidenedType(T, "tags.element", INT, LONG),
        WidenedType(T, "attrs.value", INT, LONG),
        AddedColumn(T, "added", check_type("list<string>")),
    }
    added = next(c for c in changes.changes if c.column == "added")
    assert added.field_type == new.find_field_by_name("added").field_type  # new's ids


def test_narrower_and_stricter_sources_need_no_change():
    new = _schema(
        ("id", "long", True),
        ("qty", "int", True),
        ("price", "decimal(8, 2)", True),  # narrower precision, now required
        ("weight", "float", True),
        ("note", "string", True),
        ("meta", "struct<a: int, b: string>", False),
        ("tags", "list<int>", False),
        ("attrs", "map<string, int>", False),
        keys=("id",),
    )
    assert classify_changes(T, BASE, new).changes == ()


def test_dropped_required_column_must_become_optional():
    new = _schema(("id", "long", True), ("price", "decimal(10, 2)", False), keys=("id",))
    dropped = [c for c in classify_changes(T, BASE, new).changes if isinstance(c, DroppedColumn)]
    assert {(c.column, c.make_optional) for c in dropped} == {
        ("qty", True),
        ("weight", False),
        ("note", False),
        ("meta", False),
        ("tags", False),
        ("attrs", False),
    }


@pytest.mark.parametrize(
    ("column", "new_type", "reason"),
    [
        ("note", "int", "changed from string to int"),
        ("qty", "string", "changed from int to string"),
        (
            "price",
            "decimal(12, 3)",
            "changed from decimal(10, 2) to decimal(12, 3) (a decimal's scale cannot change)",
        ),
        ("meta", "string", "changed from struct<a: int, b: string> to string"),
        ("tags", "map<string, int>", "changed from list<int> to map<string, int>"),
        ("weight", "double", None),  # compatible, for contrast
    ],
)
def test_incompatible_type_changes_name_table_and_column(column, new_type, reason):
    columns = [
        (f.name, new_type if f.name == column else _text(f), f.required) for f in BASE.fields
    ]
    changes = classify_changes(T, BASE, _schema(*columns, keys=("id",)))
    if reason is None:
        assert changes.compatible
        return
    assert changes.incompatible == (IncompatibleChange(T, column, reason),)
    err = changes.incompatible[0].error()
    assert isinstance(err, IncompatibleSchemaChangeError) and err.change.column == column
    assert str(err) == f"table {T}: column {column!r}: {reason}"


def _text(f: NestedField) -> str:
    return type_text(f.field_type)


def test_map_keys_and_primary_keys_cannot_change():
    new = _schema(
        *[
            (f.name, "map<long, int>" if f.name == "attrs" else _text(f), f.required)
            for f in BASE.fields
        ],
        ("region", "string", True),
        keys=("id", "region"),
    )
    assert {c.column: c.reason for c in classify_changes(T, BASE, new).incompatible} == {
        "id, region": "primary key changed from ['id'] to ['id', 'region']",
        "attrs.key": "map key changed from string to long",
    }
    keyless = _schema(*[(f.name, _text(f), f.required) for f in BASE.fields if f.name != "id"])
    assert [c.message for c in classify_changes(T, BASE, keyless).incompatible] == [
        f"table {T}: column 'id': the primary-key column was dropped"
    ]


def _orders() -> dict[str, Any]:
    return json.loads((DATA / "pg_orders.json").read_text())


def _row_fields(envelope: dict[str, Any]) -> list[dict[str, Any]]:
    after = next(f for f in envelope["fields"] if f["field"] == "after")
    return after["fields"]


def test_changes_between_two_recorded_debezium_schemas():
    """ALTER TABLE orders ADD COLUMN coupon text, ALTER qty TYPE integer, ALTER total TYPE
    numeric(14, 2), ALTER customer_id DROP NOT NULL..., DROP COLUMN weight; then an
    incompatible ALTER status TYPE integer."""
    rec = _orders()
    old = table_schema_from_json(rec["value"], rec["key"]).schema
    value = copy.deepcopy(rec["value"]["schema"])
    fields = _row_fields(value)
    by_name = {f["field"]: f for f in fields}
    by_name["qty"]["type"] = "int32"
    by_name["total"]["parameters"]["connect.decimal.precision"] = "14"
    by_name["created_at"]["optional"] = True
    fields.remove(by_name["weight"])
    fields.append({"type": "string", "optional": True, "field": "coupon"})
    new = table_schema_from_json(value, rec["key"]).schema
    changes = classify_changes(T, old, new)
    assert changes.changes == (
        WidenedType(T, "total", decimal(12, 2), decimal(14, 2)),
        MadeOptional(T, "created_at"),
        DroppedColumn(T, "weight", make_optional=False),
        AddedColumn(T, "coupon", STRING),
    )  # qty: int16 -> int32 is int -> int in Iceberg: no change
    by_name["status"].update(type="int32", name=None)
    del by_name["status"]["parameters"]
    broken = table_schema_from_json(value, rec["key"]).schema
    assert [c.message for c in classify_changes(T, old, broken).incompatible] == [
        f"table {T}: column 'status': changed from string to int"
    ]
