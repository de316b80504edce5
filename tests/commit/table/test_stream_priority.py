"""The stream has priority over maintenance at the commit layer: a swap a writer loses
to a maintenance commit (a compaction's ``replace`` snapshot, a manifest rewrite, a
properties change) is rebased and retried without counting against
``commit.retry.num-retries``; a loss to a writer that adds data still counts; a
maintenance (yielding) commit counts every loss. The competitor commits for real,
through a second catalog handle, inside the stream's swap (``swap_hook``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pyroaring import BitMap64

from calving.commit.catalog import SqlCatalog
from calving.commit.errors import RetriesExhaustedError
from calving.commit.maintenance import compaction
from calving.commit.maintenance.compaction_plan import CompactionPolicy
from calving.commit.spec.partition import UNPARTITIONED
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.rewrite_manifests import RewriteManifests
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.committer import Committed, Conflicted, commit_action
from calving.commit.table.table import Table
from calving.commit.table.yielding import adds_data, lost_only_to_yielding
from calving.ingest.write.rewrite import local_rewrite
from tests.support.oracles import ALL_READERS
from tests.support.tables import COLUMNS, make_table, row, rows_as_tuples, write_partitioned

pytestmark = pytest.mark.integration

NO_RETRIES = {
    "commit.retry.num-retries": "0",
    "commit.retry.min-wait-ms": "1",
    "commit.retry.max-wait-ms": "2",
}


def _other_handle(catalog: SqlCatalog, table: Table) -> Table:
    """The same table through a second catalog object (another process, in effect)."""
    return Table.load(SqlCatalog(catalog.name, catalog.uri, catalog.warehouse), table.ident)


def _race(catalog: SqlCatalog, competitors: list[Callable[[], Any]]) -> None:
    """Before each of the stream's next swaps, the next competitor commits first."""
    pending = list(competitors)

    def hook(stage: str, ident: tuple[str, ...]) -> None:
        if stage == "before" and pending:
            pending.pop(0)()

    catalog.swap_hook = hook


def _small_files(table: Table, n: int) -> list[tuple[Any, list[dict[str, Any]]]]:
    out = []
    for k in range(n):
        out += write_partitioned(table, [row(i) for i in range(k * 10, k * 10 + 10)])
    table.commit_or_raise(FastAppend(tuple(f for f, _ in out)))
    return out


def test_losses_to_maintenance_do_not_count_against_the_streams_retries(sqlite_catalog):
    """num-retries = 0, and the stream's row delta loses its swap three times: to a real
    compaction of the very files it deletes from (the deletes follow the position map),
    to a manifest rewrite and to a properties change. It commits; a build that counted
    these losses fails with RetriesExhaustedError on the first."""
    table = make_table(sqlite_catalog, "prio", spec=UNPARTITIONED, properties=NO_RETRIES)
    files = _small_files(table, 6)
    maint = _other_handle(sqlite_catalog, table)
    maint.yielding = True
    policy = CompactionPolicy(min_input_files=2)
    rewrite = local_rewrite(maint.io, policy.target_file_bytes)
    compacted: list[compaction.CompactionReport] = []
    _race(
        sqlite_catalog,
        [
            lambda: compacted.append(compaction.compact(maint.refresh(), policy, rewrite)),
            lambda: maint.refresh().commit_or_raise(RewriteManifests()),
            lambda: maint.refresh().commit_or_raise(UpdateProperties(set={"x.maint": "1"})),
        ],
    )
    (f0, r0), (f3, r3) = files[0], files[3]
    deletes = {f0.file_path: BitMap64([1, 2]), f3.file_path: BitMap64([9])}
    new = write_partitioned(table, [row(1000)])
    outcome = commit_action(
        sqlite_catalog,
        table.ident,
        RowDelta(added_data_files=(new[0][0],), deletes=deletes),
        io=table.io,
    )

    assert isinstance(outcome, Committed), outcome
    assert outcome.attempts == 4 and outcome.losses_yielded == 3
    assert compacted and compacted[0].groups_committed == 1
    ops = [s.summary["operation"] for s in reversed(outcome.metadata.ancestors())]
    assert ops == ["append", "replace", "replace", "overwrite"]  # properties: no snapshot
    table.refresh()
    gone = [r0[1], r0[2], r3[9]]
    expected = [r for _, rows in files for r in rows if r not in gone] + [row(1000)]
    for name, reader in ALL_READERS.items():
        assert reader(table.metadata_location, COLUMNS) == rows_as_tuples(expected), name


def test_a_loss_to_a_writer_that_adds_data_still_counts(sqlite_catalog):
    table = make_table(sqlite_catalog, "counted", spec=UNPARTITIONED, properties=NO_RETRIES)
    _small_files(table, 1)
    other = _other_handle(sqlite_catalog, table)
    _race(
        sqlite_catalog,
        [lambda: other.refresh().commit_or_raise(FastAppend(_append_files(other, 500)))],
    )
    outcome = commit_action(
        sqlite_catalog, table.ident, FastAppend(_append_files(table, 600)), io=table.io
    )
    assert isinstance(outcome, Conflicted), outcome
    assert isinstance(outcome.error, RetriesExhaustedError)
    assert "1 times to writers that add data" in str(outcome.error)
    assert "commit.retry.num-retries=0" in str(outcome.error)


def test_free_and_counted_losses_mix_within_the_limit(sqlite_catalog):
    """num-retries = 1: two losses to maintenance and one to an appender commit; a
    second appender loss would not."""
    table = make_table(
        sqlite_catalog,
        "mixed",
        spec=UNPARTITIONED,
        properties={**NO_RETRIES, "commit.retry.num-retries": "1"},
    )
    _small_files(table, 1)
    other = _other_handle(sqlite_catalog, table)
    _race(
        sqlite_catalog,
        [
            lambda: other.refresh().commit_or_raise(UpdateProperties(set={"x": "1"})),
            lambda: other.refresh().commit_or_raise(FastAppend(_append_files(other, 700))),
            lambda: other.refresh().commit_or_raise(UpdateProperties(set={"y": "2"})),
        ],
    )
    outcome = commit_action(
        sqlite_catalog, table.ident, FastAppend(_append_files(table, 800)), io=table.io
    )
    assert isinstance(outcome, Committed), outcome
    assert outcome.attempts == 4 and outcome.losses_yielded == 2


def test_a_yielding_commit_counts_every_loss(sqlite_catalog):
    """Maintenance is the side that yields: its own commit that loses to another
    maintenance commit counts the loss (num-retries = 0: it gives up)."""
    table = make_table(sqlite_catalog, "yields", spec=UNPARTITIONED, properties=NO_RETRIES)
    _small_files(table, 1)
    other = _other_handle(sqlite_catalog, table)
    _race(
        sqlite_catalog, [lambda: other.refresh().commit_or_raise(UpdateProperties(set={"w": "1"}))]
    )
    outcome = commit_action(
        sqlite_catalog, table.ident, UpdateProperties(set={"z": "3"}), io=table.io, yielding=True
    )
    assert isinstance(outcome, Conflicted) and isinstance(outcome.error, RetriesExhaustedError)


def test_the_total_timeout_bounds_free_retries(sqlite_catalog):
    table = make_table(
        sqlite_catalog,
        "bounded",
        spec=UNPARTITIONED,
        properties={**NO_RETRIES, "commit.retry.total-timeout-ms": "0"},
    )
    _small_files(table, 1)
    other = _other_handle(sqlite_catalog, table)
    _race(
        sqlite_catalog,
        [
            lambda n=n: other.refresh().commit_or_raise(UpdateProperties(set={"n": str(n)}))
            for n in range(3)
        ],
    )
    outcome = commit_action(
        sqlite_catalog, table.ident, FastAppend(_append_files(table, 900)), io=table.io
    )
    assert isinstance(outcome, Conflicted) and isinstance(outcome.error, RetriesExhaustedError)
    assert "1 times to maintenance" in str(outcome.error)


def test_which_commits_are_yielding(sqlite_catalog):
    table = make_table(sqlite_catalog, "kinds", spec=UNPARTITIONED)
    _small_files(table, 2)
    table.commit_or_raise(FastAppend(_append_files(table, 40)))  # a second manifest
    before = table.metadata
    table.commit_or_raise(RewriteManifests())
    assert table.metadata.current_snapshot.summary["operation"] == "replace"
    assert not adds_data(table.metadata.current_snapshot)
    assert lost_only_to_yielding(before, table.metadata)
    table.commit_or_raise(UpdateProperties(set={"p": "1"}))
    assert lost_only_to_yielding(before, table.metadata)
    table.commit_or_raise(FastAppend(_append_files(table, 50)))
    assert adds_data(table.metadata.current_snapshot)
    assert not lost_only_to_yielding(before, table.metadata)


def _append_files(table: Table, first: int) -> tuple[Any, ...]:
    return tuple(f for f, _ in write_partitioned(table, [row(first), row(first + 1)]))
