"""A table built by calving reads back as exactly the expected rows in three
independent readers: pyiceberg, DuckDB's iceberg extension, and pyiceberg-core
(DataFusion)."""

from __future__ import annotations

import pytest
from pyroaring import BitMap64

from commit.spec.data_file import FileContent
from commit.table.actions.fast_append import FastAppend
from commit.table.actions.row_delta import RowDelta
from commit.table.committer import Committed
from tests.support.oracles import ALL_READERS
from tests.support.tables import COLUMNS, make_table, row, rows_as_tuples, write_partitioned

pytestmark = pytest.mark.integration


def _delete(files, predicate):
    """Positions per file of rows matching predicate; returns (deletes, kept rows)."""
    deletes, kept = {}, []
    for df, rows in files:
        positions = BitMap64(i for i, r in enumerate(rows) if predicate(r))
        if len(positions):
            deletes[df.file_path] = positions
        kept += [r for r in rows if not predicate(r)]
    return deletes, kept


def test_appends_and_row_deltas_read_back_identically(sqlite_catalog):
    table = make_table(sqlite_catalog)
    batch1 = [row(i, region=("eu" if i % 3 else "us"), day=i % 2) for i in range(60)]
    files1 = write_partitioned(table, batch1)
    assert isinstance(table.commit(FastAppend(tuple(f for f, _ in files1))), Committed)

    batch2 = [row(100 + i, region="apac", day=2) for i in range(20)]
    files2 = write_partitioned(table, batch2)
    assert isinstance(table.commit(FastAppend(tuple(f for f, _ in files2))), Committed)

    # Row delta 1: delete ids divisible by 7 across several files (several DVs).
    deletes1, _ = _delete(files1, lambda r: r["id"] % 7 == 0)
    assert len(deletes1) >= 3
    extra = [row(200 + i, region="eu", day=0) for i in range(5)]
    files3 = write_partitioned(table, extra)
    out = table.commit(RowDelta(tuple(f for f, _ in files3), deletes1))
    assert isinstance(out, Committed)

    # Row delta 2: more deletes on a file that already has a DV -> merged DV replaces it.
    target_file, target_rows = next((f, rs) for f, rs in files1 if f.file_path in deletes1)
    more = BitMap64(i for i, r in enumerate(target_rows) if r["id"] % 7 != 0 and i % 2 == 0)
    assert len(more)
    out = table.commit(RowDelta(deletes={target_file.file_path: more}))
    assert isinstance(out, Committed)

    deleted_ids = {r["id"] for r in batch1 if r["id"] % 7 == 0}
    deleted_ids |= {target_rows[i]["id"] for i in more}
    expected = rows_as_tuples([r for r in batch1 + batch2 + extra if r["id"] not in deleted_ids])

    live = table.live_files()
    dv = live.dvs[target_file.file_path].data_file
    assert dv.content == FileContent.POSITION_DELETES
    assert dv.record_count == len(deletes1[target_file.file_path] | more)
    assert sum(1 for _ in live.dvs) == len(deletes1)  # one DV per data file, old one replaced

    for name, reader in ALL_READERS.items():
        got = reader(table.metadata_location, COLUMNS)
        assert got == expected, f"{name} disagrees"
