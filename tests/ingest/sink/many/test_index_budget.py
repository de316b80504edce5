"""The driver's memory for primary-key indexes across tables (issue 22 part 3): past
``[sink] index_memory_bytes`` the least recently used indexes are saved and dropped,
and a table's next batch opens its index again. Against a real broker, with a budget
so small that every index is dropped after every batch, updates and deletes still land
exactly: the readers equal the source."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from calving.commit.index.store import INDEX_LOCATION_PROPERTY
from calving.commit.spec.properties import INDEX_EXECUTOR_REBUILD_ROWS
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.ingest.demo.database import ShopWorkload, SourceDatabase, shop_tables
from calving.ingest.pipeline import build_many_sink
from calving.ingest.sink.index_rebuild import executor_rebuilds
from calving.ingest.sink.many.index_budget import IndexBudget
from calving.ingest.sink.many.runner import InProcessRunner
from tests.ingest.conftest import unique_name
from tests.support.database import create_topics, many_config, produce_pending
from tests.support.oracles import duckdb_rows, pyiceberg_rows


class FakeCoordinator:
    def __init__(self, nbytes: int) -> None:
        self.index: Any = SimpleNamespace(nbytes=nbytes)
        self.evicted = 0

    def evict_index(self) -> int:
        held, self.index = self.index.nbytes, None
        self.evicted += 1
        return held


def _tables(**sizes: int) -> dict[str, Any]:
    return {n: SimpleNamespace(coordinator=FakeCoordinator(b)) for n, b in sizes.items()}


def test_the_least_recently_used_go_first_and_the_batch_just_committed_last() -> None:
    tables = _tables(a=100, b=100, c=100, d=100)
    budget = IndexBudget(limit_bytes=250)
    budget.after_batch(tables, ["a", "b"], 1)  # c and d never used: 400 held
    assert [n for n, t in tables.items() if t.coordinator.index is None] == ["c", "d"]
    tables["c"].coordinator.index = SimpleNamespace(nbytes=100)  # c's batch reopens it
    assert budget.after_batch(tables, ["c"], 2) == ["a"]
    assert budget.after_batch(tables, ["b"], 3) == []  # 200 held: within
    huge = _tables(x=1000)
    assert IndexBudget(10).after_batch(huge, ["x"], 1) == ["x"]  # even the batch's own


def _rows(ends: dict[str, dict[int, int]], before: dict[str, dict[int, int]], skip: str) -> list:
    return [
        (t, p, before.get(t, {}).get(p, 0), e)
        for t, ps in ends.items()
        if t != skip
        for p, e in ps.items()
        if e > before.get(t, {}).get(p, 0)
    ]


def _shop(broker: Any, tmp_path: Path, seed: int) -> tuple[SourceDatabase, ShopWorkload, Any]:
    """The shop database's topics on the broker, its workload, and a many-table config
    writing it to a SQLite catalog under ``tmp_path``."""
    db = SourceDatabase(prefix=unique_name("db"))
    for t in shop_tables(partitions=2):
        db.add_table(t)
    create_topics(broker, db)
    config = many_config(
        db, broker.bootstrap_servers, f"sqlite:///{tmp_path}/c.db", tmp_path / "wh"
    )
    return db, ShopWorkload(db, seed=seed), config


@pytest.mark.integration
def test_updates_land_exactly_when_every_index_is_dropped_after_every_batch(
    broker, tmp_path: Path
) -> None:
    db, work, config = _shop(broker, tmp_path, seed=21)
    config = dataclasses.replace(
        config, sink=dataclasses.replace(config.sink, index_memory_bytes=2**20)
    )
    sink = build_many_sink(config)
    sink.index_budget.limit_bytes = 1  # below any index: all dropped after each batch
    before: dict[str, dict[int, int]] = {}
    for batch in range(4):
        for _ in work.steps(60):
            pass
        ends = produce_pending(broker.bootstrap_servers, db)
        stats = sink.run_batch(InProcessRunner(), _rows(ends, before, db.transaction_topic), batch)
        before = ends
        assert stats.committed, batch
        assert all(r.coordinator.index is None for r in sink.tables.values())
    assert sink.index_budget.evictions >= 4 * len(db.tables) - 3
    deleted = 0
    for name, routed in sink.tables.items():
        table = routed.table.refresh()
        deleted += int(table.metadata.current_snapshot.summary.get("total-position-deletes", 0))
        short = name.split(".")[1]
        columns = db.tables[short].column_names
        for reader in (pyiceberg_rows, duckdb_rows):
            assert reader(table.metadata_location, columns) == db.expected(short), (name, reader)
    assert deleted > 0, "the workload updated and deleted rows through reopened indexes"


@pytest.mark.integration
def test_a_reopened_index_that_is_lost_is_rebuilt_by_spark_tasks(
    broker: Any, spark: Any, tmp_path: Path
) -> None:
    """Many tables on a real Spark: every index is dropped after each batch, then the
    files they were saved to are deleted; with ``calving.index.executor-rebuild-rows``
    at 0 the next batches rebuild them with Spark jobs, and the readers equal the
    source."""
    db, work, config = _shop(broker, tmp_path, seed=23)
    sink = build_many_sink(config)
    sink.index_budget.limit_bytes = 1  # every index dropped (saved) after each batch
    before: dict[str, dict[int, int]] = {}
    rebuilt_before = executor_rebuilds()
    for batch in range(3):
        for _ in work.steps(60):
            pass
        ends = produce_pending(broker.bootstrap_servers, db)
        stats = sink.write_batch(spark, _rows(ends, before, db.transaction_topic), batch)
        before = ends
        assert stats.committed, batch
        for routed in sink.tables.values():  # lose every saved index
            table = routed.table.refresh()
            table.commit_or_raise(UpdateProperties({INDEX_EXECUTOR_REBUILD_ROWS.name: "0"}))
            table.io.delete(table.metadata.properties[INDEX_LOCATION_PROPERTY])
    assert executor_rebuilds() - rebuilt_before >= len(db.tables)
    for name, routed in sink.tables.items():
        table = routed.table.refresh()
        short = name.split(".")[1]
        columns = db.tables[short].column_names
        for reader in (pyiceberg_rows, duckdb_rows):
            assert reader(table.metadata_location, columns) == db.expected(short), (name, reader)
