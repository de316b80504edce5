"""The many-table sink's stages without Spark (issue 24, part 3): the plan stage packs a
batch's ranges into tasks and plans each table from its current metadata; the commit
stage swaps every table of a batch in one catalog transaction; and whole batches run
through route, plan, write, evolve and commit with the tasks in this process
(``InProcessRunner``), reading the embedded broker, each table read back by pyiceberg
and DuckDB."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from calving.commit.catalog.sql import SqlCatalog
from calving.commit.spec.schema import Schema
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.ledger import LedgerClaim, read_ledger
from calving.commit.table.ledger import OffsetRange as LedgerRange
from calving.commit.table.multi_commit import TableCommit
from calving.commit.table.table import Table, create_table
from calving.ingest.config.format import FormatConfig
from calving.ingest.demo.database import (
    SHOP_TABLES,
    Column,
    ShopWorkload,
    SourceDatabase,
    plain_table,
    shop_tables,
)
from calving.ingest.kafka.offsets import OffsetRange
from calving.ingest.pipeline import build_many_sink
from calving.ingest.sink.coordinator import Coordinator, ParsedMessages
from calving.ingest.sink.many.commit import BATCH_COMMIT, BATCH_TABLES, BatchCommit, swap_in
from calving.ingest.sink.many.plan import (
    SMALL_BATCH_RECORDS_PER_CORE,
    Planner,
    pack,
    task_groups,
)
from calving.ingest.sink.many.route import RoutedTable
from calving.ingest.sink.many.runner import InProcessRunner, RangeRow
from calving.ingest.sink.many.sink import ManyTablesSink
from calving.ingest.sink.messages import DataFileWritten, RangeSeen
from tests.ingest.conftest import unique_name
from tests.support.database import create_topics, many_config, produce_pending
from tests.support.oracles import duckdb_rows, pyiceberg_rows
from tests.support.tables import EVENTS, events_spec, row, write_partitioned

WRITER = "w"
#: EVENTS without a primary key: appends only.
APPENDS = dataclasses.replace(EVENTS, identifier_field_ids=())


def _spans(*rows: RangeRow) -> dict[str, list[OffsetRange]]:
    out: dict[str, list[OffsetRange]] = {}
    for topic, partition, start, end in rows:
        out.setdefault(topic, []).append(OffsetRange(topic, partition, start, end))
    return out


def _routed(catalog: SqlCatalog, name: str, schema: Schema = APPENDS) -> RoutedTable:
    table = create_table(catalog, ("db", name), schema, spec=events_spec(schema))
    return RoutedTable(table, Coordinator(table, WRITER))


# ---------------------------------------------------------------- plan


def test_the_plan_packs_ranges_into_two_tasks_per_core_keeping_a_spread_table_whole():
    k = SMALL_BATCH_RECORDS_PER_CORE  # 250 k records: two tasks per core up to 4 cores
    spans = _spans(
        ("a", 0, 0, 100 * k), ("b", 0, 0, 10 * k), ("c", 0, 0, 60 * k), ("c", 1, 0, 50 * k),
        ("d", 0, 0, 30 * k),
    )  # fmt: skip
    table_of = {"a": "db.a", "b": "db.b", "c": "db.c", "d": "db.d"}
    every = sorted(
        r for rs in spans.values() for r in ((x.topic, x.partition, x.start, x.end) for x in rs)
    )

    alone = task_groups(spans, table_of, parallelism=4)
    assert sorted(alone) == sorted([r] for r in every), "8 slots: a task per range"

    packed = task_groups(spans, table_of, parallelism=1, together={"db.c"})
    assert len(packed) == 2
    assert sorted(r for g in packed for r in g) == every
    assert any(("c", 0, 0, 60 * k) in g and ("c", 1, 0, 50 * k) in g for g in packed)
    assert sorted(sum(r[3] - r[2] for r in g) for g in packed) == [120 * k, 130 * k]
    assert pack([[("a", 0, 0, 1)]], 0) == [[("a", 0, 0, 1)]]


def test_a_small_batch_gets_one_task_per_core():
    k = SMALL_BATCH_RECORDS_PER_CORE
    table_of = {f"t{i}": f"db.t{i}" for i in range(50)}
    one_each = _spans(*((f"t{i}", 0, 7, 8) for i in range(50)))
    small = task_groups(one_each, table_of, parallelism=2)
    assert len(small) == 2, "50 records on 2 cores: one task per core"
    assert sorted(len(g) for g in small) == [25, 25]

    big = _spans(
        *((f"t{i}", 0, 0, k // 10) for i in range(50))
    )  # 5 k records (k: the threshold) over 2 cores
    assert len(task_groups(big, table_of, parallelism=2)) == 4, "two tasks per core"
    just_under = _spans(("t0", 0, 0, 2 * k - 3), ("t1", 0, 0, 1), ("t2", 0, 0, 1))
    assert len(task_groups(just_under, table_of, parallelism=2)) == 2
    at = _spans(("t0", 0, 0, 2 * k - 2), ("t1", 0, 0, 1), ("t2", 0, 0, 1))
    assert len(task_groups(at, table_of, parallelism=2)) == 3, "a task per range again"


def test_a_table_plan_follows_the_table_and_topics_of_one_table_share_it(sqlite_catalog):
    routed = _routed(sqlite_catalog, "a", EVENTS)  # a Debezium table has a primary key
    other = _routed(sqlite_catalog, "b", EVENTS)
    routed.settled = {"schema-1": routed.table.metadata.schema.schema_id, "old": -1}
    planner = Planner(WRITER, FormatConfig(type="debezium-json"))
    tables = {"t1": routed, "t2": routed, "t3": other}

    plans = planner.plans(7, tables, frozenset(), judge=False)
    assert plans["t1"] is plans["t2"] and plans["t3"] is not plans["t1"]
    first = plans["t1"]
    assert (first.table, first.keyed, first.stopped) == ("db.a", True, None)
    assert first.plan.file_prefix == f"{WRITER}-b7-db_a"
    assert first.plan.metadata_location == routed.table.metadata_location
    assert first.settled == frozenset({"schema-1"}), "only schemas checked against this schema"
    assert planner.plans(7, tables, frozenset())["t1"].settled is None, "judged: no deferral"

    # The table moves on (another writer's commit): the next plan has its metadata and
    # ledger; the decoder is kept (same schema).
    files = tuple(f for f, _ in write_partitioned(routed.table, [row(1)]))
    claim = LedgerClaim(WRITER, {("t1", 0): LedgerRange(0, 5)})
    Table.load(sqlite_catalog, routed.table.ident).commit_or_raise(FastAppend(files, ledger=claim))
    decoder = first.plan.decoder
    again = planner.plans(8, tables, frozenset())["t1"]
    assert again.plan.metadata_location == routed.table.refresh().metadata_location
    assert again.plan.metadata_location != first.plan.metadata_location
    assert again.plan.ledger == {("t1", 0): 5}
    assert again.plan.decoder is decoder


# ---------------------------------------------------------------- commit


def _parsed(files: Any, topic: str, start: int, end: int) -> ParsedMessages:
    return ParsedMessages.of(
        [DataFileWritten(f) for f in files] + [RangeSeen(topic, 0, start, end)]
    )


def _commit(catalog: SqlCatalog, tables: dict[str, RoutedTable], parsed: dict[str, ParsedMessages], swaps: list[list[TableCommit]] | None = None) -> Any:  # fmt: skip
    def swap(commits: list[TableCommit]) -> Any:
        if swaps is not None:
            swaps.append(commits)
        return swap_in(catalog, catalog.io, commits)

    return BatchCommit(tables, swap, WRITER).commit(3, parsed)


def test_the_commit_swaps_every_table_of_a_batch_in_one_catalog_transaction(sqlite_catalog):
    tables = {f"db.{n}": _routed(sqlite_catalog, n) for n in ("a", "b")}
    rows = {
        "db.a": [row(i) for i in range(3)],
        "db.b": [row(i, region="us") for i in range(10, 14)],
    }
    parsed = {}
    for name, routed in tables.items():
        files = tuple(f for f, _ in write_partitioned(routed.table, rows[name]))
        parsed[name] = _parsed(files, f"topic-{name}", 0, len(rows[name]))
    swaps: list[list[TableCommit]] = []

    stats = _commit(sqlite_catalog, tables, parsed, swaps)

    assert stats.atomic and stats.committed == ["db.a", "db.b"] and stats.records == 7
    assert [len(s) for s in swaps] == [2], "one swap holding both tables"
    tokens = set()
    for name, routed in tables.items():
        table = Table.load(sqlite_catalog, routed.table.ident, sqlite_catalog.io)
        want = sorted((r["id"], r["region"]) for r in rows[name])
        assert pyiceberg_rows(table.metadata_location, ("id", "region")) == want
        assert duckdb_rows(table.metadata_location, ("id", "region")) == want
        assert read_ledger(table.metadata, WRITER) == {(f"topic-{name}", 0): len(rows[name])}
        snapshot = table.metadata.current_snapshot
        assert snapshot is not None and snapshot.summary[BATCH_TABLES] == "db.a,db.b"
        tokens.add(snapshot.summary[BATCH_COMMIT])
    assert len(tokens) == 1, "both snapshots carry the batch's one token"

    # The same ranges again (a replay): nothing new in either table.
    before = {n: r.table.refresh().metadata.current_snapshot_id for n, r in tables.items()}
    again = {}
    for name, routed in tables.items():
        files = tuple(f for f, _ in write_partitioned(routed.table, rows[name]))
        again[name] = _parsed(files, f"topic-{name}", 0, len(rows[name]))
    replay = _commit(sqlite_catalog, tables, again)
    assert replay.committed == []
    assert {n: r.table.refresh().metadata.current_snapshot_id for n, r in tables.items()} == before


# ---------------------------------------------------------------- whole batches


def _database() -> tuple[SourceDatabase, ShopWorkload]:
    db = SourceDatabase(prefix=unique_name("db"))
    for t in shop_tables(partitions=2):
        db.add_table(t)
    db.add_table(plain_table("t03"))
    return db, ShopWorkload(db, seed=11, plain=("t03",))


def _rows_after(
    db: SourceDatabase, ends: dict[str, dict[int, int]], before: dict[str, dict[int, int]]
) -> list[RangeRow]:
    """The ranges of ``db``'s tables' topics from ``before``'s end offsets to ``ends``
    (what the source plans for the pipeline's topic pattern)."""
    out = []
    for topic, partitions in ends.items():
        if topic == db.transaction_topic:
            continue
        for partition, end in partitions.items():
            start = before.get(topic, {}).get(partition, 0)
            if end > start:
                out.append((topic, partition, start, end))
    return out


def _full(db: SourceDatabase, name: str) -> str:
    return f"shop.{name}" if name in SHOP_TABLES else f"inventory.{name}"


def _assert_replicated(sink: ManyTablesSink, db: SourceDatabase) -> None:
    for name in db.tables:
        table = sink.tables[_full(db, name)].table.refresh()
        columns = db.tables[name].column_names
        for reader in (pyiceberg_rows, duckdb_rows):
            rows = reader(table.metadata_location, columns)
            assert rows == db.expected(name), f"{name} read by {reader.__name__}"


def test_batches_run_through_every_stage_with_the_tasks_in_process(broker, tmp_path: Path):
    db, work = _database()
    create_topics(broker, db)
    for _ in work.steps(120):
        pass
    first = produce_pending(broker.bootstrap_servers, db)
    config = many_config(
        db, broker.bootstrap_servers, f"sqlite:///{tmp_path}/c.db", tmp_path / "wh"
    )
    sink = build_many_sink(config)
    runner = InProcessRunner(parallelism=1)

    rows = _rows_after(db, first, {})
    stats = sink.run_batch(runner, rows, 0)

    assert sorted(sink.tables) == sorted(_full(db, n) for n in db.tables)
    assert stats.atomic and stats.committed == sorted(sink.tables)
    assert stats.read == sum(r[3] - r[2] for r in rows) == stats.records
    groups = runner.runs[0]
    assert len(groups) == 1, "a small batch's 7 ranges packed into one task for one core"
    assert sorted(r for g in groups for r in g) == sorted(rows)
    _assert_replicated(sink, db)

    # The source adds a column: the customers table evolves and the batch is written
    # again with it.
    db.add_column("customers", Column("email", "string"))
    for _ in work.steps(80):
        pass
    second = produce_pending(broker.bootstrap_servers, db)
    stats = sink.run_batch(runner, _rows_after(db, second, first), 1)
    customers = sink.tables["shop.customers"].table.refresh()
    assert customers.metadata.schema.find_field_by_name("email") is not None
    assert "shop.customers" in stats.committed and not stats.stopped
    _assert_replicated(sink, db)

    # Every range again from the start (a lost checkpoint): the ledgers skip it all.
    before = {n: r.table.refresh().metadata.current_snapshot_id for n, r in sink.tables.items()}
    replay = sink.run_batch(InProcessRunner(parallelism=2), _rows_after(db, second, {}), 2)
    assert replay.committed == []
    assert {
        n: r.table.refresh().metadata.current_snapshot_id for n, r in sink.tables.items()
    } == before
    _assert_replicated(sink, db)


def test_a_key_two_tasks_wrote_is_written_again_in_one_task(broker, tmp_path: Path):
    db, work = _database()
    create_topics(broker, db)
    for _ in work.steps(120):
        pass
    ends = produce_pending(broker.bootstrap_servers, db)
    half = {t: {p: e // 2 for p, e in ps.items()} for t, ps in ends.items()}
    config = many_config(
        db, broker.bootstrap_servers, f"sqlite:///{tmp_path}/c.db", tmp_path / "wh"
    )
    sink = build_many_sink(config)
    runner = InProcessRunner(parallelism=16)  # 16 tasks: each of the 14 half-ranges its own

    stats = sink.run_batch(runner, _rows_after(db, half, {}) + _rows_after(db, ends, half), 0)

    first, *again = runner.runs
    assert all(len(g) == 1 for g in first), "every range its own task"
    assert again, "keys updated in both halves of a partition: written again"
    orders = {r for r in _rows_after(db, ends, {}) if r[0] == db.topic("orders")}
    assert any({(t, p) for t, p, _, _ in g} == {(t, p) for t, p, _, _ in orders} for run in again for g in run), "the orders ranges together in one task"  # fmt: skip
    assert stats.committed == sorted(sink.tables)
    _assert_replicated(sink, db)
