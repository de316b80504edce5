"""A table built by calving reads back as exactly the expected rows in three
independent readers: pyiceberg, DuckDB's iceberg extension, and pyiceberg-core
(DataFusion)."""

from __future__ import annotations

import pytest
from pyroaring import BitMap64

from calving.commit.spec.data_file import FileContent
from calving.commit.spec.partition import UNPARTITIONED
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.committer import Committed
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


def _unpartitioned_files(table, sizes):
    """One data file per size of ids counting up from 0; returns [(DataFile, ids)]."""
    import numpy as np
    import pyarrow as pa

    from calving.ingest.write.parquet_writer import write_data_file

    out, start = [], 0
    for n, size in enumerate(sizes):
        ids = list(range(start, start + size))
        start += size
        data = pa.table(
            {
                "id": pa.array(np.array(ids), pa.int64()),
                "region": pa.array(["eu"] * size),
                "ts": pa.array(np.array(ids) * 1_000_000, pa.timestamp("us", tz="UTC")),
                "payload": pa.array([f"p{i}" for i in ids]),
            }
        )
        location = f"{table.metadata.location}/data/sized-{n:03d}.parquet"
        out.append((write_data_file(table.io, location, data, table.metadata.schema), ids))
    return out


@pytest.mark.parametrize("blobs_per_puffin", [None, "1"])
def test_large_dv_next_to_small_dv_reads_back_in_duckdb(sqlite_catalog, blobs_per_puffin):
    """Regression: one RowDelta with a large DV (3,333 positions in 10k rows) and a small
    one (2 positions) used to write both blobs into one Puffin file, which DuckDB's
    iceberg extension (its external file cache on, the default) read back with the
    small DV replaced by the large one's positions: rows came back and others vanished.
    One DV per Puffin file (the default) reads back right in every reader."""
    props = {} if blobs_per_puffin is None else {"calving.dv.blobs-per-puffin": blobs_per_puffin}
    table = make_table(sqlite_catalog, "sized", spec=UNPARTITIONED, properties=props)
    files = _unpartitioned_files(table, [10_000, 1_000])
    assert isinstance(table.commit(FastAppend(tuple(f for f, _ in files))), Committed)
    # ~6.7 kB of blob: larger than what follows it in a packed Puffin file (the small
    # blob and the footer), the condition under which DuckDB misread the small one.
    big = BitMap64(range(1, 10_000, 3))
    small = BitMap64([623, 679])
    deletes = {files[0][0].file_path: big, files[1][0].file_path: small}
    assert isinstance(table.commit(RowDelta(deletes=deletes)), Committed)

    gone = {files[0][1][p] for p in big} | {files[1][1][p] for p in small}
    expected = sorted(i for _, ids in files for i in ids if i not in gone)
    for name, reader in ALL_READERS.items():
        got = [r[0] for r in reader(table.metadata_location, ["id"])]
        assert got == expected, f"{name} disagrees"
    live = table.live_files()
    puffins = {live.dvs[f.file_path].data_file.file_path for f, _ in files}
    assert len(puffins) == 2  # one Puffin file per DV


def test_dv_blobs_per_puffin_packs_dvs_and_rejects_bad_values(sqlite_catalog):
    """The property packs several DVs into one Puffin file (for readers without
    DuckDB's cache bug) and a bad value fails the commit with a typed error."""
    from calving.commit.errors import InvalidTablePropertyError

    table = make_table(
        sqlite_catalog,
        "packed",
        spec=UNPARTITIONED,
        properties={"calving.dv.blobs-per-puffin": "2"},
    )
    files = _unpartitioned_files(table, [100, 100, 100])
    assert isinstance(table.commit(FastAppend(tuple(f for f, _ in files))), Committed)
    deletes = {f.file_path: BitMap64([1, 2]) for f, _ in files}
    assert isinstance(table.commit(RowDelta(deletes=deletes)), Committed)
    puffins = [table.live_files().dvs[f.file_path].data_file.file_path for f, _ in files]
    assert len(set(puffins)) == 2  # 2 + 1 blobs
    expected = sorted(i for _, ids in files for i in ids if i % 100 not in (1, 2))
    got = [r[0] for r in ALL_READERS["pyiceberg"](table.metadata_location, ["id"])]
    assert got == expected

    bad = make_table(
        sqlite_catalog, "bad", spec=UNPARTITIONED, properties={"calving.dv.blobs-per-puffin": "0"}
    )
    bad_files = _unpartitioned_files(bad, [10])
    assert isinstance(bad.commit(FastAppend(tuple(f for f, _ in bad_files))), Committed)
    with pytest.raises(InvalidTablePropertyError, match="calving.dv.blobs-per-puffin"):
        bad.commit(RowDelta(deletes={bad_files[0][0].file_path: BitMap64([1])}))


def test_manifests_left_with_only_deleted_entries_are_not_carried(sqlite_catalog):
    """Replacing a file's DV rewrites the manifest that held the old one with that entry
    DELETED; the next snapshot does not carry such a manifest (its own list still does),
    so a CDC stream does not pile up manifests readers must open."""
    from calving.commit.table import scan

    table = make_table(sqlite_catalog, "dvchain", spec=UNPARTITIONED)
    ((data_file, ids),) = _unpartitioned_files(table, [50])
    assert isinstance(table.commit(FastAppend((data_file,))), Committed)
    lists = []
    for position in (1, 2, 3, 4):
        out = table.commit(RowDelta(deletes={data_file.file_path: BitMap64([position])}))
        assert isinstance(out, Committed)
        lists.append(scan.manifest_files(table.io, table.metadata.current_snapshot))

    def only_deleted(manifests, snapshot_id=None):
        return [
            m
            for m in manifests
            if m.deleted_files_count
            and not m.added_files_count
            and not m.existing_files_count
            and (snapshot_id is None or m.added_snapshot_id != snapshot_id)
        ]

    # Each snapshot holds the all-DELETED manifest it wrote itself, none older.
    for manifests in lists[1:]:
        assert len(only_deleted(manifests)) == 1
    current = table.metadata.current_snapshot_id
    assert only_deleted(lists[-1], snapshot_id=current) == []
    assert len(lists[-1]) == 3  # data, the new DV, the DV just replaced (DELETED)
    expected = [i for i in ids if i not in (ids[1], ids[2], ids[3], ids[4])]
    for name, reader in ALL_READERS.items():
        got = [r[0] for r in reader(table.metadata_location, ["id"])]
        assert got == expected, f"{name} disagrees"
