"""No dead weight left by maintenance: a pass rewrites the files past the delete-ratio
threshold and purges their DVs, and the table's old metadata goes (snapshots past the
retention and the files only they reached, metadata files that left the metadata log),
on SQLite and PostgreSQL; the readers then read exactly the rows."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from pyroaring import BitMap64

from calving.commit.maintenance.compaction_plan import CompactionPolicy
from calving.commit.maintenance.policy import MaintenancePolicy
from calving.commit.maintenance.run import run_maintenance
from calving.commit.spec.partition import spec_builder
from calving.commit.spec.transforms import IDENTITY
from calving.commit.table import scan
from calving.commit.table.actions.row_delta import RowDelta
from calving.ingest.write.rewrite import local_rewrite
from tests.commit.maintenance.test_compaction import _check, _stream
from tests.support.tables import EVENTS, make_table

TARGET = 1 << 20
KEEP_METADATA = 4


def _metadata_files(location: str) -> set[str]:
    root = location.removeprefix("file://").rstrip("/") + "/metadata"
    return {
        os.path.join(root, f)
        for f in os.listdir(root)
        if f.endswith(".metadata.json") and not f.startswith("v")  # catalog version files
    }


@pytest.mark.parametrize("catalog", ["sqlite_catalog", "pg_catalog"])
def test_a_pass_purges_heavy_dvs_and_old_metadata(catalog: str, request: Any) -> None:
    """(The filesystem catalog's metadata files are its version files: orphans' job.)"""
    any_catalog = request.getfixturevalue(catalog)
    spec = spec_builder(EVENTS, fields=[("region", IDENTITY)])
    table = make_table(
        any_catalog,
        "retained",
        spec=spec,
        properties={"write.metadata.previous-versions-max": str(KEEP_METADATA)},
    )
    expected = _stream(table, 6)
    # One file made past the delete-ratio threshold (all its rows but one deleted).
    live = table.live_files()

    def alive(path: str) -> list[int]:
        deleted = live.positions_deleted(table.io, path)
        return [p for p in range(live.data[path].data_file.record_count) if p not in deleted]

    heavy = max(sorted(live.data), key=lambda path: len(alive(path)))
    assert len(alive(heavy)) >= 2
    table.commit_or_raise(RowDelta(deletes={heavy: BitMap64(alive(heavy)[:-1])}))
    expected = [r for r in expected if r not in _rows_deleted(table, heavy, expected)]
    assert table.live_files().dvs, "the stream left deletion vectors"

    # Every metadata file is older than the two minutes a commit in flight may need.
    old = time.time() - 2 * 24 * 3600
    for path in _metadata_files(table.metadata.location):
        os.utime(path, (old, old))
    before = _metadata_files(table.metadata.location)
    logged_before = {e.metadata_file.removeprefix("file://") for e in table.metadata.metadata_log}
    logged_before.add(table.metadata_location.removeprefix("file://"))
    unlogged_before = before - logged_before
    assert len(unlogged_before) > 3

    policy = MaintenancePolicy(
        compaction=CompactionPolicy(target_file_bytes=TARGET, min_input_files=2),
        retain_last=3,
        max_snapshot_age_ms=0,
    )
    report = run_maintenance(table, policy, local_rewrite(table.io, TARGET))
    assert report.ok, report.lines()
    compact, expire = report.job("compact"), report.job("expire-snapshots")
    assert compact is not None and expire is not None
    assert compact.figures["dvs_purged"] > 0
    live = table.live_files()
    assert live.dvs == {} and heavy not in live.data
    assert len(table.metadata.snapshots) == expire.figures["snapshots_after"] == 3
    assert expire.figures["snapshots_before"] > 3
    # The metadata log keeps its newest entries; the metadata files that had left it
    # when the pass began are deleted (those leaving it with the pass's own commits go
    # in the next pass), and no logged one is.
    logged = {e.metadata_file.removeprefix("file://") for e in table.metadata.metadata_log}
    assert len(table.metadata.metadata_log) == KEEP_METADATA
    after = _metadata_files(table.metadata.location)
    assert not (before - after) & logged
    assert unlogged_before <= before - after
    assert (before & after) - logged <= logged_before
    assert expire.figures["metadata_files_deleted"] == len(before - after)
    # Nothing on disk under data/ that the remaining snapshots do not reach.
    reached = scan.files_reached(table.io, table.metadata, table.metadata.snapshots)
    root = table.metadata.location.removeprefix("file://")
    on_disk = {os.path.join(d, f) for d, _, fs in os.walk(root + "/data") for f in fs}
    assert on_disk == {p.removeprefix("file://") for p in reached if "/data/" in p}
    _check(table, expected)


def _rows_deleted(table, path, expected):
    """The expected rows whose live copy is in ``path`` at a deleted position now."""
    import pyarrow.parquet as pq

    deleted = table.live_files().positions_deleted(table.io, path)
    ids = pq.read_table(path.removeprefix("file://"), columns=["id"]).column("id").to_pylist()
    gone = {ids[p] for p in deleted}
    return [r for r in expected if r["id"] in gone]
