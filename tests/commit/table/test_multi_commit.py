"""Multi-table commits (``commit_tables``): every table's snapshot made current in one
SQL transaction, or none; a table that moved is rebuilt alone; lost replies resolved by
reading every table back; a filesystem catalog refuses."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from calving.commit import faults
from calving.commit.errors import (
    CalvingError,
    CommitStateUnknownError,
    UnsupportedFeatureError,
)
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.ledger import LedgerClaim, OffsetRange
from calving.commit.table.multi_commit import TableCommit, commit_tables
from calving.commit.table.outcomes import Committed, Conflicted, Skipped
from calving.commit.table.table import Table
from tests.support.oracles import pyiceberg_rows
from tests.support.tables import COLUMNS, make_table, row, rows_as_tuples, write_partitioned

pytestmark = pytest.mark.integration

NAMES = ("orders", "lines", "customers")


def _tables(catalog) -> list[Table]:
    return [make_table(catalog, name) for name in NAMES]


def _appends(tables: list[Table], first: int, **kw) -> list[TableCommit]:
    """One FastAppend per table: rows ``first .. first + 2`` (a different id per table)."""
    out = []
    for n, table in enumerate(tables):
        rows = [row(first * 10 + n * 1000 + i) for i in range(3)]
        files = tuple(f for f, _ in write_partitioned(table, rows))
        out.append(TableCommit(table.ident, FastAppend(files, **kw)))
    return out


def _snapshots(tables: list[Table]) -> list[int]:
    return [len(t.refresh().metadata.snapshots) for t in tables]


def _metadata_files(tables: list[Table]) -> list[list[str]]:
    """Every file in each table's metadata directory: what a try stages."""
    return [t.io.list_prefix(t.metadata.location + "/metadata/") for t in tables]


class _Broken(CalvingError):
    """Not a commit outcome (and not known clean): raised to the caller."""


class _Wrapped:
    """An action whose ``plan`` runs ``before(ident)`` first, then the real one's."""

    def __init__(self, commit: TableCommit, before: Any) -> None:
        self.action, self.ident, self.before = commit.action, commit.ident, before

    def plan(self, base: Any, io: Any, commit_id: str) -> Any:
        self.before(self.ident)
        return self.action.plan(base, io, commit_id)


def _wrap(commits: list[TableCommit], before: Any) -> list[TableCommit]:
    return [TableCommit(c.ident, _Wrapped(c, before)) for c in commits]


@pytest.fixture(params=["sqlite", "postgres"])
def catalog(request):
    return request.getfixturevalue("sqlite_catalog" if request.param == "sqlite" else "pg_catalog")


def test_all_tables_advance_in_one_transaction(catalog):
    tables = _tables(catalog)
    outcomes = commit_tables(catalog, catalog.io, _appends(tables, 1))
    assert all(isinstance(o, Committed) for o in outcomes.values())
    assert _snapshots(tables) == [1, 1, 1]
    for n, table in enumerate(tables):
        expected = rows_as_tuples([row(10 + n * 1000 + i) for i in range(3)])
        assert pyiceberg_rows(table.metadata_location, COLUMNS) == expected


def test_a_table_that_moved_is_rebuilt_alone_and_all_land_once(catalog):
    tables = _tables(catalog)
    commits = _appends(tables, 1)
    moved = {"done": False}

    def hook(stage, ident):  # another writer commits to "lines" just before our swap
        if stage == "before" and ident[-1] == "lines" and not moved["done"]:
            moved["done"] = True
            catalog.swap_hook = None
            other = Table.load(catalog, ident)
            files = tuple(f for f, _ in write_partitioned(other, [row(777)]))
            assert isinstance(other.commit(FastAppend(files)), Committed)
            catalog.swap_hook = hook

    catalog.swap_hook = hook
    outcomes = commit_tables(catalog, catalog.io, commits)
    catalog.swap_hook = None
    assert moved["done"]
    assert all(isinstance(o, Committed) for o in outcomes.values())
    attempts = {ident[-1]: o.attempts for ident, o in outcomes.items()}
    assert attempts == {"orders": 1, "lines": 2, "customers": 1}
    assert _snapshots(tables) == [1, 2, 1]  # ours once each, plus the other writer's
    lines = pyiceberg_rows(tables[1].metadata_location, COLUMNS)
    assert lines == rows_as_tuples([row(777)] + [row(10 + 1000 + i) for i in range(3)])


def test_the_swaps_run_as_one_executemany_and_a_moved_table_is_still_named(catalog):
    """The tables' check-and-puts go to the database as one ``executemany``; when one of
    them matches no row, the one-by-one run finds and names it (the test above: it is
    rebuilt alone)."""
    import sqlalchemy as sa

    updates: list[bool] = []

    def seen(conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.lstrip().upper().startswith("UPDATE"):
            updates.append(executemany)

    engine = catalog.engine
    sa.event.listen(engine, "before_cursor_execute", seen)
    tables = _tables(catalog)
    try:
        outcomes = commit_tables(catalog, catalog.io, _appends(tables, 1))
        assert all(isinstance(o, Committed) for o in outcomes.values())
        assert updates == [True]
        updates.clear()

        def hook(stage, ident):  # another writer moves "customers" just before our swap
            if stage == "before" and ident[-1] == "customers":
                catalog.swap_hook = None
                other = Table.load(catalog, ident)
                files = tuple(f for f, _ in write_partitioned(other, [row(555)]))
                assert isinstance(other.commit(FastAppend(files)), Committed)
                updates.clear()

        catalog.swap_hook = hook
        outcomes = commit_tables(catalog, catalog.io, _appends(tables, 2))
    finally:
        catalog.swap_hook = None
        sa.event.remove(engine, "before_cursor_execute", seen)
    assert all(isinstance(o, Committed) for o in outcomes.values())
    assert {ident[-1]: o.attempts for ident, o in outcomes.items()}["customers"] == 2
    assert _snapshots(tables) == [2, 2, 3]
    # the executemany (a row missing), one by one up to "customers" (rolled back), then
    # all three again, "customers" rebuilt on the other writer's snapshot
    assert updates == [True, False, False, False, True], updates


def test_a_table_that_cannot_apply_leaves_every_table_unchanged(catalog):
    tables = _tables(catalog)
    claim = LedgerClaim("w", {("t", 0): OffsetRange(0, 5)})
    first = commit_tables(catalog, catalog.io, _appends(tables, 1, ledger=claim))
    assert all(isinstance(o, Committed) for o in first.values())
    # Offsets [3, 8) of partition 0 straddle the ledger (5) for every table: stale.
    stale = LedgerClaim("w", {("t", 0): OffsetRange(3, 8)})
    commits = _appends(tables, 2, ledger=stale)
    before = [t.refresh().metadata_location for t in tables]
    files = _metadata_files(tables)
    outcomes = commit_tables(catalog, catalog.io, commits)
    assert all(isinstance(o, Conflicted) for o in outcomes.values())
    culprits = [i[-1] for i, o in outcomes.items() if "not committed:" not in str(o.error)]
    assert culprits == ["orders"]  # the first table in input order; the others name it
    assert [o.attempts for o in outcomes.values()] == [1, 0, 0]  # as one after another
    assert [t.refresh().metadata_location for t in tables] == before
    assert _metadata_files(tables) == files


def test_tables_are_built_at_once(catalog):
    """Each table's build waits until every table's has started: only builds that run
    at the same time get past it (one after another, the first would wait alone)."""
    tables = _tables(catalog)
    meeting = threading.Barrier(len(tables), timeout=10)
    commits = _wrap(_appends(tables, 1), lambda ident: meeting.wait())
    outcomes = commit_tables(catalog, catalog.io, commits)
    assert all(isinstance(o, Committed) for o in outcomes.values())
    assert _snapshots(tables) == [1, 1, 1]


def test_a_failing_build_leaves_nothing_committed_and_nothing_staged(catalog):
    """The first table (in input order) whose build fails decides, as if built one
    after another; the other tables' tries, written meanwhile, are cleaned up."""
    tables = _tables(catalog)
    commits = _appends(tables, 1)
    before = _metadata_files(tables)

    def fail(ident):
        if ident[-1] != "orders":  # orders builds and writes its files
            raise _Broken(f"cannot build {ident[-1]}")

    with pytest.raises(_Broken, match="cannot build lines"):
        commit_tables(catalog, catalog.io, _wrap(commits, fail))
    assert _snapshots(tables) == [0, 0, 0]
    assert _metadata_files(tables) == before
    outcomes = commit_tables(catalog, catalog.io, commits)  # the same files, again
    assert all(isinstance(o, Committed) for o in outcomes.values())


def test_a_replayed_table_is_skipped_and_the_others_commit(catalog):
    tables = _tables(catalog)
    claim = LedgerClaim("w", {("t", 0): OffsetRange(0, 5)})
    commit_tables(catalog, catalog.io, _appends(tables[:1], 1, ledger=claim))
    commits = _appends(tables, 2, ledger=claim)  # a replay for "orders" only
    outcomes = commit_tables(catalog, catalog.io, commits)
    kinds = {ident[-1]: type(o) for ident, o in outcomes.items()}
    assert kinds == {"orders": Skipped, "lines": Committed, "customers": Committed}
    assert _snapshots(tables) == [1, 1, 1]


@pytest.mark.parametrize("applied", [True, False])
def test_lost_reply_is_resolved_by_reading_every_table_back(catalog, applied):
    tables = _tables(catalog)
    lost = {"done": False}

    def hook(stage, ident):
        if stage == ("after" if applied else "before") and not lost["done"]:
            lost["done"] = True
            raise CommitStateUnknownError("injected: the transaction's reply was lost")

    catalog.swap_hook = hook
    outcomes = commit_tables(catalog, catalog.io, _appends(tables, 1))
    catalog.swap_hook = None
    assert all(isinstance(o, Committed) for o in outcomes.values())
    assert all(o.found_on_refresh == applied for o in outcomes.values())
    assert _snapshots(tables) == [1, 1, 1]  # never twice


@pytest.mark.parametrize("point", ["after-metadata-file", "before-swap", "after-swap"])
def test_a_crash_point_leaves_all_tables_or_none(catalog, point):
    tables = _tables(catalog)
    faults.arm(point, "once-raise")
    try:
        with pytest.raises(faults.InjectedFault):
            commit_tables(catalog, catalog.io, _appends(tables, 1))
    finally:
        faults.disarm_all()
    advanced = _snapshots(tables)
    assert advanced == ([1, 1, 1] if point == "after-swap" else [0, 0, 0])


def test_filesystem_catalog_refuses(fs_catalog):
    tables = _tables(fs_catalog)
    with pytest.raises(UnsupportedFeatureError, match="one transaction"):
        commit_tables(fs_catalog, fs_catalog.io, _appends(tables, 1))
    assert _snapshots(tables) == [0, 0, 0]


def test_refresh_tables_reads_the_catalog_once_and_reloads_only_tables_that_moved(
    catalog, monkeypatch
):
    """``refresh_tables``: one metadata-location read for all tables; a table another
    writer moved gets its new metadata, the others keep theirs; a dropped one raises."""
    from calving.commit.errors import NoSuchTableError
    from calving.commit.table.table import refresh_tables

    tables = _tables(catalog)
    elsewhere = Table.load(catalog, tables[1].ident)  # another writer's view
    elsewhere.commit_or_raise(_appends([elsewhere], 1)[0].action)
    before = [(t.metadata_location, t.metadata) for t in tables]
    reads: list[int] = []
    real = type(catalog).load_metadata_locations
    monkeypatch.setattr(
        type(catalog),
        "load_metadata_locations",
        lambda self, idents: reads.append(len(idents)) or real(self, idents),
    )
    refresh_tables(tables)
    assert reads == [3]
    assert tables[1].metadata_location == elsewhere.metadata_location
    assert len(tables[1].metadata.snapshots) == 1
    for i in (0, 2):
        assert tables[i].metadata is before[i][1]  # not read again
    catalog.drop_table(tables[2].ident)
    with pytest.raises(NoSuchTableError):
        refresh_tables(tables)
