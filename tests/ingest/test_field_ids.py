"""One fresh-id numbering (``calving.commit.spec.schema.assign_fresh_ids``, Iceberg's
order: a level's fields first, then each subtree) for every way a column comes to be:
declared in the config of a new table, declared next to inferred columns, inferred from
records, and added to an existing table by schema evolution."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa
import pytest

from calving.commit.spec.schema import FieldIds, assign_fresh_ids
from calving.commit.spec.type_strings import check_type
from calving.commit.spec.types import IcebergType, ListType, MapType, NestedField, StructType
from calving.ingest.catalogs import ensure_table, open_catalog
from calving.ingest.config.loader import parse_config
from calving.ingest.decode import infer_schema

NESTED = "struct<a: struct<x: long, y: list<string>>, b: map<string, struct<z: int>>, c: long>"
#: NESTED as column 2 of a table: level by level, then each subtree in turn.
EXPECTED = {
    "col": 2,
    "col.a": 3,
    "col.b": 4,
    "col.c": 5,
    "col.a.x": 6,
    "col.a.y": 7,
    "col.a.y.element": 8,
    "col.b.key": 9,
    "col.b.value": 10,
    "col.b.value.z": 11,
}


def numbering(field: NestedField) -> dict[str, int]:
    def walk(t: IcebergType, prefix: str) -> Iterator[tuple[str, int]]:
        children: tuple[NestedField, ...] = ()
        if isinstance(t, StructType):
            children = t.fields
        elif isinstance(t, ListType):
            children = (t.element_field,)
        elif isinstance(t, MapType):
            children = (t.key_field, t.value_field)
        for f in children:
            yield f"{prefix}.{f.name}", f.field_id
            yield from walk(f.field_type, f"{prefix}.{f.name}")

    return {field.name: field.field_id, **dict(walk(field.field_type, field.name))}


def _config(tmp_path, columns, **table):
    doc = {
        "source": {"bootstrap_servers": "127.0.0.1:1", "topics": ["t"]},
        "format": {"type": "json"},
        "table": {
            "catalog": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": str(tmp_path / "wh"),
            "name": "db.t",
            "columns": columns,
            **table,
        },
        "sink": {"writer_id": "w", "checkpoint": str(tmp_path / "ckpt")},
    }
    return parse_config(doc, "test").table


def _create(cfg, sample=None):
    catalog = open_catalog(cfg)
    catalog.create_namespace_if_missing(("db",))
    return ensure_table(catalog, catalog.io, cfg, sample)


def test_assign_fresh_ids_numbers_a_level_before_its_subtrees() -> None:
    unnumbered = [
        NestedField(0, "id", check_type("long")),
        NestedField(0, "col", check_type(NESTED)),
    ]
    ids = FieldIds()
    fields = assign_fresh_ids(unnumbered, ids)
    assert numbering(fields[1]) == EXPECTED
    assert ids.last == max(EXPECTED.values())


@pytest.mark.integration
def test_a_declared_column_and_the_same_column_added_later_get_the_same_ids(tmp_path) -> None:
    declared = _config(
        tmp_path / "a", [{"name": "id", "type": "long"}, {"name": "col", "type": NESTED}]
    )
    created = _create(declared)
    assert numbering(created.metadata.schema.fields[1]) == EXPECTED

    first = _config(tmp_path / "b", [{"name": "id", "type": "long"}])
    table = _create(first)
    evolved = _create(
        _config(tmp_path / "b", [{"name": "id", "type": "long"}, {"name": "col", "type": NESTED}])
    )
    assert evolved.metadata.table_uuid == table.metadata.table_uuid
    assert numbering(evolved.metadata.schema.fields[1]) == EXPECTED
    assert evolved.metadata.last_column_id == max(EXPECTED.values())


@pytest.mark.integration
def test_a_declared_column_beside_inferred_ones_numbers_the_same(tmp_path) -> None:
    cfg = _config(tmp_path, [{"name": "col", "type": NESTED}], infer_schema=True)
    sample = pa.table({"value": pa.array([json.dumps({"id": 1}).encode()], pa.binary())})
    table = _create(cfg, sample)
    col, inferred = table.metadata.schema.fields
    assert (inferred.name, inferred.field_id) == ("id", 2)
    assert numbering(col) == {**EXPECTED, "col": 1}


def test_inference_numbers_the_same_way() -> None:
    record = {"id": 1, "col": {"a": {"x": 1, "y": ["s"]}, "c": 2}}
    inferred = infer_schema([json.dumps(record)]).schema
    assert numbering(inferred.fields[1]) == {
        "col": 2,
        "col.a": 3,
        "col.c": 4,
        "col.a.x": 5,
        "col.a.y": 6,
        "col.a.y.element": 7,
    }
