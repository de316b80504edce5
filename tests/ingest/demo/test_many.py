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
