"""Tables from config (``calving.ingest.catalogs``): created as declared or inferred from sample
records, brought up to the config on every start (optional columns added, int->long and
float->double promoted), and incompatible changes refused naming the key and field."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from calving.commit.errors import ConfigError, SchemaError
from calving.commit.spec.types import LONG, STRING, PrimitiveType
from calving.ingest.catalogs import ensure_dead_letter_table, ensure_table, file_io, open_catalog
from calving.ingest.config.loader import parse_config
from calving.ingest.sink.dead_letters import DEAD_LETTER_TABLE_SCHEMA


def _config(tmp_path, **table):
    doc = {
        "source": {"bootstrap_servers": "127.0.0.1:1", "topics": ["t"]},
        "format": {"type": table.pop("format", "json")},
        "table": {
            "catalog": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": str(tmp_path / "wh"),
            "name": "db.t",
            **table,
        },
        "sink": {"writer_id": "w", "checkpoint": str(tmp_path / "ckpt")},
    }
    return parse_config(doc, "test")


COLUMNS = [
    {"name": "id", "type": "long"},
    {"name": "qty", "type": "int"},
    {"name": "price", "type": "float"},
    {"name": "note", "type": "string"},
]


def _open(cfg):
    io = file_io(cfg.table)
    return open_catalog(cfg.table, io), io


def test_created_as_declared_and_readable_by_pyiceberg(tmp_path):
    cfg = _config(
        tmp_path,
        columns=COLUMNS,
        identifier_fields=["id"],
        partition=["bucket(8, id)"],
        properties={"write.target-file-size-bytes": "1048576"},
    )
    catalog, io = _open(cfg)
    table = ensure_table(catalog, io, cfg.table)
    m = table.metadata
    assert m.format_version == 3
    assert [(f.name, str(f.field_type), f.required) for f in m.schema.fields] == [
        ("id", "long", True), ("qty", "int", False), ("price", "float", False),
        ("note", "string", False),
    ]  # fmt: skip
    assert m.schema.identifier_field_names == ("id",)
    assert [str(f.transform) for f in m.spec.fields] == ["bucket[8]"]
    assert m.properties["write.target-file-size-bytes"] == "1048576"

    from pyiceberg.catalog.sql import SqlCatalog

    theirs = SqlCatalog("calving", uri=cfg.table.catalog, warehouse=cfg.table.warehouse)
    loaded = theirs.load_table("db.t")
    assert [f.name for f in loaded.schema().fields] == ["id", "qty", "price", "note"]
    assert loaded.schema().identifier_field_names() == {"id"}


def test_every_start_adds_columns_and_promotes_but_never_narrows(tmp_path):
    catalog, io = _open(_config(tmp_path, columns=COLUMNS))
    ensure_table(catalog, io, _config(tmp_path, columns=COLUMNS).table)
    wider = [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "long"},  # int -> long
        {"name": "price", "type": "double"},  # float -> double
        {"name": "note", "type": "string"},
        {"name": "added", "type": "string", "required": True},  # added as optional
    ]
    table = ensure_table(catalog, io, _config(tmp_path, columns=wider).table)
    fields = {f.name: f for f in table.metadata.schema.fields}
    assert fields["qty"].field_type == LONG
    assert fields["price"].field_type == PrimitiveType("double")
    assert fields["added"].field_type == STRING and not fields["added"].required
    assert len(table.metadata.schemas) == 2
    # The old, narrower config is still satisfied by the wider table: nothing changes.
    again = ensure_table(catalog, io, _config(tmp_path, columns=COLUMNS).table)
    assert len(again.metadata.schemas) == 2


def test_incompatible_type_names_the_key_and_field(tmp_path):
    catalog, io = _open(_config(tmp_path, columns=COLUMNS))
    ensure_table(catalog, io, _config(tmp_path, columns=COLUMNS).table)
    bad = [dict(c) for c in COLUMNS]
    bad[3] = {"name": "note", "type": "long"}
    with pytest.raises(SchemaError) as err:
        ensure_table(catalog, io, _config(tmp_path, columns=bad).table)
    text = str(err.value)
    assert "table.columns[3]" in text and "'note'" in text and "string" in text


def test_other_identifier_fields_or_partitioning_are_refused(tmp_path):
    cfg = _config(tmp_path, columns=COLUMNS, identifier_fields=["id"], partition=["bucket(8, id)"])
    catalog, io = _open(cfg)
    ensure_table(catalog, io, cfg.table)
    cols = [dict(c) for c in COLUMNS]
    cols[3]["required"] = True
    other_key = _config(tmp_path, columns=cols, identifier_fields=["note"])
    with pytest.raises(SchemaError, match="table.identifier_fields"):
        ensure_table(catalog, io, other_key.table)
    other_spec = _config(
        tmp_path, columns=COLUMNS, identifier_fields=["id"], partition=["truncate(4, note)"]
    )
    with pytest.raises(SchemaError, match=r"table.partition: .*bucket\[8\]\(id\)"):
        ensure_table(catalog, io, other_spec.table)


def _sample(values, keys=None):
    return pa.table(
        {
            "key": pa.array(keys or [None] * len(values), pa.binary()),
            "value": pa.array(
                [json.dumps(v).encode() if v is not None else None for v in values], pa.binary()
            ),
        }
    )


def test_inferred_from_sample_records(tmp_path):
    cfg = _config(tmp_path, infer_schema=True, identifier_fields=["id"], partition=["day(ts)"])
    catalog, io = _open(cfg)
    sample = _sample(
        [
            {"id": 1, "name": "a", "ts": "2026-01-02T03:04:05Z", "score": 1.5},
            {"id": 2, "name": None, "ts": "2026-01-03T00:00:00Z", "score": 2},
            None,  # a tombstone-like record is skipped
        ]
    )
    table = ensure_table(catalog, io, cfg.table, sample)
    types = {f.name: str(f.field_type) for f in table.metadata.schema.fields}
    assert types == {"id": "long", "name": "string", "ts": "timestamptz", "score": "double"}
    assert table.metadata.schema.identifier_field_names == ("id",)
    assert [str(f.transform) for f in table.metadata.spec.fields] == ["day"]


def test_debezium_inference_reads_the_after_image(tmp_path):
    cfg = _config(tmp_path, format="debezium-json", infer_schema=True, identifier_fields=["id"])
    catalog, io = _open(cfg)
    sample = _sample(
        [
            {"op": "c", "before": None, "after": {"id": 1, "status": "new"}},
            {"op": "d", "before": {"id": 1, "status": "new"}, "after": None},
        ]
    )
    table = ensure_table(catalog, io, cfg.table, sample, fmt=cfg.format)
    assert [f.name for f in table.metadata.schema.fields] == ["id", "status"]


def test_a_poison_sample_record_neither_drops_the_key_nor_adds_its_columns(tmp_path):
    """Issue 20: 200 records {id, name} plus {"id": "x", "evilcol": 5} made the table
    {name, evilcol} (the key lost); the agreeing records decide now, and a nested
    mixed-type field makes no empty struct."""
    cfg = _config(tmp_path, infer_schema=True, identifier_fields=["id"])
    catalog, io = _open(cfg)
    records: list = [{"id": i, "name": f"n{i}"} for i in range(200)]
    records.insert(13, {"id": "x", "evilcol": 5})
    records.append({"id": 500, "name": "n", "evil2": {"k": [1, "x"]}})
    table = ensure_table(catalog, io, cfg.table, _sample(records))
    types = {f.name: str(f.field_type) for f in table.metadata.schema.fields}
    assert types == {"id": "long", "name": "string"}
    assert table.metadata.schema.identifier_field_names == ("id",)


def test_inference_without_records_or_key_is_an_error(tmp_path):
    cfg = _config(tmp_path, infer_schema=True, identifier_fields=["id"])
    catalog, io = _open(cfg)
    with pytest.raises(ConfigError, match="table.infer_schema"):
        ensure_table(catalog, io, cfg.table, None)
    with pytest.raises(SchemaError, match=r"table.identifier_fields\[0\]: 'id'"):
        ensure_table(catalog, io, cfg.table, _sample([{"name": "no id here"}]))


def test_dead_letter_table_is_created_once(tmp_path):
    cfg = _config(tmp_path, columns=COLUMNS)
    catalog, io = _open(cfg)
    first = ensure_dead_letter_table(catalog, io, "db.t_dead")
    second = ensure_dead_letter_table(catalog, io, "db.t_dead")
    assert first.metadata.table_uuid == second.metadata.table_uuid
    names = [f.name for f in second.metadata.schema.fields]
    assert names == [f.name for f in DEAD_LETTER_TABLE_SCHEMA.fields]
