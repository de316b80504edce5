"""Per-table metrics of a many-table pipeline (issue 22 part 5): a shop database's
change events through a real broker and the many-table sink (tasks in process), the
``/metrics`` endpoint scraped over loopback and read by a strict parser. Each table
has its own series (commits, records, lag against its own topic's partitions, index
keys); a table the batch did not touch gets no new figures; each batch logs a JSON
line per table."""

from __future__ import annotations

import dataclasses
import json
import logging
import urllib.request
from pathlib import Path

import pytest

from calving.ingest.config.metrics import MetricsConfig
from calving.ingest.demo.database import ShopWorkload, SourceDatabase, plain_table, shop_tables
from calving.ingest.pipeline import build_many_sink
from calving.ingest.sink.many.runner import InProcessRunner
from tests.ingest.conftest import unique_name
from tests.ingest.metrics.promtext import Family, parse
from tests.support.database import create_topics, many_config, produce_pending

pytestmark = pytest.mark.integration


def _scrape(port: int) -> dict[str, Family]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return parse(reply.read().decode())


def _rows(ends: dict[str, dict[int, int]], before: dict[str, dict[int, int]], skip: str):
    return [
        (topic, p, before.get(topic, {}).get(p, 0), end)
        for topic, parts in ends.items()
        if topic != skip
        for p, end in parts.items()
        if end > before.get(topic, {}).get(p, 0)
    ]


def test_each_table_has_its_own_series(broker, tmp_path: Path, caplog) -> None:
    db = SourceDatabase(prefix=unique_name("db"))
    for t in shop_tables(partitions=2):
        db.add_table(t)
    db.add_table(plain_table("t03"))
    work = ShopWorkload(db, seed=5, plain=("t03",))
    create_topics(broker, db)
    for _ in work.steps(90):
        pass
    ends = produce_pending(broker.bootstrap_servers, db)
    config = many_config(
        db, broker.bootstrap_servers, f"sqlite:///{tmp_path}/c.db", tmp_path / "wh"
    )
    config = dataclasses.replace(config, metrics=MetricsConfig(enabled=True, port=0))
    sink = build_many_sink(config)
    assert sink.metrics is not None
    port = sink.metrics.server.port  # type: ignore[attr-defined]  # ManyMetrics behind the protocol
    try:
        with caplog.at_level(logging.INFO, logger="calving.metrics"):
            stats = sink.run_batch(InProcessRunner(), _rows(ends, {}, db.transaction_topic), 0)
        families = _scrape(port)
        lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "calving.metrics"]
        caplog.clear()
        # A batch that only brings records to one table: the others are idle.
        for _ in work.steps(40):
            pass
        later = produce_pending(broker.bootstrap_servers, db)
        t03 = next(t for t in later if t.endswith(".inventory.t03"))
        with caplog.at_level(logging.INFO, logger="calving.metrics"):
            sink.run_batch(InProcessRunner(), _rows({t03: later[t03]}, ends, ""), 1)
        after = _scrape(port)
        idle_lines = [json.loads(r.getMessage()) for r in caplog.records
                      if r.name == "calving.metrics"]  # fmt: skip
    finally:
        sink.metrics.close()

    assert [line["table"] for line in idle_lines] == ["inventory.t03"]
    assert after["calving_commits_total"].value(table="inventory.t03") == 2
    assert after["calving_commits_total"].value(table="shop.orders") == 1
    assert after["calving_kafka_lag_records"].value(table="inventory.t03", topic=t03) == 0

    assert sorted(stats.committed) == sorted(sink.tables)
    assert sorted(line["table"] for line in lines) == sorted(sink.tables)
    commits, records = families["calving_commits_total"], families["calving_records_total"]
    lag, keys = families["calving_kafka_lag_records"], families["calving_index_keys"]
    for name, routed in sink.tables.items():
        table = routed.table.refresh()
        assert commits.value(table=name, writer_id=config.sink.writer_id) == 1
        assert records.value(table=name) == stats.tables[name].records > 0
        topics = [t for t, r in sink.routes.items() if getattr(r, "name", None) == name]
        lagged = {ls for (n, ls) in lag.samples if ("table", name) in ls}
        assert {dict(ls)["topic"] for ls in lagged} == set(topics), name
        assert all(lag.value(table=name, topic=dict(ls)["topic"], partition=dict(ls)["partition"]) == 0
                   for ls in lagged)  # fmt: skip
        if name.startswith("shop."):  # keyed: one key per live row
            assert table.metadata.schema.identifier_field_ids
            live = int(table.metadata.current_snapshot.summary["total-records"]) - int(
                table.metadata.current_snapshot.summary.get("total-position-deletes", 0)
            )
            assert keys.value(table=name) == live
    line = next(x for x in lines if x["table"] == "shop.orders")
    assert line["outcome"] == "committed" and line["lag_records"] == 0
    assert line["freshness_oldest_seconds"] is not None
