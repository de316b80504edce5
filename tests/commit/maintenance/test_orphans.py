"""Orphan removal on real catalogs: only unreferenced files older than the safety age go;
the table reads back exactly (pyiceberg, DuckDB, DataFusion) afterwards."""

from __future__ import annotations

import os
import time

import pytest

from calving.commit.maintenance.orphans import (
    OrphanListingMismatchError,
    find_orphans,
    remove_orphans,
)
from calving.commit.spec.partition import UNPARTITIONED
from calving.commit.table.actions.expire_snapshots import ExpireSnapshots
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.table import Table
from tests.support.oracles import ALL_READERS
from tests.support.tables import COLUMNS, make_table, row, rows_as_tuples, write_partitioned

DAY_MS = 24 * 3600 * 1000


def _plant(table: Table, relative: str, age_ms: int) -> str:
    path = f"{table.metadata.location.removeprefix('file://')}/{relative}"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"left over by a crashed writer")
    then = time.time() - age_ms / 1000
    os.utime(path, (then, then))
    return "file://" + path


@pytest.mark.parametrize("catalog_fixture", ["sqlite_catalog", "fs_catalog"])
def test_only_old_unreferenced_files_are_removed(request, catalog_fixture) -> None:
    catalog = request.getfixturevalue(catalog_fixture)
    table = make_table(catalog, "orph", spec=UNPARTITIONED)
    rows = [row(i) for i in range(40)]
    written = write_partitioned(table, rows)
    table.commit_or_raise(FastAppend(tuple(f for f, _ in written)))
    ((data_file, in_file),) = written
    table.commit_or_raise(RowDelta(deletes={data_file.file_path: [0, 1, 2]}))
    more = write_partitioned(table, [row(i) for i in range(100, 120)])
    table.commit_or_raise(FastAppend(tuple(f for f, _ in more)))
    table.commit_or_raise(ExpireSnapshots(retain_last=1))  # expired snapshots' files go now
    # Backdate every real file: age alone must never remove a referenced one.
    for f in table.io.list_files(table.metadata.location.rstrip("/") + "/"):
        then = time.time() - 10 * DAY_MS / 1000
        os.utime(f.location.removeprefix("file://"), (then, then))

    old = [
        _plant(table, "data/orphan-00001.parquet", 5 * DAY_MS),
        _plant(table, "metadata/snap-1-orphan.avro", 5 * DAY_MS),
        _plant(table, "metadata/calving-index/orphan.idx", 4 * DAY_MS),
    ]
    young = _plant(table, "data/in-flight.parquet", 60_000)

    dry = remove_orphans(table.io, table.metadata, table.metadata_location, dry_run=True)
    assert sorted(f.location for f in dry.orphans) == sorted(old)
    assert dry.deleted == 0 and all(table.io.exists(loc) for loc in old)
    assert dry.too_young == 1

    done = remove_orphans(table.io, table.metadata, table.metadata_location)
    assert done.deleted == 3 and done.deleted_bytes == 3 * len(b"left over by a crashed writer")
    assert not any(table.io.exists(loc) for loc in old)
    assert table.io.exists(young)
    assert find_orphans(table.io, table.metadata, table.metadata_location).orphans == []

    expected = rows_as_tuples([r for r in rows if r not in [in_file[i] for i in (0, 1, 2)]]
                              + [row(i) for i in range(100, 120)])  # fmt: skip
    for name, reader in ALL_READERS.items():
        assert reader(table.metadata_location, COLUMNS) == expected, name
    if catalog_fixture == "fs_catalog":
        versions = [f for f in table.io.list_prefix(table.metadata.location + "/metadata/")
                    if f.endswith(".metadata.json")]  # fmt: skip
        assert len(versions) >= 5  # version files are never orphans there


def test_a_referenced_file_missing_from_the_listing_stops_the_job(sqlite_catalog) -> None:
    """If what the metadata references cannot be matched to the listing, no file may be
    judged an orphan: the job refuses instead of deleting."""
    table = make_table(sqlite_catalog, "guard", spec=UNPARTITIONED)
    written = write_partitioned(table, [row(i) for i in range(10)])
    table.commit_or_raise(FastAppend(tuple(f for f, _ in written)))
    planted = _plant(table, "data/orphan.parquet", 5 * DAY_MS)
    os.remove(written[0][0].file_path.removeprefix("file://"))
    with pytest.raises(OrphanListingMismatchError, match="refusing"):
        remove_orphans(table.io, table.metadata, table.metadata_location)
    assert table.io.exists(planted)
