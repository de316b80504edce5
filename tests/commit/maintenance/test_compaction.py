"""Compaction end to end on a real catalog: a table made of many small files and DVs is
rewritten into target-sized files per partition with no DV left on them, a delete the
stream commits while a group is being rewritten is carried over, and the three readers
read exactly the expected rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyroaring import BitMap64

from calving.commit.maintenance.compaction import compact
from calving.commit.maintenance.compaction_plan import CompactionPolicy, RewriteGroup
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.partition import spec_builder
from calving.commit.spec.transforms import IDENTITY
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.table import Table
from calving.ingest.write.rewrite import local_rewrite
from tests.support.oracles import ALL_READERS
from tests.support.tables import COLUMNS, EVENTS, make_table, row, rows_as_tuples, write_partitioned

POLICY = CompactionPolicy(target_file_bytes=1 << 20, min_input_files=2, max_group_bytes=1 << 24)


def _stream(table: Table, commits: int) -> list[dict[str, Any]]:
    """Small appends to two partitions, each followed by deletes of a few earlier rows."""
    alive: dict[int, tuple[str, int, dict[str, Any]]] = {}
    next_id = 0
    for c in range(commits):
        rows = [row(next_id + i, region=("eu", "us")[i % 2]) for i in range(30)]
        next_id += 30
        written = write_partitioned(table, rows)
        table.commit_or_raise(FastAppend(tuple(f for f, _ in written)))
        for f, members in written:
            for pos, r in enumerate(members):
                alive[r["id"]] = (f.file_path, pos, r)
        victims = [i for i in sorted(alive) if i % 7 == c % 7][:6]
        deletes: dict[str, BitMap64] = {}
        for i in victims:
            path, pos, _ = alive.pop(i)
            deletes.setdefault(path, BitMap64()).add(pos)
        table.commit_or_raise(RowDelta(deletes=deletes))
    return [r for _, _, r in alive.values()]


def _check(table: Table, expected: Sequence[dict[str, Any]]) -> None:
    want = rows_as_tuples(expected)
    for name, reader in ALL_READERS.items():
        assert reader(table.metadata_location, COLUMNS) == want, name


def test_compaction_leaves_few_files_no_dvs_and_the_same_rows(sqlite_catalog) -> None:
    spec = spec_builder(EVENTS, fields=[("region", IDENTITY)])
    table = make_table(sqlite_catalog, "compact", spec=spec)
    expected = _stream(table, 12)
    before = table.live_files()
    # 24 files written; the deletes emptied 2 of them, which left the table at once.
    assert len(before.data) == 22 and before.dvs
    assert all(len(before.positions_deleted(table.io, p)) < e.data_file.record_count
               for p, e in before.data.items())  # fmt: skip
    report = compact(table, POLICY, local_rewrite(table.io, POLICY.target_file_bytes))
    assert report.groups_failed == [] and report.groups_committed == 2
    assert (report.files_before, report.files_after) == (22, 2)
    live = table.live_files()
    by_partition: dict[Any, int] = {}
    for e in live.data.values():
        by_partition[e.data_file.partition] = by_partition.get(e.data_file.partition, 0) + 1
    assert by_partition == {("eu",): 1, ("us",): 1}
    assert live.dvs == {}
    _check(table, expected)
    # Nothing left to do: a second pass plans no group.
    assert (
        compact(table, POLICY, local_rewrite(table.io, POLICY.target_file_bytes)).groups_planned
        == 0
    )


def test_a_delete_committed_during_the_rewrite_is_carried_over(sqlite_catalog) -> None:
    spec = spec_builder(EVENTS, fields=[("region", IDENTITY)])
    table = make_table(sqlite_catalog, "carried", spec=spec)
    expected = _stream(table, 6)
    stream = Table.load(sqlite_catalog, ("db", "carried"))  # another writer's handle
    rewrite = local_rewrite(table.io, POLICY.target_file_bytes)
    deleted: list[int] = []

    def rewrite_while_the_stream_deletes(
        metadata: TableMetadata, group: RewriteGroup, inputs: Sequence[tuple[DataFile, BitMap64]]
    ) -> Any:
        out = rewrite(metadata, group, inputs)
        # The stream deletes rows of an input file after the rewrite read it.
        data_file, seen = inputs[0]
        stream.refresh()
        positions = [p for p in range(data_file.record_count) if p not in seen][:3]
        stream.commit_or_raise(RowDelta(deletes={data_file.file_path: BitMap64(positions)}))
        ids = [r[0] for r in ALL_READERS["pyiceberg"](stream.metadata_location, ["id"])]
        deleted.extend(_ids_at(data_file, positions))
        assert not set(deleted) & set(ids)
        return out

    report = compact(table, POLICY, rewrite_while_the_stream_deletes)
    assert report.groups_failed == [] and report.groups_committed == 2
    assert report.deletes_carried == 6
    assert len(deleted) == 6
    _check(table, [r for r in expected if r["id"] not in deleted])


def _ids_at(data_file: DataFile, positions: Sequence[int]) -> list[int]:
    import pyarrow.parquet as pq

    ids = pq.read_table(data_file.file_path.removeprefix("file://"), columns=["id"]).column(0)
    return [ids[p].as_py() for p in positions]


def test_expiry_deletes_the_maps_and_statistics_of_expired_snapshots(sqlite_catalog) -> None:
    from calving.commit.maintenance.column_stats import collect_statistics
    from calving.commit.maintenance.orphans import find_orphans
    from calving.commit.spec.position_map import SUMMARY_PROPERTY
    from calving.commit.table.actions.expire_snapshots import ExpireSnapshots

    spec = spec_builder(EVENTS, fields=[("region", IDENTITY)])
    table = make_table(sqlite_catalog, "expiry", spec=spec)
    expected = _stream(table, 4)
    compact(table, POLICY, local_rewrite(table.io, POLICY.target_file_bytes))
    maps = [
        s.summary[SUMMARY_PROPERTY]
        for s in table.metadata.snapshots
        if SUMMARY_PROPERTY in s.summary
    ]
    stats = collect_statistics(table).statistics_path
    assert len(maps) == 2 and all(table.io.exists(m) for m in maps) and stats
    extra = write_partitioned(table, [row(10_000, region="eu")])
    table.commit_or_raise(FastAppend(tuple(f for f, _ in extra)))
    table.commit_or_raise(ExpireSnapshots(retain_last=1))
    assert not any(table.io.exists(m) for m in maps)
    assert not table.io.exists(stats)
    # Expiry removed everything only expired snapshots reached: no orphan is left.
    orphans = find_orphans(table.io, table.metadata, table.metadata_location, older_than_ms=2**62)
    assert orphans.orphans == []
    _check(table, [*expected, row(10_000, region="eu")])


def test_rewrite_manifests_regroups_a_streamed_table(sqlite_catalog) -> None:
    """One small manifest per commit becomes a few, with the same live files and DVs."""
    from calving.commit.table import scan
    from calving.commit.table.actions.rewrite_manifests import RewriteManifests
    from calving.commit.table.committer import Committed, Skipped

    spec = spec_builder(EVENTS, fields=[("region", IDENTITY)])
    table = make_table(sqlite_catalog, "manifests", spec=spec)
    expected = _stream(table, 10)
    before = scan.manifest_files(table.io, table.metadata.current_snapshot)
    live_before = table.live_files()
    assert len(before) >= 10
    assert isinstance(table.commit(RewriteManifests()), Committed)
    after = scan.manifest_files(table.io, table.metadata.current_snapshot)
    assert len(after) == 2  # one data and one delete manifest at this size
    live_after = table.live_files()
    assert set(live_after.data) == set(live_before.data)
    assert {p: e.data_file.file_path for p, e in live_after.dvs.items()} == {
        p: e.data_file.file_path for p, e in live_before.dvs.items()
    }
    snap = table.metadata.current_snapshot
    assert snap is not None and snap.summary["operation"] == "replace"
    _check(table, expected)
    assert isinstance(table.commit(RewriteManifests()), Skipped)
