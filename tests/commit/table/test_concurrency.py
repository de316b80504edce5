"""Many OS processes committing to one table: a linear history, nothing lost, nothing
duplicated; and concurrent deletion vectors on one data file merge."""

from __future__ import annotations

import itertools
import multiprocessing as mp
from collections import Counter

import pytest
from pyroaring import BitMap64

from calving.commit.catalog import SqlCatalog
from calving.commit.io import FileIO
from calving.commit.spec.data_file import EntryStatus
from calving.commit.table import scan
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.committer import Committed, commit_action
from calving.commit.table.table import Table
from tests.support.tables import make_table, row, write_partitioned

pytestmark = pytest.mark.integration

WRITERS, COMMITS = 8, 25
RETRY = {
    "commit.retry.num-retries": "200",
    "commit.retry.min-wait-ms": "5",
    "commit.retry.max-wait-ms": "200",
}


def _writer(uri: str, warehouse: str, catalog_name: str, writer: int, out: mp.Queue) -> None:
    catalog = SqlCatalog(catalog_name, uri, warehouse)
    table = Table.load(catalog, ("db", "events"))
    ids = []
    for i in range(COMMITS):
        rows = [row(writer * 1000 + i, region="eu")]
        files = write_partitioned(table, rows)
        outcome = table.commit(FastAppend(tuple(f for f, _ in files)))
        assert isinstance(outcome, Committed), outcome
        ids.append(outcome.snapshot_id)
    out.put(ids)


def _run_writers(catalog: SqlCatalog) -> list[int]:
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    procs = [
        ctx.Process(target=_writer, args=(catalog.uri, catalog.warehouse, catalog.name, w, out))
        for w in range(WRITERS)
    ]
    for p in procs:
        p.start()
    acked = [sid for _ in procs for sid in out.get(timeout=600)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return acked


def _check_history(table: Table, acked: list[int]) -> None:
    table.refresh()
    m = table.metadata
    chain = m.ancestors()
    assert len(chain) == WRITERS * COMMITS == len(m.snapshots)
    assert sorted(s.snapshot_id for s in chain) == sorted(acked)  # every ack landed once
    seqs = [s.sequence_number for s in reversed(chain)]
    assert seqs == list(range(1, WRITERS * COMMITS + 1))  # contiguous, linear
    for child, parent in itertools.pairwise(chain):
        assert child.parent_snapshot_id == parent.snapshot_id
    refs = Counter()
    for mf in scan.manifest_files(table.io, m.current_snapshot):
        for e in scan.manifest_entries(table.io, m, mf):
            if e.status != EntryStatus.DELETED:
                refs[e.data_file.file_path] += 1
    assert len(refs) == WRITERS * COMMITS and set(refs.values()) == {1}
    assert m.current_snapshot.summary["total-records"] == str(WRITERS * COMMITS)
    assert m.next_row_id >= WRITERS * COMMITS


@pytest.mark.slow
def test_eight_processes_sqlite(sqlite_catalog):
    make_table(sqlite_catalog, properties=RETRY)
    _check_history(Table.load(sqlite_catalog, ("db", "events")), _run_writers(sqlite_catalog))


@pytest.mark.slow
@pytest.mark.postgres
def test_eight_processes_postgres(pg_catalog):
    make_table(pg_catalog, properties=RETRY)
    _check_history(Table.load(pg_catalog, ("db", "events")), _run_writers(pg_catalog))


def test_concurrent_dvs_on_one_file_merge(sqlite_catalog):
    table = make_table(sqlite_catalog)
    rows = [row(i, region="eu") for i in range(10)]
    files = write_partitioned(table, rows)
    table.commit(FastAppend(tuple(f for f, _ in files)))
    df = max((f for f, _ in files), key=lambda f: f.record_count)
    assert df.record_count >= 3
    io = FileIO()
    base = (table.metadata_location, table.metadata)  # both writers start from this base
    a = commit_action(
        sqlite_catalog,
        table.ident,
        RowDelta(deletes={df.file_path: BitMap64([0, 1])}),
        io=io,
        base=base,
    )
    b = commit_action(
        sqlite_catalog,
        table.ident,
        RowDelta(deletes={df.file_path: BitMap64([2])}),
        io=io,
        base=base,
    )
    assert isinstance(a, Committed) and isinstance(b, Committed)
    assert b.attempts == 2  # lost the swap once, re-read the DV, merged
    table.refresh()
    live = table.live_files()
    assert len(live.dvs) == 1
    assert set(live.positions_deleted(io, df.file_path)) == {0, 1, 2}
