"""Whole-database CDC with each table picking its index mode: two tables pinned to
sharded mode (``calving.index.mode``), the rest in the driver; the sharded tables' shard
steps run as Spark jobs of the many-table batch, across a restart, and every table reads
back exactly with the three readers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from calving.commit.index.sharded import names_shards
from calving.ingest.demo.database import SHOP_TABLES, ShopWorkload, SourceDatabase, shop_tables
from calving.ingest.pipeline import build_pipeline
from calving.ingest.sink.many.sink import ManyTablesSink
from tests.ingest.conftest import unique_name
from tests.support.database import create_topics, many_config, produce_pending, read_back

pytestmark = pytest.mark.integration

SHARDED = ("shop.customers", "shop.orders")


def test_each_table_picks_its_index_mode(spark: Any, broker: Any, tmp_path: Path) -> None:
    db = SourceDatabase(prefix=unique_name("db"))
    for t in shop_tables(partitions=2):
        db.add_table(t)
    work = ShopWorkload(db, seed=9, plain=())
    create_topics(broker, db)
    for _ in work.steps(200):
        pass
    produce_pending(broker.bootstrap_servers, db)
    config = many_config(
        db,
        broker.bootstrap_servers,
        f"sqlite:///{tmp_path / 'catalog.db'}",
        tmp_path / "wh",
        tables={
            name: {
                "properties": {
                    "calving.index.mode": "sharded",
                    "calving.index.shards": "4",
                    "calving.index.driver-step-keys": "0",  # steps on the executors
                }
            }
            for name in SHARDED
        },
        dead_letter_table=None,
    )
    build_pipeline(config, spark).run(available_now=True, timeout=300)
    for _ in work.steps(200):  # a restart: the sharded tables resume from their manifests
        pass
    produce_pending(broker.bootstrap_servers, db)
    pipeline = build_pipeline(config, spark)
    pipeline.run(available_now=True, timeout=300)
    sink = pipeline.sink
    assert isinstance(sink, ManyTablesSink)
    for name in SHOP_TABLES:
        routed = sink.tables[f"shop.{name}"]
        table = routed.table
        table.refresh()
        sharded = f"shop.{name}" in SHARDED
        assert (routed.coordinator.sharded is not None) == sharded, name
        assert names_shards(table.metadata) == sharded, name
        for reader, rows in read_back(
            table.metadata_location, db.tables[name].column_names
        ).items():
            assert rows == db.expected(name), f"{name} read by {reader}"
    customers = sink.tables["shop.customers"].coordinator.sharded
    assert customers is not None and customers.rebuilds == 0
