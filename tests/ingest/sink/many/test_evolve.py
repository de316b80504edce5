"""Source schema changes -> the table's schema update, or the table stops."""

from __future__ import annotations

import json

from calving.commit.spec.schema import Schema
from calving.commit.spec.types import NestedField, PrimitiveType
from calving.commit.table.actions.update_schema import UpdateSchema
from calving.ingest.sink.many.evolve import evolution

CURRENT = Schema(
    (
        NestedField(1, "id", PrimitiveType("int"), True),
        NestedField(2, "qty", PrimitiveType("int"), False),
        NestedField(3, "name", PrimitiveType("string"), True),
    ),
    identifier_field_ids=(1,),
)


def _envelope(*fields: dict) -> str:
    row = {"type": "struct", "optional": True, "name": "p.s.t.Value", "fields": list(fields)}
    return json.dumps({"type": "struct", "name": "p.s.t.Envelope", "fields": [
        {**row, "field": "before"}, {**row, "field": "after"},
        {"type": "string", "optional": False, "field": "op"}]})  # fmt: skip


ID = {"type": "int32", "optional": False, "field": "id"}


def test_added_widened_optional_and_dropped_columns_evolve():
    text = _envelope(ID, {"type": "int64", "optional": True, "field": "qty"},
                     {"type": "string", "optional": True, "field": "email"})  # fmt: skip
    change = evolution("s.t", CURRENT, [text])
    assert change.stopped is None and isinstance(change.update, UpdateSchema)
    assert [c.name for c in change.update.add] == ["email"]
    assert [(n, str(t)) for n, t in change.update.promote] == [("qty", "long")]
    assert change.update.make_optional == ("name",)  # dropped from the source: nulls from now


def test_an_incompatible_change_stops_the_table_naming_the_column():
    text = _envelope(ID, {"type": "string", "optional": True, "field": "qty"},
                     {"type": "string", "optional": False, "field": "name"})  # fmt: skip
    change = evolution("s.t", CURRENT, [text])
    assert change.update is None and change.stopped is not None
    assert "s.t" in change.stopped and "'qty'" in change.stopped


def test_the_same_schema_changes_nothing_and_garbage_stops():
    same = _envelope(ID, {"type": "int32", "optional": True, "field": "qty"},
                     {"type": "string", "optional": False, "field": "name"})  # fmt: skip
    assert evolution("s.t", CURRENT, [same]).update is None
    assert evolution("s.t", CURRENT, ["{not json"]).stopped is not None
