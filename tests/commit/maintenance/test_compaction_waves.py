"""A pass's compaction groups commit together: at most ``max_commits`` replace
snapshots whatever the number of partitions, each wave one merged position map that
still carries the stream's deletes; a group that fails or that the table moved past is
left out while the rest of its wave commits; a stop request ends the pass within one
group; commits are spaced by the pacer's pause. Real catalog, real local rewrites, the
three readers."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest
from pyroaring import BitMap64

from calving.commit.errors import FileIOError
from calving.commit.maintenance.compaction import (
    PassStoppedError,
    compact,
    waves,
)
from calving.commit.maintenance.compaction_plan import CompactionPolicy, RewriteGroup
from calving.commit.maintenance.pacing import Pacer
from calving.commit.maintenance.policy import MaintenancePolicy
from calving.commit.maintenance.run import run_maintenance
from calving.commit.spec import position_map as pm
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.partition import spec_builder
from calving.commit.spec.transforms import bucket
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.table import Table
from calving.ingest.write.rewrite import local_rewrite
from tests.support.oracles import ALL_READERS
from tests.support.tables import COLUMNS, EVENTS, make_table, row, rows_as_tuples, write_partitioned

pytestmark = pytest.mark.integration

PARTITIONS = 16
POLICY = CompactionPolicy(target_file_bytes=1 << 20, min_input_files=2, max_commits=3)


def _many_partitions(catalog: Any, name: str, batches: int = 3) -> tuple[Table, list[Any]]:
    """``batches`` appends, each one small file in each of 16 partitions."""
    spec = spec_builder(EVENTS, fields=[("id", bucket(PARTITIONS))])
    table = make_table(catalog, name, spec=spec)
    rows: list[Any] = []
    for b in range(batches):
        batch = [row(b * 1000 + i) for i in range(64)]
        written = write_partitioned(table, batch)
        table.commit_or_raise(FastAppend(tuple(f for f, _ in written)))
        rows += written
    return table, rows


def _check(table: Table, expected: Sequence[dict[str, Any]]) -> None:
    want = rows_as_tuples(expected)
    for name, reader in ALL_READERS.items():
        assert reader(table.metadata_location, COLUMNS) == want, name


def _all_rows(written: list[Any]) -> list[dict[str, Any]]:
    return [r for _, members in written for r in members]


def test_waves_cut_groups_into_at_most_max_commits():
    groups = [RewriteGroup(0, (i,), ()) for i in range(10)]
    assert [len(w) for w in waves(groups, 3)] == [4, 3, 3]
    assert [len(w) for w in waves(groups, 20)] == [1] * 10
    assert waves([], 3) == []
    assert [g for w in waves(groups, 4) for g in w] == groups


def test_groups_of_many_partitions_commit_in_max_commits_snapshots(sqlite_catalog):
    table, written = _many_partitions(sqlite_catalog, "waves")
    snapshots_before = len(table.metadata.snapshots)
    report = compact(table, POLICY, local_rewrite(table.io, POLICY.target_file_bytes))
    assert report.groups_planned == PARTITIONS and report.groups_committed == PARTITIONS
    assert report.commits == 3 and report.groups_failed == [] == report.groups_given_up
    assert len(table.metadata.snapshots) == snapshots_before + 3
    new = table.metadata.ancestors()[:3]
    assert {s.summary["operation"] for s in new} == {"replace"}
    assert len(table.live_files().data) == PARTITIONS
    _check(table, _all_rows(written))


def test_deletes_the_stream_commits_during_a_wave_are_carried_by_the_merged_map(sqlite_catalog):
    table, written = _many_partitions(sqlite_catalog, "carry")
    stream = Table.load(sqlite_catalog, table.ident)
    rewrite = local_rewrite(table.io, POLICY.target_file_bytes)
    gone: list[dict[str, Any]] = []
    members = {f.file_path: rows for f, rows in written}

    def rewrite_then_the_stream_deletes(
        metadata: TableMetadata, group: RewriteGroup, inputs: Sequence[tuple[DataFile, BitMap64]]
    ) -> Any:
        out = rewrite(metadata, group, inputs)
        victim = inputs[-1][0]
        stream.refresh().commit_or_raise(RowDelta(deletes={victim.file_path: BitMap64([0])}))
        gone.append(members[victim.file_path][0])
        return out

    report = compact(table, POLICY, rewrite_then_the_stream_deletes)
    assert report.groups_committed == PARTITIONS and report.commits == 3
    assert report.deletes_carried == PARTITIONS
    replaces = [s for s in table.metadata.ancestors() if s.summary["operation"] == "replace"]
    maps = [s.summary[pm.SUMMARY_PROPERTY] for s in replaces]
    assert len(set(maps)) == 3  # one merged map per wave
    _check(table, [r for r in _all_rows(written) if r not in gone])


def test_a_failed_group_keeps_the_others_of_its_wave(sqlite_catalog):
    table, written = _many_partitions(sqlite_catalog, "failed")
    rewrite = local_rewrite(table.io, POLICY.target_file_bytes)
    calls: list[RewriteGroup] = []

    def one_group_fails(metadata: TableMetadata, group: RewriteGroup, inputs: Any) -> Any:
        calls.append(group)
        if len(calls) == 2:
            raise FileIOError("injected: cannot read an input")
        return rewrite(metadata, group, inputs)

    report = compact(table, POLICY, one_group_fails)
    assert len(report.groups_failed) == 1 and "injected" in report.groups_failed[0]
    assert report.groups_committed == PARTITIONS - 1 and report.commits == 3
    _check(table, _all_rows(written))


@pytest.mark.parametrize("whole_pass", [False, True], ids=["compact", "pass"])
def test_a_group_the_table_moved_past_is_given_up_and_its_wave_commits(sqlite_catalog, whole_pass):
    """Another maintenance process compacts one partition while this wave is being
    rewritten: that group's inputs are gone (RewriteConflictError), the group is given
    up (not a failure) and the rest of the wave commits in one snapshot. A whole pass
    counts the group given up by its cause in its JSON line."""
    table, written = _many_partitions(sqlite_catalog, f"given_up_{whole_pass}")
    other = Table.load(sqlite_catalog, table.ident)
    rewrite = local_rewrite(table.io, POLICY.target_file_bytes)
    stolen: list[tuple[Any, ...]] = []

    def another_compaction_takes_a_group(
        metadata: TableMetadata, group: RewriteGroup, inputs: Any
    ) -> Any:
        out = rewrite(metadata, group, inputs)
        if not stolen:
            only_this = CompactionPolicy(target_file_bytes=1 << 20, min_input_files=2)
            other.refresh()
            keep = {c.data_file.file_path for c in group.files}
            r = compact(other, only_this, _only(rewrite, keep))
            assert r.groups_committed == 1
            stolen.append(group.partition)
        return out

    snapshots_before = len(table.metadata.snapshots)
    if whole_pass:
        only_compact = MaintenancePolicy(compaction=POLICY, jobs=("compact",))
        summary = run_maintenance(table, only_compact, another_compaction_takes_a_group)
        line = summary.summary()
        assert line["groups_given_up"] == 1 and line["groups_committed"] == PARTITIONS - 1
        assert line["groups_given_up_by"] == {"RewriteConflictError": 1}
        return
    report = compact(table, POLICY, another_compaction_takes_a_group)
    assert len(report.groups_given_up) == 1 and "no longer live" in report.groups_given_up[0]
    assert report.groups_failed == []
    assert report.groups_committed == PARTITIONS - 1 and report.commits == 3
    assert len(table.metadata.snapshots) == snapshots_before + 4  # 3 waves + the other's
    _check(table, _all_rows(written))
    assert len(table.live_files().data) == PARTITIONS


def _only(rewrite: Any, paths: set[str]) -> Any:
    """A rewriter that rewrites only the group made of ``paths``; others fail."""

    def run(metadata: TableMetadata, group: RewriteGroup, inputs: Any) -> Any:
        if {c.data_file.file_path for c in group.files} != paths:
            raise FileIOError("not this group")
        return rewrite(metadata, group, inputs)

    return run


def test_a_stop_request_ends_the_pass_within_one_group(sqlite_catalog):
    table, written = _many_partitions(sqlite_catalog, "stopped")
    rewrite = local_rewrite(table.io, POLICY.target_file_bytes)
    pacer = Pacer(pause_s=0.0)
    calls: list[Any] = []

    def stop_after_two(metadata: TableMetadata, group: RewriteGroup, inputs: Any) -> Any:
        calls.append(group)
        if len(calls) == 2:
            pacer.stop.set()  # SIGTERM arrives while the second group is rewritten
        return rewrite(metadata, group, inputs)

    before = table.metadata_location
    report = compact(table, POLICY, stop_after_two, pacer=pacer)
    assert len(calls) == 2  # no group started after the request
    assert report.stopped and report.commits == 0
    assert report.groups_left == PARTITIONS and report.groups_committed == 0
    table.refresh()
    assert table.metadata_location == before
    _check(table, _all_rows(written))


def test_commits_of_a_pass_are_spaced_by_the_pause(sqlite_catalog):
    table, _written = _many_partitions(sqlite_catalog, "paced")
    waits: list[float] = []

    class RecordingStop(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout or 0.0)
            return super().wait(timeout)

    pacer = Pacer(pause_s=1.0, stop=RecordingStop())
    report = compact(table, POLICY, local_rewrite(table.io, 1 << 20), pacer=pacer)
    assert report.commits == 3
    # Waited (what the next wave's rewrite had not already spent) before commits 2 and 3.
    assert len(waits) <= 2 and all(0 < w <= 1.0 for w in waits)
    stamps = sorted(s.timestamp_ms for s in table.metadata.ancestors()[:3])
    assert stamps[1] - stamps[0] >= 1000 and stamps[2] - stamps[1] >= 1000


def test_a_stopped_local_rewriter_reports_the_groups_it_did_not_start():
    from calving.commit.maintenance.compaction import OneByOne

    ran: list[int] = []
    one = OneByOne(lambda m, g, i: ran.append(1) or ((), None), stop=lambda: len(ran) >= 1)  # type: ignore[arg-type, func-returns-value]  # a stub rewriter that records its call
    out = one.rewrite_many(None, [(RewriteGroup(0, (i,), ()), []) for i in range(3)])  # type: ignore[arg-type]  # no table: the stopped rewriter never reads it
    assert len(ran) == 1 and all(isinstance(r, PassStoppedError) for r in out[1:])
