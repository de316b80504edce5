"""A whole maintenance pass on every catalog: compaction, manifest rewrite, statistics,
expiry (with the files only expired snapshots reached, and metadata files that left the
log) and orphan removal, each job's figures checked against the table afterwards; a
dry run changes nothing; a deadline skips what it cannot start; tables the pass cannot
maintain safely are refused before anything is written."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from calving.commit.errors import ConfigError, UnsupportedFeatureError
from calving.commit.maintenance.compaction_plan import CompactionPolicy
from calving.commit.maintenance.policy import MaintenancePolicy
from calving.commit.maintenance.run import check_maintainable, run_maintenance
from calving.commit.spec.partition import spec_builder
from calving.commit.spec.transforms import IDENTITY
from calving.commit.table import scan
from calving.commit.table.table import Table
from calving.ingest.write.rewrite import local_rewrite
from tests.commit.maintenance.test_compaction import _check, _stream
from tests.support.tables import EVENTS, make_table

TARGET = 1 << 20
POLICY = MaintenancePolicy(
    compaction=CompactionPolicy(target_file_bytes=TARGET, min_input_files=2),
    retain_last=3,
    max_snapshot_age_ms=0,
)
HOUR_MS = 3600 * 1000


def _table(catalog: Any, name: str) -> tuple[Table, list[dict[str, Any]]]:
    spec = spec_builder(EVENTS, fields=[("region", IDENTITY)])
    table = make_table(
        catalog, name, spec=spec, properties={"write.metadata.previous-versions-max": "5"}
    )
    return table, _stream(table, 10)


def _files_under(location: str) -> set[str]:
    root = location.removeprefix("file://")
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}


def test_a_pass_leaves_a_healthy_table_with_the_same_rows(any_catalog) -> None:
    table, expected = _table(any_catalog, "maintained")
    snapshots_before = len(table.metadata.snapshots)
    orphan = table.metadata.location.removeprefix("file://") + "/data/stray.parquet"
    with open(orphan, "wb") as f:
        f.write(b"not referenced")
    old = time.time() - 4 * 24 * 3600
    os.utime(orphan, (old, old))

    report = run_maintenance(table, POLICY, local_rewrite(table.io, TARGET))

    assert report.ok, report.lines()
    compact = report.job("compact")
    assert compact is not None
    # 20 files written; the deletes emptied 2 of them, which left the table at once.
    assert (compact.figures["files_before"], compact.figures["files_after"]) == (18, 2)
    assert compact.figures["dvs_purged"] > 0
    live = table.live_files()
    assert len(live.data) == 2 and live.dvs == {}
    manifests = report.job("rewrite-manifests")
    assert manifests is not None
    assert manifests.figures["manifests_after"] < manifests.figures["manifests_before"]
    assert manifests.figures["manifests_after"] == len(
        scan.manifest_files(table.io, table.metadata.current_snapshot)
    )
    stats = table.metadata.statistics
    assert [s.snapshot_id for s in stats] == [_statistics_snapshot(table)]
    expire = report.job("expire-snapshots")
    assert expire is not None
    assert expire.figures["snapshots_before"] > snapshots_before  # the pass's own commits
    assert expire.figures["snapshots_after"] == len(table.metadata.snapshots) == 3
    assert expire.figures["files_deleted"] > 0
    orphans = report.job("remove-orphans")
    assert orphans is not None and orphans.figures["deleted"] == 1
    assert not os.path.exists(orphan)
    # Nothing on disk but what the metadata reaches (plus catalog version files).
    reached = scan.files_reached(table.io, table.metadata, table.metadata.snapshots)
    data_on_disk = {p for p in _files_under(table.metadata.location) if "/data/" in p}
    assert data_on_disk == {p.removeprefix("file://") for p in reached if "/data/" in p}
    _check(table, expected)


def _statistics_snapshot(table: Table) -> int:
    """The snapshot the statistics job published for: the compacted, manifest-rewritten one
    (expiry and orphan removal add no snapshot)."""
    snap = table.metadata.current_snapshot
    assert snap is not None
    return snap.snapshot_id


def test_dry_run_changes_nothing(sqlite_catalog) -> None:
    table, expected = _table(sqlite_catalog, "dry")
    location_before = table.metadata_location
    files_before = _files_under(table.metadata.location)
    report = run_maintenance(table, POLICY, local_rewrite(table.io, TARGET), dry_run=True)
    assert report.ok and report.dry_run
    compact = report.job("compact")
    expire = report.job("expire-snapshots")
    assert compact is not None and compact.figures["groups"] == 2
    assert (
        expire is not None and expire.figures["would_expire"] == len(table.metadata.snapshots) - 3
    )
    assert table.refresh().metadata_location == location_before
    assert _files_under(table.metadata.location) == files_before
    _check(table, expected)


def test_a_passed_deadline_skips_every_job(sqlite_catalog) -> None:
    table, _ = _table(sqlite_catalog, "late")
    before = table.metadata_location
    report = run_maintenance(
        table, POLICY, local_rewrite(table.io, TARGET), deadline=time.monotonic() - 1
    )
    assert [j.skipped for j in report.jobs] == ["time budget used up"] * len(POLICY.jobs)
    assert table.refresh().metadata_location == before


def test_policy_refuses_retention_that_expires_the_current_snapshot() -> None:
    with pytest.raises(ConfigError, match="retain_last.*current snapshot"):
        MaintenancePolicy(retain_last=0)
    with pytest.raises(ConfigError, match="orphan_safety_age"):
        MaintenancePolicy(orphan_safety_age_ms=60_000)


def test_a_pyiceberg_v2_table_is_refused(tmp_path) -> None:
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from calving.commit.catalog.sql import SqlCatalog as CalvingSql
    from calving.commit.table.table import Table as CalvingTable

    url = f"sqlite:///{tmp_path}/c.db"
    theirs = SqlCatalog("c", uri=url, warehouse=f"file://{tmp_path}/wh")
    theirs.create_namespace("db")
    t = theirs.create_table(
        "db.v2", schema=pa.schema([("id", pa.int64())]), properties={"format-version": "2"}
    )
    t.append(pa.table({"id": [1, 2, 3]}))
    ours = CalvingTable.load(CalvingSql("c", url, warehouse=f"file://{tmp_path}/wh"), ("db", "v2"))
    with pytest.raises(UnsupportedFeatureError, match="format-version 2"):
        check_maintainable(ours.io, ours.metadata)


def test_statistics_wait_for_their_interval_even_after_their_snapshot_expired(
    sqlite_catalog,
) -> None:
    table, _ = _table(sqlite_catalog, "stats_interval")
    rewriter = local_rewrite(table.io, TARGET)
    first = run_maintenance(table, POLICY, rewriter).job("statistics")
    assert first is not None and first.figures["columns"] == 4
    _stream(table, 4)  # new snapshots: the statistics' snapshot expires in the next pass
    second = run_maintenance(table, POLICY, rewriter)
    stats = second.job("statistics")
    assert stats is not None and stats.figures["columns"] == 0 and "age_s" in stats.figures
    assert table.metadata.statistics == ()  # expired with their snapshot, not recomputed
    always = MaintenancePolicy(
        compaction=POLICY.compaction, retain_last=3, max_snapshot_age_ms=0, statistics_interval_ms=0
    )
    third = run_maintenance(table, always, rewriter).job("statistics")
    assert third is not None and third.figures["columns"] == 4


def test_a_job_that_loses_its_swap_to_a_writer_yields_and_the_pass_is_ok(
    sqlite_catalog, monkeypatch
) -> None:
    """The matrix's identity-string cells found it: with commit.retry.num-retries = 0 a
    manifest rewrite that lost its one swap to the stream failed the pass. A clean loss
    is the stream's priority at work: the job yields (nothing of it landed) and the next
    pass runs it again."""
    from calving.commit.maintenance import run as run_module
    from calving.commit.table.actions.fast_append import FastAppend
    from tests.support.tables import row, write_partitioned

    spec = spec_builder(EVENTS, fields=[("region", IDENTITY)])
    table = make_table(
        sqlite_catalog, "yield", spec=spec, properties={"commit.retry.num-retries": "0"}
    )
    expected = _stream(table, 10)
    original = run_module.RewriteManifestsJob.run
    catalog = table.catalog
    swap = catalog.commit_metadata

    def stream_commits_first(*args: Any, **kwargs: Any) -> Any:
        # The stream wins the swap the manifest rewrite was about to make.
        catalog.commit_metadata = swap  # type: ignore[method-assign]  # once, then the real swap
        writer = Table.load(sqlite_catalog, ("db", "yield"))
        rows = [row(10_000 + i, region="eu") for i in range(3)]
        writer.commit_or_raise(FastAppend(tuple(f for f, _ in write_partitioned(writer, rows))))
        expected.extend(rows)
        return swap(*args, **kwargs)

    def racing(self: Any, ctx: Any) -> Any:
        catalog.commit_metadata = stream_commits_first  # type: ignore[method-assign]  # the race
        try:
            return original(self, ctx)
        finally:
            catalog.commit_metadata = swap  # type: ignore[method-assign]  # restored

    monkeypatch.setattr(run_module.RewriteManifestsJob, "run", racing)
    report = run_maintenance(table, POLICY, local_rewrite(table.io, TARGET))
    job = report.job("rewrite-manifests")
    assert job is not None and job.skipped == run_module.YIELDED and job.error is None
    assert report.ok, [j.line() for j in report.jobs]
    _check(table.refresh(), expected)
