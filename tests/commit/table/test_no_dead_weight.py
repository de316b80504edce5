"""No dead weight: a data file all of whose rows are deleted leaves the table in the
same commit (a DELETED manifest entry, its old DV dropped with it) instead of getting a
DV that hides all of it, as Trino does. Read back by pyiceberg, DuckDB and
pyiceberg-core equal to the expected rows, on SQLite and PostgreSQL. A compaction that
copied a file the stream has since emptied and removed carries every copied row as
deleted instead of failing."""

from __future__ import annotations

import pytest
from pyroaring import BitMap64

from calving.commit.maintenance.compaction import compact
from calving.commit.maintenance.compaction_plan import CompactionPolicy
from calving.commit.spec.data_file import EntryStatus, ManifestContent
from calving.commit.spec.partition import UNPARTITIONED
from calving.commit.table import scan
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.committer import Committed
from calving.ingest.write.rewrite import local_rewrite
from tests.support.oracles import ALL_READERS
from tests.support.tables import COLUMNS, make_table, row, rows_as_tuples, write_partitioned

pytestmark = pytest.mark.integration


def _files(table, n_files: int, rows_per_file: int, start: int = 0):
    """``n_files`` files (of an unpartitioned table), committed."""
    out = []
    for f in range(n_files):
        rows = [row(start + f * 100 + i, region=f"r{f}") for i in range(rows_per_file)]
        ((data_file, members),) = write_partitioned(table, rows)
        out.append((data_file, members))
    assert isinstance(table.commit(FastAppend(tuple(f for f, _ in out))), Committed)
    return out


def _deleted_entries(table) -> set[str]:
    """Data files the current snapshot marks DELETED."""
    snap = table.metadata.current_snapshot
    out = set()
    for mf in scan.manifest_files(table.io, snap):
        if mf.content != ManifestContent.DATA or mf.added_snapshot_id != snap.snapshot_id:
            continue
        for e in scan.manifest_entries(table.io, table.metadata, mf):
            if e.status == EntryStatus.DELETED:
                out.add(e.data_file.file_path)
    return out


def _check_readers(table, expected_rows) -> None:
    expected = rows_as_tuples(expected_rows)
    for name, reader in ALL_READERS.items():
        assert reader(table.metadata_location, COLUMNS) == expected, f"{name} disagrees"


def test_a_file_whose_rows_are_all_deleted_is_removed(any_catalog):
    table = make_table(any_catalog, "emptied", spec=UNPARTITIONED)
    (a, _), (b, b_rows), (c, _) = _files(table, 3, 6)

    # A loses every row at once; B only some: A goes, B gets a DV.
    out = table.commit(
        RowDelta(deletes={a.file_path: BitMap64(range(6)), b.file_path: BitMap64([0, 2])})
    )
    assert isinstance(out, Committed)
    assert out.removed_data_files == {a.file_path}  # the outcome says which file went
    live = table.live_files()
    assert a.file_path not in live.data and a.file_path not in live.dvs
    assert set(live.dvs) == {b.file_path}
    assert _deleted_entries(table) == {a.file_path}
    summary = table.metadata.current_snapshot.summary
    assert summary["removed-data-files"] == "1" and summary["deleted-records"] == "6"
    assert summary["added-dvs"] == "1"

    # C's first deletes make a DV; its last rows then remove C and that DV together.
    first = table.commit(RowDelta(deletes={c.file_path: BitMap64([1, 3])}))
    assert isinstance(first, Committed) and first.removed_data_files == frozenset()
    out = table.commit(RowDelta(deletes={c.file_path: BitMap64([0, 2, 4, 5])}))
    assert isinstance(out, Committed) and out.removed_data_files == {c.file_path}
    live = table.live_files()
    assert c.file_path not in live.data and set(live.dvs) == {b.file_path}
    assert _deleted_entries(table) == {c.file_path}
    summary = table.metadata.current_snapshot.summary
    assert summary["removed-data-files"] == "1" and summary["removed-dvs"] == "1"
    assert "added-dvs" not in summary
    assert summary["total-data-files"] == "1" and summary["total-delete-files"] == "1"
    assert summary["total-records"] == "6" and summary["total-position-deletes"] == "2"

    _check_readers(table, [r for i, r in enumerate(b_rows) if i not in (0, 2)])


def test_appending_while_emptying_a_file(sqlite_catalog):
    """An upsert batch: new rows added and an old file emptied in one snapshot."""
    table = make_table(sqlite_catalog, "upsert", spec=UNPARTITIONED)
    ((a, _),) = _files(table, 1, 4)
    new_rows = [row(1000 + i, region="r0") for i in range(4)]
    added = tuple(f for f, _ in write_partitioned(table, new_rows))
    assert isinstance(
        table.commit(RowDelta(added, deletes={a.file_path: BitMap64(range(4))})), Committed
    )
    assert table.metadata.current_snapshot.summary["operation"] == "overwrite"
    assert set(table.live_files().data) == {f.file_path for f in added}
    assert table.live_files().dvs == {}
    _check_readers(table, new_rows)


def test_a_compaction_of_a_file_the_stream_emptied_meanwhile(sqlite_catalog):
    """The rewrite read A and B; then the stream deleted all of A (A removed) and one
    row of B. The rewrite carries both: every copied row of A and B's row are deleted
    on its new file, and it commits."""
    table = make_table(sqlite_catalog, "race", spec=UNPARTITIONED)
    rows_a = [row(i) for i in range(5)]
    rows_b = [row(100 + i) for i in range(5)]
    (a, _), (b, _) = (write_partitioned(table, rows_a)[0], write_partitioned(table, rows_b)[0])
    assert isinstance(table.commit(FastAppend((a,))), Committed)
    assert isinstance(table.commit(FastAppend((b,))), Committed)
    # One row of A deleted before the rewrite reads it: the map does not copy it.
    assert isinstance(table.commit(RowDelta(deletes={a.file_path: BitMap64([0])})), Committed)

    rewrite = local_rewrite(table.io, 1 << 20)
    landed = False

    def rewrite_then_the_stream_lands(metadata, group, inputs):
        nonlocal landed
        out = rewrite(metadata, group, inputs)
        if not landed:
            landed = True
            other = type(table).load(table.catalog, table.ident, table.io)
            deletes = {a.file_path: BitMap64(range(5)), b.file_path: BitMap64([4])}
            assert isinstance(other.commit(RowDelta(deletes=deletes)), Committed)
            assert a.file_path not in other.live_files().data
        return out

    policy = CompactionPolicy(target_file_bytes=1 << 20, min_input_files=2, max_group_bytes=1 << 24)
    report = compact(table, policy, rewrite_then_the_stream_lands)
    assert landed and report.groups_failed == [] and report.groups_committed == 1
    table = type(table).load(table.catalog, table.ident, table.io)
    live = table.live_files()
    assert a.file_path not in live.data and b.file_path not in live.data
    ((new_path, entry),) = live.data.items()
    assert entry.data_file.record_count == 9  # the 4 live rows of A it read, and B's 5
    assert len(live.positions_deleted(table.io, new_path)) == 5  # A's 4 copies, B's last
    _check_readers(table, rows_b[:4])
