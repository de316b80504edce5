"""Schema changes people meet (issue 22, part 6; issue 23, part 4), from the change
events' schemas (JSON converter and Avro writer schemas) to a real table and its readers:

* a field added inside an existing struct column is added to the table (it was logged
  and left out); rows written before read null for it;
* a column the source adds with a default takes it as ``initial-default`` and
  ``write-default``: rows written before read the default in all three readers and in
  calving's own compaction, which writes it into the new files;
* a column the source drops stays, and the table records it
  (``calving.source.dropped-columns``, shown by ``calving table show``) until the source
  sends it again.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from calving.commit.maintenance.compaction import compact
from calving.commit.maintenance.compaction_plan import CompactionPolicy
from calving.commit.spec.arrow import schema_to_arrow
from calving.commit.spec.partition import UNPARTITIONED
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import LONG, STRING, NestedField, StructType
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.update_schema import DROPPED_AT_SOURCE, dropped_at_source
from calving.commit.table.table import Table, create_table
from calving.ingest.show import describe_table
from calving.ingest.sink.many.evolve import evolution
from calving.ingest.sink.many.tasks import AVRO_SCHEMA_ID
from calving.ingest.write.rewrite import local_rewrite
from calving.ingest.write.task_writer import TaskWriter
from tests.ingest.decode.test_avro_confluent import DictSource
from tests.support.oracles import ALL_READERS

CURRENT = Schema(
    (
        NestedField(1, "id", LONG, True),
        NestedField(2, "addr", StructType((NestedField(3, "city", STRING),))),
        NestedField(4, "note", STRING),
    ),
    identifier_field_ids=(1,),
)
ID = {"type": "int64", "optional": False, "field": "id"}
NOTE = {"type": "string", "optional": True, "field": "note"}


def _addr(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "struct", "optional": True, "field": "addr", "name": "p.s.t.Addr",
            "fields": [{"type": "string", "optional": True, "field": "city"}, *fields]}  # fmt: skip


def _json(*fields: dict[str, Any]) -> str:
    row = {"type": "struct", "optional": True, "name": "p.s.t.Value", "fields": list(fields)}
    return json.dumps({"type": "struct", "name": "p.s.t.Envelope", "fields": [
        {**row, "field": "before"}, {**row, "field": "after"},
        {"type": "string", "optional": False, "field": "op"}]})  # fmt: skip


def _avro(*fields: dict[str, Any]) -> dict[str, Any]:
    row = {"type": "record", "name": "Value", "namespace": "p.s.t", "fields": list(fields)}
    return {"type": "record", "name": "Envelope", "namespace": "p.s.t", "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "op", "type": "string"}]}  # fmt: skip


AVRO_ID = {"name": "id", "type": "long"}
AVRO_NOTE = {"name": "note", "type": ["null", "string"], "default": None}
AVRO_ADDR_ZIP = {"name": "addr", "type": ["null", {"type": "record", "name": "Addr", "fields": [
    {"name": "city", "type": ["null", "string"], "default": None},
    {"name": "zip", "type": ["null", "string"], "default": None}]}], "default": None}  # fmt: skip


def _table(catalog: Any, name: str) -> Table:
    return create_table(catalog, ("db", name), CURRENT)


def _write(table: Table, rows: list[dict[str, Any]]) -> None:
    schema = table.metadata.schema
    writer = TaskWriter(table.io, table.metadata.location, schema, UNPARTITIONED, file_prefix="t")
    writer.write(pa.Table.from_pylist(rows, schema=schema_to_arrow(schema)))
    table.commit_or_raise(FastAppend(tuple(w.data_file for w in writer.close())))


def _texts(
    fmt: str, json_fields: list[dict[str, Any]], avro_fields: list[dict[str, Any]]
) -> tuple[list[str], Any]:
    if fmt == "json":
        return [_json(*json_fields)], None
    return [f"{AVRO_SCHEMA_ID}7"], DictSource({7: _avro(*avro_fields)})


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_a_field_added_inside_a_struct_is_followed(sqlite_catalog: Any, fmt: str) -> None:
    texts, source = _texts(
        fmt,
        [ID, _addr({"type": "string", "optional": True, "field": "zip"}), NOTE],
        [AVRO_ID, AVRO_ADDR_ZIP, AVRO_NOTE],
    )
    change = evolution("s.t", CURRENT, texts, source)
    assert change.stopped is None and change.update is not None
    assert [(c.name, str(c.field_type)) for c in change.update.add] == [("addr.zip", "string")]

    table = _table(sqlite_catalog, f"nested_{fmt}")
    _write(table, [{"id": 1, "addr": {"city": "a"}, "note": "x"}])
    table.commit_or_raise(change.update)
    zip_field = table.metadata.schema.find_field_by_name("addr.zip")
    assert zip_field is not None and zip_field.field_id == 5 and not zip_field.required
    _write(table, [{"id": 2, "addr": {"city": "b", "zip": "z"}, "note": "y"}])
    want = [(1, {"city": "a", "zip": None}), (2, {"city": "b", "zip": "z"})]
    for name, reader in ALL_READERS.items():
        if name == "datafusion":  # pyiceberg-core 0.11 cannot read files without the field
            with pytest.raises(Exception, match="Incorrect number of arrays for StructArray"):
                reader(table.metadata_location, ["id", "addr"])
            continue
        assert reader(table.metadata_location, ["id", "addr"]) == want, name
    # Compaction writes the old rows with the new field; then every reader reads them.
    policy = CompactionPolicy(target_file_bytes=1 << 20, min_input_files=2)
    assert compact(table, policy, local_rewrite(table.io, 1 << 20)).groups_committed == 1
    for name, reader in ALL_READERS.items():
        assert reader(table.metadata_location, ["id", "addr"]) == want, name


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_an_added_column_takes_the_source_default(sqlite_catalog: Any, fmt: str) -> None:
    texts, source = _texts(
        fmt,
        [
            ID,
            _addr(),
            NOTE,
            {"type": "int64", "optional": True, "field": "qty", "default": 7},
            {
                "type": "int64",
                "optional": True,
                "field": "at",
                "default": 1_767_225_600_000_000,
                "name": "io.debezium.time.MicroTimestamp",
            },
        ],
        [
            AVRO_ID,
            AVRO_NOTE,
            {"name": "qty", "type": ["long", "null"], "default": 7},
            {
                "name": "at",
                "type": {
                    "type": "long",
                    "connect.name": "io.debezium.time.MicroTimestamp",
                    "connect.default": 1_767_225_600_000_000,
                },
            },
        ],
    )
    change = evolution("s.t", CURRENT, texts, source)
    assert change.update is not None
    added = {c.name: c.default for c in change.update.add}
    assert added == {"qty": 7, "at": "2026-01-01T00:00:00.000000"}

    table = _table(sqlite_catalog, f"defaults_{fmt}")
    _write(table, [{"id": 1, "addr": None, "note": "x"}])
    table.commit_or_raise(change.update)
    qty = table.metadata.schema.find_field_by_name("qty")
    assert qty is not None and (qty.initial_default, qty.write_default) == (7, 7)
    _write(table, [{"id": 2, "addr": None, "note": "y", "qty": 3, "at": 5}])
    want = [(1, 7, "2026-01-01 00:00:00"), (2, 3, "1970-01-01 00:00:00.000005")]
    for name, reader in ALL_READERS.items():
        rows = reader(table.metadata_location, ["id", "qty", "at"])
        assert [(i, q, str(a)) for i, q, a in rows] == want, name
    # calving's compaction writes the default into the rewritten rows.
    policy = CompactionPolicy(target_file_bytes=1 << 20, min_input_files=2)
    assert compact(table, policy, local_rewrite(table.io, 1 << 20)).groups_committed == 1
    for name, reader in ALL_READERS.items():
        rows = reader(table.metadata_location, ["id", "qty", "at"])
        assert [(i, q, str(a)) for i, q, a in rows] == want, name


def test_a_dropped_column_is_recorded_until_it_comes_back(sqlite_catalog: Any) -> None:
    table = _table(sqlite_catalog, "dropped")
    change = evolution("s.t", CURRENT, [_json(ID, _addr())])  # note dropped
    assert change.update is None and change.stopped is None and change.record is not None
    table.commit_or_raise(change.record)
    assert dropped_at_source(table.metadata) == ["note"]
    assert "dropped at the source  note" in describe_table(table)
    assert table.metadata.schema.find_field_by_name("note") is not None  # the column stays

    change = evolution("s.t", CURRENT, [_json(ID, _addr(), NOTE)])
    assert change.record is not None
    table.commit_or_raise(change.record)
    assert DROPPED_AT_SOURCE not in table.metadata.properties
    assert "dropped at the source" not in describe_table(table)
