"""Whole-database CDC end to end: a source database's Debezium topics (JSON with schemas
in the events, or Confluent Avro with writer schemas) -> one pipeline, many tables, created on first sight, evolved with their
source, each read back exactly by pyiceberg, DuckDB and pyiceberg-core."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from calving.commit.table.table import Table
from calving.ingest.demo.database import (
    SHOP_TABLES,
    Column,
    ShopWorkload,
    SourceDatabase,
    consistency_problems,
    plain_table,
    shop_tables,
)
from calving.ingest.pipeline import build_pipeline
from calving.ingest.sink.many.sink import ManyTablesSink
from tests.ingest.conftest import unique_name
from tests.support.database import (
    create_topics,
    many_config,
    produce_pending,
    read_back,
)
from tests.support.lineage import identity_changes, lineage
from tests.support.oracles import duckdb_rows

pytestmark = pytest.mark.integration

PLAIN = tuple(f"t{i:02d}" for i in range(3, 10))


def _database(fmt: str, schema_dir: Path) -> tuple[SourceDatabase, ShopWorkload]:
    db = SourceDatabase(prefix=unique_name("db"), schema_dir=schema_dir if fmt == "avro" else None)
    for t in shop_tables(partitions=2):
        db.add_table(t)
    for name in PLAIN:
        db.add_table(plain_table(name, amount="int32" if name == "t03" else "int64"))
    return db, ShopWorkload(db, seed=5, plain=PLAIN)


def _rows(table: Table) -> list[dict]:
    import pyarrow as pa
    from pyiceberg.table import StaticTable

    data: pa.Table = StaticTable.from_metadata(table.metadata_location).scan().to_arrow()
    return data.to_pylist()


@pytest.mark.slow  # 30-50 s: a Spark streaming query per case
@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_a_database_replicates_into_tables_created_and_evolved_on_the_fly(
    fmt, spark, broker, sqlite_catalog, tmp_path
):
    db, work = _database(fmt, tmp_path / "schemas")
    create_topics(broker, db)
    for _ in work.steps(150):
        pass
    db.add_column("customers", Column("email", "string"))  # added column
    db.change_type("t03", "amount", "int64")  # widened type
    for _ in work.steps(150):
        pass
    txn = db.begin()
    txn.upsert("t03", {"id": 998, "code": "big", "amount": 2**41, "active": False})
    db.commit(txn)
    produce_pending(broker.bootstrap_servers, db)

    catalog_uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    config = many_config(
        db,
        broker.bootstrap_servers,
        catalog_uri,
        tmp_path / "wh",
        tables={"inventory.t09": {"exclude": True}},
    )
    build_pipeline(config, spark).run(available_now=True, timeout=300)

    # Phase 2 (a restart): a table appears, t05 changes incompatibly, the rest go on.
    before_incompatible = db.expected("t05")
    db.add_table(plain_table("t10"))
    create_topics(broker, db, ["t10"])
    db.change_type("t05", "code", "int32")
    work.plain = (*PLAIN, "t10")
    for _ in work.steps(200):
        pass
    for k in (1, 2, 3):
        txn = db.begin()
        txn.upsert("t05", {"id": 100 + k, "code": k, "amount": 1, "active": True})
        db.commit(txn)
    t05_records = len(db.pending.get(db.topic("t05"), []))
    produce_pending(broker.bootstrap_servers, db)
    pipeline = build_pipeline(config, spark)
    pipeline.run(available_now=True, timeout=300)

    sink = pipeline.sink
    assert isinstance(sink, ManyTablesSink)
    written = [t for t in db.tables if t != "t09"]
    assert sorted(sink.tables) == sorted(
        f"shop.{t}" if t in SHOP_TABLES else f"inventory.{t}" for t in written
    )
    assert not sqlite_catalog.table_exists(("inventory", "t09"))
    for name in written:
        table = sink.tables[f"shop.{name}" if name in SHOP_TABLES else f"inventory.{name}"].table
        table.refresh()
        columns = db.tables[name].column_names
        expected = before_incompatible if name == "t05" else db.expected(name)
        if name == "t05":
            columns = ("id", "amount", "active")
            expected = [(r[0], r[2], r[3]) for r in before_incompatible]
        for reader, rows in read_back(table.metadata_location, columns).items():
            assert rows == expected, f"{name} read by {reader}"
    # Row lineage on the many-table path: DuckDB's _row_id is the spec's (the reference
    # reader), and rows the workload updated kept their _row_id.
    kept = 0
    for name in SHOP_TABLES:
        location = sink.tables[f"shop.{name}"].table.metadata_location
        want = lineage(location, "id")
        shown = duckdb_rows(location, ("id", "_row_id", "_last_updated_sequence_number"))
        assert {k: (r, s) for k, r, s in shown} == want, name
        kept += identity_changes(location, "id")[0]
    assert kept > 0
    customers = sink.tables["shop.customers"].table
    assert customers.metadata.schema.find_field_by_name("email") is not None
    t03 = sink.tables["inventory.t03"].table.metadata.schema.find_field_by_name("amount")
    assert t03 is not None and str(t03.field_type) == "long"
    assert (998, "big", 2**41, False) in db.expected("t03")
    assert len(sink.history) + 1 >= 3, "several micro-batches"
    assert any(s.atomic and len(s.committed) > 1 for s in sink.history)
    assert "shop.customers" not in sink.history[-1].stopped
    assert "inventory.t05" in sink.tables and sink.tables["inventory.t05"].stopped
    assert "'code'" in (sink.tables["inventory.t05"].stopped or "")
    dead = sink.dead_letter_table
    assert dead is not None
    dead.refresh()
    dead_rows = _rows(dead)
    assert len(dead_rows) == t05_records
    assert {r["topic"] for r in dead_rows} == {db.topic("t05")}
    shop = {t: _rows(sink.tables[f"shop.{t}"].table) for t in SHOP_TABLES}
    assert consistency_problems(shop["customers"], shop["orders"], shop["order_lines"]) == []

    # A lost checkpoint and another max_offsets_per_trigger: everything is read again
    # from the ledgers and nothing changes in any table.
    before = {
        name: r.table.refresh().metadata.current_snapshot_id for name, r in sink.tables.items()
    }
    shutil.rmtree(tmp_path / "wh" / "checkpoint")
    again = replace(config, source=replace(config.source, max_offsets_per_trigger=97))
    replay = build_pipeline(again, spark)
    replay.run(available_now=True, timeout=300)
    assert isinstance(replay.sink, ManyTablesSink)
    after = {n: r.table.refresh().metadata.current_snapshot_id for n, r in sink.tables.items()}
    assert after == before
