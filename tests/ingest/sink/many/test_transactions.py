"""Source-transaction boundaries: with Debezium's transaction topic, every commit of a
many-table pipeline shows the source database right after one of its transactions, even
when the markers arrive before the events and micro-batches cut transactions apart.
Without the boundaries the same checker does see half transactions (it can fail)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from calving.ingest.demo.database import (
    SHOP_TABLES,
    ShopWorkload,
    SourceDatabase,
    consistency_problems,
    shop_tables,
)
from calving.ingest.kafka.producer import produce
from calving.ingest.pipeline import build_pipeline
from calving.ingest.sink.many.sink import ManyBatchStats, ManyTablesSink
from calving.ingest.sink.many.transactions import LAST_TRANSACTION
from tests.ingest.conftest import unique_name
from tests.support.database import create_topics, many_config
from tests.support.oracles import pyiceberg_rows

pytestmark = pytest.mark.integration

MAX_OFFSETS = 90


class Checker:
    """Reads the three shop tables after every commit: cross-table problems, and (with
    boundaries) whether they equal the source right after the batch's last transaction."""

    def __init__(self, db: SourceDatabase) -> None:
        self.db = db
        self.sink: ManyTablesSink | None = None
        self.problems: list[str] = []
        self.checked: list[str | None] = []
        self.held: list[int] = []
        #: Per batch: records read, and the bound they were read under.
        self.reads: list[tuple[int, int | None]] = []

    def __call__(self, stats: ManyBatchStats) -> None:
        assert self.sink is not None
        tracker = self.sink.transactions
        self.reads.append((stats.read, tracker.bound if tracker is not None else None))
        routed = {t: self.sink.tables.get(f"shop.{t}") for t in SHOP_TABLES}
        if any(r is None for r in routed.values()):
            return
        state = {}
        for t, r in routed.items():
            assert r is not None
            state[t] = pyiceberg_rows(r.table.refresh().metadata_location, self._columns(t))
        self.checked.append(stats.transaction)
        self.held.append(stats.held_back)
        if stats.transaction is not None:
            expected = self.db.history[stats.transaction]
            self.problems += [
                f"after {stats.transaction}: {t} differs from the source"
                for t in SHOP_TABLES
                if state[t] != expected[t]
            ]
        rows = {t: [dict(zip(self._columns(t), r)) for r in state[t]] for t in SHOP_TABLES}
        self.problems += consistency_problems(
            rows["customers"], rows["orders"], rows["order_lines"]
        )

    def _columns(self, table: str) -> tuple[str, ...]:
        return self.db.tables[table].column_names


def _replicate(
    spark: Any,
    broker: Any,
    tmp_path: Path,
    boundaries: bool,
    marker_topic: str | None = None,
    topic_prefix: str | None = None,
) -> tuple[Checker, Any]:
    """``marker_topic``: where the markers go (default ``<prefix>.transaction``)."""
    db = SourceDatabase(prefix=unique_name("tx"), keep_history=True)
    for table, n in zip(shop_tables(), (2, 3, 1)):
        table.partitions = n
        db.add_table(table)
    work = ShopWorkload(db, seed=13)
    create_topics(broker, db)
    markers = marker_topic.format(prefix=db.prefix) if marker_topic else db.transaction_topic
    broker.create_topic(markers, 1)
    for _ in work.steps(260):
        pass
    records = db.take_records()
    # The markers land first: a batch sees END markers before some of their events.
    produce(broker.bootstrap_servers, markers, records.pop(db.transaction_topic))
    for topic, recs in records.items():
        produce(broker.bootstrap_servers, topic, recs)
    config = many_config(
        db,
        broker.bootstrap_servers,
        f"sqlite:///{tmp_path / 'c.db'}",
        tmp_path / "wh",
        max_offsets=MAX_OFFSETS,
        transaction_topic=markers if boundaries else None,
        topic_prefix=topic_prefix,
    )
    checker = Checker(db)
    pipeline = build_pipeline(config, spark, on_batch=checker)
    assert isinstance(pipeline.sink, ManyTablesSink)
    checker.sink = pipeline.sink
    pipeline.run(available_now=True, timeout=300)
    return checker, pipeline.sink


@pytest.mark.slow  # 30-50 s: a Spark streaming query per case
@pytest.mark.parametrize(
    ("marker_topic", "topic_prefix"),
    [
        (None, None),
        # Another transaction topic name and a prefix no topic has: END markers' data
        # collections are mapped to topics by their events' source blocks alone (they
        # were mapped by stripping the transaction topic's last name part).
        ("{prefix}-tx.meta", "elsewhere"),
    ],
)
def test_every_commit_shows_the_source_after_a_whole_transaction(
    spark, broker, tmp_path, marker_topic, topic_prefix
):
    checker, sink = _replicate(
        spark, broker, tmp_path, True, marker_topic=marker_topic, topic_prefix=topic_prefix
    )
    db = checker.db
    assert checker.problems == []
    assert len(checker.checked) >= 5 and all(t is not None for t in checker.checked)
    assert any(checker.held), "no batch held events back: the test did not cut transactions"
    # max_offsets_per_trigger (90) bounds every batch, held-back ranges read again
    # included; only after a batch completed no transaction may the next read more.
    assert all(read <= (bound or MAX_OFFSETS) for read, bound in checker.reads), checker.reads
    above = [read for read, _ in checker.reads if read > MAX_OFFSETS]
    assert len(above) <= len(checker.reads) // 4, checker.reads
    last = list(db.history)[-1]
    assert checker.checked[-1] == last
    for t in SHOP_TABLES:
        table = sink.tables[f"shop.{t}"].table.refresh()
        assert pyiceberg_rows(table.metadata_location, db.tables[t].column_names) == db.expected(t)
    orders = sink.tables["shop.orders"].table
    assert last in [s.summary.get(LAST_TRANSACTION) for s in orders.metadata.snapshots]


def test_without_boundaries_the_checker_sees_half_transactions(spark, broker, tmp_path):
    checker, sink = _replicate(spark, broker, tmp_path, boundaries=False)
    assert checker.problems, "the checker must be able to see a half-committed transaction"
    db = checker.db
    for t in SHOP_TABLES:  # the final state is still exact
        table = sink.tables[f"shop.{t}"].table.refresh()
        assert pyiceberg_rows(table.metadata_location, db.tables[t].column_names) == db.expected(t)
