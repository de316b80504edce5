"""Commit outcomes under injected faults, conflicts, and exactly-once replays."""

from __future__ import annotations

import pytest
from pyroaring import BitMap64

from calving.commit.errors import CommitStateUnknownError, SchemaError, TableIdentityChangedError
from calving.commit.spec.types import LONG, STRING
from calving.commit.table.actions.expire_snapshots import ExpireSnapshots
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.rewrite_files import RewriteFiles
from calving.commit.table.actions.row_delta import DeletesOnRewrittenFilesError, RowDelta
from calving.commit.table.actions.update_schema import AddColumn, UpdateSchema
from calving.commit.table.committer import Committed, Conflicted, Skipped, commit_action
from calving.commit.table.ledger import LedgerClaim, OffsetRange
from calving.commit.table.table import Table
from tests.support.oracles import pyiceberg_rows
from tests.support.tables import COLUMNS, make_table, row, rows_as_tuples, write_partitioned

pytestmark = pytest.mark.integration


def _files(table, rows):
    return tuple(f for f, _ in write_partitioned(table, rows))


def _all_files(table) -> set[str]:
    import os

    root = table.metadata.location[len("file://") :]
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}


def test_swap_succeeded_reply_lost_is_committed_once(sqlite_catalog):
    table = make_table(sqlite_catalog)
    files = _files(table, [row(1)])

    def hook(stage, ident):
        if stage == "after":
            raise CommitStateUnknownError("injected: reply lost after the swap")

    sqlite_catalog.swap_hook = hook
    before = _all_files(table)
    outcome = table.commit(FastAppend(files))
    sqlite_catalog.swap_hook = None
    assert isinstance(outcome, Committed) and outcome.found_on_refresh
    table.refresh()
    assert len(table.metadata.snapshots) == 1  # no duplicate snapshot
    assert before <= _all_files(table)  # nothing deleted
    assert pyiceberg_rows(table.metadata_location, COLUMNS) == rows_as_tuples([row(1)])


def test_swap_failed_reply_lost_commits_exactly_once(sqlite_catalog):
    table = make_table(sqlite_catalog)
    files = _files(table, [row(1), row(2)])
    calls = []

    def hook(stage, ident):
        calls.append(stage)
        if stage == "before" and calls.count("before") == 1:
            raise CommitStateUnknownError("injected: connection lost, swap not applied")

    sqlite_catalog.swap_hook = hook
    outcome = table.commit(FastAppend(files))
    sqlite_catalog.swap_hook = None
    assert isinstance(outcome, Committed) and outcome.attempts == 2
    table.refresh()
    assert len(table.metadata.snapshots) == 1
    assert table.metadata.current_snapshot.summary["added-records"] == "2"


def test_unknown_outcome_with_unreadable_catalog_stays_unknown(sqlite_catalog, monkeypatch):
    from calving.commit.errors import CatalogUnavailableError
    from calving.commit.table.committer import Unknown

    table = make_table(sqlite_catalog)
    files = _files(table, [row(1)])
    sqlite_catalog.swap_hook = lambda stage, ident: (
        (_ for _ in ()).throw(CommitStateUnknownError("lost")) if stage == "after" else None
    )

    def unavailable(ident):
        raise CatalogUnavailableError("down")

    original = sqlite_catalog.load_metadata_location
    calls = {"n": 0}

    def flaky(ident):
        calls["n"] += 1
        if calls["n"] > 1:  # the first load starts the commit; later ones fail
            return unavailable(ident)
        return original(ident)

    monkeypatch.setattr(sqlite_catalog, "load_metadata_location", flaky)
    before = _all_files(table)
    outcome = commit_action(
        sqlite_catalog, table.ident, FastAppend(files), io=table.io, sleep=lambda s: None
    )
    assert isinstance(outcome, Unknown)
    assert before <= _all_files(table)  # never clean up after an unknown outcome


def test_replayed_offsets_commit_nothing_and_ledger_survives_expiry(sqlite_catalog):
    table = make_table(sqlite_catalog)
    claims = [
        LedgerClaim("w1", {("orders", 0): OffsetRange(i * 10, i * 10 + 10)}) for i in range(3)
    ]
    for i, claim in enumerate(claims):
        out = table.commit(FastAppend(_files(table, [row(i)]), ledger=claim))
        assert isinstance(out, Committed)
    assert table.ledger("w1") == {("orders", 0): 30}
    snapshots = len(table.metadata.snapshots)

    replay = table.commit(FastAppend(_files(table, [row(99)]), ledger=claims[1]))
    assert isinstance(replay, Skipped)
    table.refresh()
    assert len(table.metadata.snapshots) == snapshots

    gap = table.commit(
        FastAppend(
            _files(table, [row(98)]), ledger=LedgerClaim("w1", {("orders", 0): OffsetRange(40, 50)})
        )
    )
    assert isinstance(gap, Conflicted)
    overlap = table.commit(
        FastAppend(
            _files(table, [row(97)]), ledger=LedgerClaim("w1", {("orders", 0): OffsetRange(25, 35)})
        )
    )
    assert isinstance(overlap, Conflicted)

    expired = table.commit(ExpireSnapshots(retain_last=1))
    assert isinstance(expired, Committed)
    table.refresh()
    assert len(table.metadata.snapshots) == 1
    assert table.ledger("w1") == {("orders", 0): 30}
    again = table.commit(FastAppend(_files(table, [row(96)]), ledger=claims[0]))
    assert isinstance(again, Skipped)
    assert pyiceberg_rows(table.metadata_location, COLUMNS) == rows_as_tuples(
        [row(0), row(1), row(2)]
    )


def test_deletes_on_a_concurrently_rewritten_file_are_handed_back(sqlite_catalog):
    import pyarrow as pa

    from calving.ingest.write.parquet_writer import write_data_file

    table = make_table(sqlite_catalog)
    written = write_partitioned(table, [row(i) for i in range(6)])
    table.commit(FastAppend(tuple(f for f, _ in written)))
    base = (table.metadata_location, table.metadata)
    old, members = max(written, key=lambda fr: fr[0].record_count)
    new_location = old.file_path.replace(".parquet", "-compacted.parquet")
    new = write_data_file(
        table.io,
        new_location,
        pa.Table.from_pylist(members),
        table.metadata.schema,
        partition=old.partition,
    )
    assert isinstance(table.commit(RewriteFiles((old.file_path,), (new,))), Committed)

    stale = RowDelta(deletes={old.file_path: BitMap64([0])})
    out = commit_action(sqlite_catalog, table.ident, stale, io=table.io, base=base)
    assert isinstance(out, Conflicted)
    assert isinstance(out.error, DeletesOnRewrittenFilesError)
    assert set(out.error.deletes[old.file_path]) == {0}

    # With a rebase hook the caller re-resolves to the new file's positions.
    rebased = RowDelta(
        deletes={old.file_path: BitMap64([0])},
        rebase=lambda meta, gone: {new.file_path: BitMap64([0])},
    )
    out = commit_action(sqlite_catalog, table.ident, rebased, io=table.io, base=base)
    assert isinstance(out, Committed)
    table.refresh()
    expected = [r for r in (row(i) for i in range(6)) if r["id"] != members[0]["id"]]
    assert pyiceberg_rows(table.metadata_location, COLUMNS) == rows_as_tuples(expected)


def test_table_recreated_under_the_writer_is_terminal(sqlite_catalog):
    table = make_table(sqlite_catalog)
    files = _files(table, [row(1)])
    sqlite_catalog.drop_table(table.ident)
    make_table(sqlite_catalog)
    out = table.commit(FastAppend(files))
    assert isinstance(out, Conflicted) and isinstance(out.error, TableIdentityChangedError)


def test_schema_evolution_add_and_promote(sqlite_catalog):
    table = make_table(sqlite_catalog)
    out = table.commit(UpdateSchema(add=(AddColumn("note", STRING),)))
    assert isinstance(out, Committed)
    assert table.metadata.schema.find_field_by_name("note").field_id == 5
    assert isinstance(table.commit(UpdateSchema(add=(AddColumn("note", STRING),))), Skipped)
    with pytest.raises(SchemaError, match="'payload'"):
        table.commit(UpdateSchema(promote=(("payload", LONG),)))
    reloaded = Table.load(sqlite_catalog, table.ident)
    assert reloaded.metadata.current_schema_id == 1


@pytest.mark.parametrize("catalog_kind", ["filesystem", "sqlite"])
def test_losing_the_race_for_the_same_version_name_is_not_taken_for_success(
    catalog_kind, fs_catalog, sqlite_catalog
):
    """The filesystem catalog names versions v<N+1>: a writer whose base is stale tries
    the exact location the winner created. That location in the log is not proof of
    landing; the loser must refresh, retry, and land its own snapshot."""
    catalog = fs_catalog if catalog_kind == "filesystem" else sqlite_catalog
    table = make_table(catalog)
    stale = (table.metadata_location, table.metadata)
    winner = Table.load(catalog, table.ident)
    assert isinstance(winner.commit(FastAppend(_files(winner, [row(1)]))), Committed)

    outcome = commit_action(
        catalog, table.ident, FastAppend(_files(table, [row(2)])), io=table.io, base=stale
    )
    assert isinstance(outcome, Committed)
    assert not outcome.found_on_refresh and outcome.attempts == 2
    table.refresh()
    assert table.metadata.current_snapshot_id == outcome.snapshot_id
    assert len(table.metadata.snapshots) == 2
    assert pyiceberg_rows(table.metadata_location, COLUMNS) == rows_as_tuples([row(1), row(2)])
