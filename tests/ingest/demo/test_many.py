"""``calving demo --tables N`` end to end, and the source database it replicates: events
as Debezium's JSON converter writes them, transactions with their markers, the shop
workload's cross-table rules and a checker that catches their breach."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import pytest

from calving.ingest.demo.database import (
    Column,
    ShopWorkload,
    SourceDatabase,
    consistency_problems,
    plain_table,
    shop_tables,
)
from calving.ingest.demo.many import ManyDemoOptions, report_many, run_many_demo


def _db() -> tuple[SourceDatabase, ShopWorkload]:
    db = SourceDatabase(prefix="srv")
    for t in shop_tables():
        db.add_table(t)
    return db, ShopWorkload(db, seed=1)


def test_events_carry_schema_key_source_and_transaction() -> None:
    db, work = _db()
    work.new_customer()
    work.new_order()
    records = db.take_records()
    order = json.loads(records["srv.shop.orders"][0][2])
    assert order["schema"]["name"] == "srv.shop.orders.Envelope"
    payload = order["payload"]
    assert payload["op"] == "c" and payload["source"]["table"] == "orders"
    assert payload["transaction"]["id"] == "2:1001"
    key = json.loads(records["srv.shop.orders"][0][1])
    assert key["payload"] == {"id": 1} and key["schema"]["fields"][0]["optional"] is False
    markers = [json.loads(r[2]) for r in records["srv.transaction"]]
    assert [m["status"] for m in markers] == ["BEGIN", "END", "BEGIN", "END"]
    end = markers[-1]
    counts = {c["data_collection"]: c["event_count"] for c in end["data_collections"]}
    lines = len(db.tables["order_lines"].rows)
    assert counts == {"shop.orders": 1, "shop.order_lines": lines, "shop.customers": 1}
    assert end["event_count"] == 2 + lines


def test_deletes_are_followed_by_a_tombstone_and_decimals_are_connect_bytes() -> None:
    db, work = _db()
    work.new_customer()
    work.new_order()
    db.take_records()
    work.cancel_order(1)
    records = db.take_records()["srv.shop.orders"]
    assert json.loads(records[0][2])["payload"]["op"] == "d" and records[1][2] is None
    assert Column("total", "decimal").encode(Decimal("-1.50")) == "/2o="  # -150, two bytes


def test_an_initial_snapshot_is_read_events_without_transactions(tmp_path) -> None:
    """Debezium's initial snapshot: op r per row, before null, no transaction block nor
    markers, ``source.snapshot`` first / last (and per table); the stream follows, and
    the source state (what a replica must hold) covers both."""
    for avro in (False, True):
        db = SourceDatabase(prefix="srv", schema_dir=tmp_path / "avro" if avro else None)
        for name in ("a", "b"):
            db.add_table(plain_table(name))
        work = ShopWorkload(db, seed=1, plain=("a", "b"))
        rows = {n: [work.plain_row(n, k) for k in range(1, 4)] for n in ("a", "b")}
        assert db.snapshot(rows) == 6
        with pytest.raises(ValueError, match="already has rows"):
            db.snapshot({"a": rows["a"]})
        txn = db.begin()
        txn.upsert("a", {**rows["a"][0], "code": "changed"})
        txn.delete("b", (2,))
        db.commit(txn)
        records = db.take_records()
        events = [_value(db, r[2]) for t in ("srv.inventory.a", "srv.inventory.b")
                  for r in records[t] if r[2] is not None]  # fmt: skip
        snap = [e for e in events if e["op"] == "r"]
        assert [e["source"]["snapshot"] for e in snap] == [
            "first", "true", "last_in_data_collection",
            "first_in_data_collection", "true", "last",
        ]  # fmt: skip
        assert all(e["before"] is None and e["transaction"] is None for e in snap)
        assert [e["source"]["snapshot"] for e in events if e["op"] != "r"] == ["false", "false"]
        markers = records["srv.transaction"]
        assert len(markers) == 2  # BEGIN and END of the one streamed transaction only
        assert db.expected("a")[0][1] == "changed"
        assert [r[0] for r in db.expected("b")] == [1, 3]


def _value(db: SourceDatabase, raw: bytes) -> dict:
    if db.schema_dir is None:
        return json.loads(raw)["payload"]
    import fastavro

    schema = json.loads((db.schema_dir / f"{int.from_bytes(raw[1:5], 'big')}.avsc").read_text())
    return fastavro.schemaless_reader(io.BytesIO(raw[5:]), fastavro.parse_schema(schema))


def test_the_checker_catches_broken_cross_table_rules() -> None:
    db, work = _db()
    for _ in work.steps(60):
        pass
    rows = {n: [dict(r) for r in db.tables[n].rows.values()] for n in db.tables}
    assert consistency_problems(rows["customers"], rows["orders"], rows["order_lines"]) == []
    rows["order_lines"][0]["qty"] += 1
    problems = consistency_problems(rows["customers"], rows["orders"], rows["order_lines"][1:])
    problems += consistency_problems(rows["customers"][1:], rows["orders"], rows["order_lines"])
    assert problems


def test_schema_changes_change_the_events_schema() -> None:
    db, work = _db()
    db.add_column("customers", Column("email", "string"))
    db.change_type("order_lines", "qty", "int64")
    work.new_customer()
    value = json.loads(db.take_records()["srv.shop.customers"][0][2])
    after = next(f for f in value["schema"]["fields"] if f["field"] == "after")
    assert [f["field"] for f in after["fields"]][-1] == "email"


@pytest.mark.integration
def test_demo_tables_end_to_end(spark, tmp_path) -> None:
    opts = ManyDemoOptions(
        tmp_path,
        tables=4,
        transactions=400,
        chunk=50,
        pace=0.4,
        trigger_interval="300 milliseconds",
    )
    out = io.StringIO()
    result = run_many_demo(opts, out)
    report_many(result, out)
    shown = out.getvalue()
    assert result.ok, shown
    assert result.commits_checked >= 2 and len(result.tables) == 4
    assert "consistency after each of" in shown and "PASS" in shown
