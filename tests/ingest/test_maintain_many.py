"""Inline maintenance across a many-table pipeline's tables (issue 22 part 5): one
budget per round, the tables that committed since their last pass (most commits
first), idle tables never visited, a table the budget did not reach kept for the next
round; against a real broker, the tables after maintenance read back equal to the
source by pyiceberg and DuckDB."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from calving.commit.maintenance.last_pass import read_last_pass
from calving.ingest.config.maintenance import MaintenanceConfig
from calving.ingest.demo.database import ShopWorkload, SourceDatabase, plain_table, shop_tables
from calving.ingest.maintain_many import ManyMaintainer
from calving.ingest.pipeline import build_many_sink, many_maintainer
from calving.ingest.sink.history import BatchHistory
from calving.ingest.sink.many.runner import InProcessRunner
from tests.ingest.conftest import unique_name
from tests.support.database import create_topics, many_config, produce_pending
from tests.support.oracles import duckdb_rows, pyiceberg_rows


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


#: The passes the fake maintainers ran: (table, due by file count rather than interval).
Jobs = list[tuple[str, bool]]


class FakeMaintainer:
    """Records its passes (budget, and whether due by file count in ``jobs``); each
    pass takes ``cost`` seconds of the fake clock."""

    def __init__(
        self,
        name: str,
        clock: FakeClock,
        calls: list[tuple[str, float]],
        cost: float,
        jobs: Jobs | None = None,
    ) -> None:
        self.name, self.clock, self.calls, self.cost = name, clock, calls, cost
        self.jobs = jobs if jobs is not None else []

    def inline_pass(self, budget_s: float, by_file_count: bool = False) -> Any:
        self.calls.append((self.name, budget_s))
        self.jobs.append((self.name, by_file_count))
        self.clock.now += self.cost
        return SimpleNamespace(ok=True)


def _fake(
    batches: list[list[str]],
    cost: float,
    budget: float,
    interval: float = 0.0,
    tables: dict[str, Any] | None = None,
):
    clock = FakeClock()
    history: BatchHistory[Any] = BatchHistory()
    for c in batches:
        history.append(SimpleNamespace(committed=c))
    sink: Any = SimpleNamespace(history=history, tables=tables or {}, io=None)
    config = MaintenanceConfig(inline=True, inline_interval_s=interval, inline_budget_s=budget)
    mm = ManyMaintainer(sink, config, clock=clock)
    calls: list[tuple[str, float]] = []
    mm._maintainer = lambda name: FakeMaintainer(name, clock, calls, cost)  # type: ignore[method-assign]  # passes without tables
    return mm, sink, clock, calls


def test_a_round_takes_the_busiest_tables_first_within_one_budget() -> None:
    mm, sink, _clock, calls = _fake([["a", "b", "c"], ["b", "c"], ["c"]], cost=4.0, budget=10.0)
    assert mm.order() == []  # nothing noted before a batch is seen
    passes = mm.after_batch()
    assert [n for n, _ in calls] == ["c", "b", "a"]
    assert [round(b, 1) for _, b in calls] == [10.0, 6.0, 2.0]
    assert sorted(passes) == ["a", "b", "c"] and mm.waiting == {}

    # A batch into one table; the idle ones are never visited.
    sink.history.append(SimpleNamespace(committed=["b"]))
    calls.clear()
    mm.after_batch()
    assert calls == [("b", 10.0)]


def test_a_table_the_budget_did_not_reach_waits_for_the_next_round() -> None:
    mm, _sink, clock, calls = _fake([["a", "b", "c"], ["a"]], cost=6.0, budget=10.0, interval=30)
    mm.after_batch()
    assert [n for n, _ in calls] == ["a", "b"]
    assert list(mm.waiting) == ["c"]
    calls.clear()
    clock.now += 5  # within the interval: no round
    assert mm.after_batch() == {} and calls == []
    clock.now += 30
    mm.after_batch()
    assert [n for n, _ in calls] == ["c"]


def test_between_rounds_a_table_due_by_file_count_gets_a_compaction_alone(monkeypatch) -> None:
    import calving.ingest.maintain_many as many

    due = {"b"}  # which tables' metadata show a partition of small files
    tables = {n: SimpleNamespace(table=SimpleNamespace(metadata=n)) for n in "abc"}
    monkeypatch.setattr(many, "compaction_due", lambda _config, _io, md: md in due)
    mm, sink, clock, calls = _fake([["a", "b"]], cost=1.0, budget=10.0, interval=30, tables=tables)
    jobs: Jobs = []
    mm._maintainer = lambda name: FakeMaintainer(name, clock, calls, 1.0, jobs)  # type: ignore[method-assign]  # passes without tables
    mm.after_batch()  # the first round: full passes of a and b
    assert sorted(n for n, _ in calls) == ["a", "b"] and mm.waiting == {}
    assert [j for _, j in jobs] == [False, False]

    jobs.clear()
    sink.history.append(SimpleNamespace(committed=["a", "b", "c"]))
    clock.now += 5  # within the interval: no round, but b is due by its files
    passes = mm.after_batch()
    assert list(passes) == ["b"] and jobs == [("b", True)]
    assert sorted(mm.waiting) == ["a", "b", "c"]  # the round's other jobs are still due

    jobs.clear()
    clock.now += 30  # the next round: full passes again
    mm.after_batch()
    assert sorted(n for n, _ in jobs) == ["a", "b", "c"] and {j for _, j in jobs} == {False}


@pytest.mark.integration
def test_inline_maintenance_is_built_only_when_configured(tmp_path: Path, broker) -> None:
    db = SourceDatabase(prefix=unique_name("db"))
    db.add_table(plain_table("t01"))
    config = many_config(
        db, broker.bootstrap_servers, f"sqlite:///{tmp_path}/c.db", tmp_path / "wh"
    )
    sink = build_many_sink(config)
    assert many_maintainer(config, sink, None) is None
    inline = dataclasses.replace(config, maintenance=MaintenanceConfig(inline=True))
    assert isinstance(many_maintainer(inline, sink, None), ManyMaintainer)


@pytest.mark.integration
def test_tables_compacted_beside_the_stream_read_back_equal(broker, tmp_path: Path) -> None:
    db = SourceDatabase(prefix=unique_name("db"))
    for t in shop_tables(partitions=2):
        db.add_table(t)
    db.add_table(plain_table("t03"))
    work = ShopWorkload(db, seed=3, plain=("t03",))
    create_topics(broker, db)
    config = many_config(
        db, broker.bootstrap_servers, f"sqlite:///{tmp_path}/c.db", tmp_path / "wh"
    )
    sink = build_many_sink(config)
    maintenance = MaintenanceConfig(
        inline=True, inline_interval_s=0, inline_budget_s=120, rewrite_on="local"
    )
    mm = ManyMaintainer(sink, maintenance)
    before: dict[str, dict[int, int]] = {}
    for batch in range(4):
        for _ in work.steps(40):
            pass
        ends = produce_pending(broker.bootstrap_servers, db)
        rows = [(t, p, before.get(t, {}).get(p, 0), e) for t, ps in ends.items()
                if t != db.transaction_topic for p, e in ps.items()
                if e > before.get(t, {}).get(p, 0)]  # fmt: skip
        sink.run_batch(InProcessRunner(), rows, batch)
        before = ends
        if batch == 2:
            files_before = {
                n: len(r.table.refresh().live_files().data) for n, r in sink.tables.items()
            }
            passes = mm.after_batch()
            assert sorted(passes) == sorted(sink.tables)
            assert all(r is not None and r.ok for r in passes.values())
            files_after = {
                n: len(r.table.refresh().live_files().data) for n, r in sink.tables.items()
            }
            assert any(files_after[n] < files_before[n] for n in files_before), (
                files_before,
                files_after,
            )
    for name, routed in sink.tables.items():
        table = routed.table.refresh()
        record = read_last_pass(table.io, table.metadata)
        assert record is not None and record["table"] == name
        short = name.split(".")[1]
        columns = db.tables[short].column_names
        for reader in (pyiceberg_rows, duckdb_rows):
            assert reader(table.metadata_location, columns) == db.expected(short), (name, reader)
    # The batch after the pass: its tables wait for the next round.
    assert sorted(mm.waiting) == [] and mm.after_batch().keys() == set(sink.tables)
