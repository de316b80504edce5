"""A commit that rewrites a kept manifest (to drop removed entries) and then merges it
into another leaves no unreferenced manifest behind: what the attempt wrote to read back
is unstaged or deleted before the swap, so a landed commit's files are exactly those its
metadata reaches."""

from __future__ import annotations

import os

from calving.commit.maintenance.compaction import compact
from calving.commit.maintenance.compaction_plan import CompactionPolicy
from calving.commit.spec.partition import spec_builder
from calving.commit.spec.transforms import IDENTITY
from calving.commit.table import scan
from calving.ingest.write.rewrite import local_rewrite
from tests.commit.maintenance.test_compaction import _check, _stream
from tests.support.tables import EVENTS, make_table


def _manifests_on_disk(location: str) -> set[str]:
    root = os.path.join(location.removeprefix("file://"), "metadata")
    return {
        os.path.join(root, f)
        for f in os.listdir(root)
        if f.endswith(".avro") and not f.startswith("snap-")
    }


def test_merged_rewrites_leave_no_stray_manifest(sqlite_catalog) -> None:
    table = make_table(
        sqlite_catalog,
        "stray",
        spec=spec_builder(EVENTS, fields=[("region", IDENTITY)]),
        properties={"commit.manifest.min-count-to-merge": "2"},
    )
    expected = _stream(table, 6)
    policy = CompactionPolicy(target_file_bytes=1 << 20, min_input_files=2)
    report = compact(table, policy, local_rewrite(table.io, policy.target_file_bytes))
    assert report.groups_committed == 2
    reached = {
        m.manifest_path.removeprefix("file://")
        for snap in table.metadata.snapshots
        for m in scan.manifest_files(table.io, snap)
    }
    assert _manifests_on_disk(table.metadata.location) == reached
    _check(table, expected)
