"""Table health on real tables: every figure is checked against counts made without
calving's manifest reading: file sizes from the file system, rows from the Parquet
footers, deletes from what the test itself deleted, live rows from DuckDB, snapshots and
manifests from pyiceberg."""

from __future__ import annotations

import math
import os
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyroaring import BitMap64

from calving.commit.maintenance.health import TableHealth, table_health
from calving.commit.spec.partition import spec_builder
from calving.commit.spec.transforms import IDENTITY
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.table import Table
from calving.ingest.demo.verify import duckdb_connection
from tests.support.tables import EVENTS, make_table, row, write_partitioned

TARGET = 1 << 20  # every test file (a few KiB) is small against it
SIZES = {"eu": 30, "us": 10}  # rows per append and partition


def _local(location: str) -> str:
    return location.removeprefix("file://")


def _stream(table: Table, commits: int, deletes_per_commit: int) -> dict[str, BitMap64]:
    """Appends to two partitions, each followed by deletes of earlier rows; returns the
    positions deleted per data file (the test's own record of its deletes)."""
    deleted: dict[str, BitMap64] = {}
    files: list[tuple[str, int]] = []
    next_id = 0
    for c in range(commits):
        rows = [row(next_id + i, region=r) for r, n in SIZES.items() for i in range(n)]
        next_id += len(rows)
        written = write_partitioned(table, rows)
        table.commit_or_raise(FastAppend(tuple(f for f, _ in written)))
        files += [(f.file_path, len(members)) for f, members in written]
        batch: dict[str, BitMap64] = {}
        for k in range(deletes_per_commit):
            path, count = files[(c + k) % len(files)]
            done = deleted.setdefault(path, BitMap64())
            free = [p for p in range(count) if p not in done and p not in batch.get(path, ())]
            if free:
                batch.setdefault(path, BitMap64()).add(free[0])
        if batch:
            table.commit_or_raise(RowDelta(deletes=batch))
            for path, positions in batch.items():
                deleted[path] |= positions
    return {p: d for p, d in deleted.items() if len(d)}


def _live_rows_by_region(metadata_location: str) -> dict[str, int]:
    con = duckdb_connection()
    try:
        path = _local(metadata_location).replace("'", "''")
        got = con.execute(
            f"SELECT region, count(*) FROM iceberg_scan('{path}') GROUP BY region"
        ).fetchall()
    finally:
        con.close()
    return {str(region): int(n) for region, n in got}


def _pyiceberg(metadata_location: str) -> Any:
    from pyiceberg.table import StaticTable

    return StaticTable.from_metadata(metadata_location)


def _data_files(metadata_location: str) -> list[tuple[str, str]]:
    """(region, path) of the current snapshot's data files, as pyiceberg plans them."""
    static = _pyiceberg(metadata_location)
    return [(t.file.partition[0], t.file.file_path) for t in static.scan().plan_files()]


def _health(table: Table, target: int = TARGET, **thresholds: Any) -> TableHealth:
    return table_health(table.io, table.metadata, table.metadata_location, target, **thresholds)


@pytest.fixture
def streamed(sqlite_catalog):
    table = make_table(
        sqlite_catalog, "health", spec=spec_builder(EVENTS, fields=[("region", IDENTITY)])
    )
    deleted = _stream(table, commits=6, deletes_per_commit=4)
    return table, deleted


def test_every_figure_matches_independent_counts(streamed) -> None:
    table, deleted = streamed
    health = _health(table)
    files = _data_files(table.metadata_location)
    assert len(files) == 12
    size = {p: os.path.getsize(_local(p)) for _, p in files}
    rows = {p: pq.ParquetFile(_local(p)).metadata.num_rows for _, p in files}
    live = _live_rows_by_region(table.metadata_location)
    small = math.ceil(TARGET * 0.75)
    assert health.small_file_bytes == small

    assert [p.label for p in health.partitions] == ["region=eu", "region=us"]
    for part in health.partitions:
        region = part.partition[0]
        mine = [p for r, p in files if r == region]
        assert part.data_files == len(mine)
        assert part.data_bytes == sum(size[p] for p in mine)
        assert part.rows == sum(rows[p] for p in mine) == len(mine) * SIZES[region]
        assert part.small_files == sum(1 for p in mine if size[p] < small) == len(mine)
        assert part.dvs == sum(1 for p in mine if p in deleted)
        assert part.deleted_rows == sum(len(deleted.get(p, ())) for p in mine)
        assert part.live_rows == live[region]
        live_bytes = sum(size[p] * (rows[p] - len(deleted.get(p, ()))) // rows[p] for p in mine)
        assert part.live_bytes == live_bytes
        assert part.file_budget == math.ceil(live_bytes / TARGET) + 1 == 2
        assert part.needs_compaction

    assert health.data_files == len(files)
    assert health.data_bytes == sum(size.values())
    assert health.rows == sum(rows.values())
    assert health.dvs == len(deleted)
    assert health.deleted_rows == sum(len(d) for d in deleted.values()) == 24
    assert health.live_rows == sum(live.values())
    assert health.dv_ratio == pytest.approx(24 / sum(rows.values()))
    assert health.small_files == len(files)
    assert health.worst_partition is not None and health.worst_partition.label == "region=eu"


def test_snapshot_manifest_and_metadata_figures(streamed) -> None:
    from pyiceberg.manifest import ManifestContent

    table, _ = streamed
    health = _health(table)
    static = _pyiceberg(table.metadata_location)
    snapshot = static.current_snapshot()
    manifests = snapshot.manifests(static.io)
    data = [m for m in manifests if m.content == ManifestContent.DATA]
    deletes = [m for m in manifests if m.content == ManifestContent.DELETES]
    assert health.snapshots == len(static.metadata.snapshots) == 12
    assert (health.data_manifests, health.delete_manifests) == (len(data), len(deletes))
    assert health.manifests == len(manifests) > 0
    assert health.metadata_json_bytes == os.path.getsize(_local(table.metadata_location))
    assert health.manifest_list_bytes == os.path.getsize(_local(snapshot.manifest_list))
    assert health.manifest_bytes == sum(os.path.getsize(_local(m.manifest_path)) for m in manifests)


def test_reasons_name_each_figure_past_its_threshold(streamed) -> None:
    table, _ = streamed
    relaxed = _health(table)
    assert relaxed.needs_maintenance == (
        (
            f"2 partitions need compaction: {relaxed.data_files} files where 4 would do "
            f"({relaxed.small_files} small)"
        ),
    )
    strict = _health(table, delete_ratio=0.01, max_snapshots=11, max_manifests=2)
    ratio = f"{strict.dv_ratio:.0%}"
    assert strict.needs_maintenance[1:] == (
        f"DV ratio {ratio} > 1%",
        "12 snapshots > 11",
        f"{strict.manifests} manifests > 2",
    )
    # Exactly at the thresholds nothing is reported.
    at = _health(table, delete_ratio=strict.dv_ratio, max_snapshots=12, max_manifests=99)
    assert at.needs_maintenance == relaxed.needs_maintenance


def test_a_table_of_target_sized_files_needs_nothing(streamed) -> None:
    table, _ = streamed
    # Against a 1 KiB target every file is large and each partition within its budget.
    health = _health(table, target=1024)
    assert health.small_files == 0
    assert not health.needs_compaction
    assert all(p.file_budget >= p.data_files for p in health.partitions)
    assert health.needs_maintenance == ()


def test_a_heavily_deleted_table_reports_its_dv_ratio(sqlite_catalog) -> None:
    table = make_table(sqlite_catalog, "heavy")
    written = write_partitioned(table, [row(i) for i in range(10)])
    table.commit_or_raise(FastAppend(tuple(f for f, _ in written)))
    (data_file, members), *_ = sorted(written, key=lambda w: -len(w[1]))
    positions = BitMap64(range(math.ceil(len(members) * 0.6)))
    table.commit_or_raise(RowDelta(deletes={data_file.file_path: positions}))
    health = _health(table, target=1024)
    assert health.deleted_rows == len(positions)
    assert health.live_rows == sum(_live_rows_by_region(table.metadata_location).values())
    want = len(positions) / sum(len(m) for _, m in written)
    assert health.dv_ratio == pytest.approx(want)
    assert f"DV ratio {want:.0%} > 20%" in health.needs_maintenance


def test_an_empty_table(sqlite_catalog) -> None:
    table = make_table(sqlite_catalog, "empty")
    health = _health(table)
    assert (health.partitions, health.snapshots, health.manifests) == ((), 0, 0)
    assert health.dv_ratio == 0.0 and health.worst_partition is None
    assert health.metadata_json_bytes == os.path.getsize(_local(table.metadata_location))
    assert (health.manifest_list_bytes, health.needs_maintenance) == (0, ())
