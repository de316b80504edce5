"""v3 row lineage through maintenance, sort-order clustering and partition directories
of compaction, checked with an independent lineage reader (pyiceberg's manifests,
pyarrow's Parquet by field id) and the three data readers.

Every live row keeps its ``_row_id`` and ``_last_updated_sequence_number`` across
manifest merges during streaming, a compaction and a manifest rewrite; only newly added
files advance the table's next row id."""

from __future__ import annotations

from typing import Any

import pytest
from pyroaring import BitMap64

from calving.commit.maintenance.compaction import compact
from calving.commit.maintenance.compaction_plan import CompactionPolicy
from calving.commit.spec.partition import spec_builder
from calving.commit.spec.sort_order import SortOrder, asc, desc
from calving.commit.spec.transforms import IDENTITY, Transform
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.rewrite_manifests import RewriteManifests
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.table import Table, create_table
from calving.ingest.write.rewrite import local_rewrite
from tests.support.lineage import lineage
from tests.support.oracles import ALL_READERS
from tests.support.tables import COLUMNS, EVENTS, row, rows_as_tuples, write_partitioned

POLICY = CompactionPolicy(target_file_bytes=1 << 20, min_input_files=2, max_group_bytes=1 << 24)
Lineage = dict[Any, tuple[int | None, int | None]]


def _table(catalog: Any, name: str, sort_order: SortOrder | None = None) -> Table:
    spec = spec_builder(EVENTS, fields=[("region", IDENTITY)])
    # Merging from 3 manifests on: streaming commits move entries into merged manifests.
    props = {"commit.manifest.min-count-to-merge": "3"}
    if sort_order is None:
        return create_table(catalog, ("db", name), EVENTS, spec=spec, properties=props)
    return create_table(
        catalog, ("db", name), EVENTS, spec=spec, sort_order=sort_order, properties=props
    )


def _stream(table: Table, commits: int, seen: Lineage) -> dict[int, dict[str, Any]]:
    """Appends (ids in descending order within a commit) and deletes; after each commit
    the rows seen before keep their lineage and the new ones get new ids."""
    alive: dict[int, tuple[str, int, dict[str, Any]]] = {}
    for c in range(commits):
        base = c * 40
        rows = [row(base + 39 - i, region=("eu", "us")[i % 2]) for i in range(40)]
        written = write_partitioned(table, rows)
        table.commit_or_raise(FastAppend(tuple(f for f, _ in written)))
        for f, members in written:
            for pos, r in enumerate(members):
                alive[r["id"]] = (f.file_path, pos, r)
        deletes: dict[str, BitMap64] = {}
        for i in [i for i in sorted(alive) if i % 5 == c % 5][:4]:
            path, pos, _ = alive.pop(i)
            deletes.setdefault(path, BitMap64()).add(pos)
        table.commit_or_raise(RowDelta(deletes=deletes))
        now = lineage(table.metadata_location, "id")
        assert {k: v for k, v in seen.items() if k in now} == {
            k: now[k] for k in seen if k in now
        }, f"commit {c} changed the lineage of earlier rows"
        seen.clear()
        seen.update(now)
    return {i: r for i, (_, _, r) in alive.items()}


def _assert_unique_ids(lin: Lineage) -> None:
    ids = [row_id for row_id, _ in lin.values()]
    assert None not in ids and len(set(ids)) == len(ids)


def _check_readers(table: Table, expected: dict[int, dict[str, Any]]) -> None:
    want = rows_as_tuples(list(expected.values()))
    for name, reader in ALL_READERS.items():
        assert reader(table.metadata_location, COLUMNS) == want, name


def test_compaction_and_manifest_rewrite_keep_row_lineage(sqlite_catalog) -> None:
    table = _table(sqlite_catalog, "lineage")
    seen: Lineage = {}
    expected = _stream(table, 8, seen)
    before = lineage(table.metadata_location, "id")
    assert set(before) == set(expected)
    _assert_unique_ids(before)

    report = compact(table, POLICY, local_rewrite(table.io, POLICY.target_file_bytes))
    assert report.groups_failed == [] and report.groups_committed == 2
    assert lineage(table.metadata_location, "id") == before
    _check_readers(table, expected)

    next_row_id = table.metadata.next_row_id
    table.commit_or_raise(RewriteManifests())
    assert table.metadata.current_snapshot.added_rows == 0  # type: ignore[union-attr]  # current_snapshot is Optional; the table has one
    assert table.metadata.next_row_id == next_row_id
    assert lineage(table.metadata_location, "id") == before

    # Rows added afterwards get ids no earlier row has.
    new = [row(10_000 + i) for i in range(5)]
    table.commit_or_raise(FastAppend(tuple(f for f, _ in write_partitioned(table, new))))
    after = lineage(table.metadata_location, "id")
    assert {k: after[k] for k in before} == before
    _assert_unique_ids(after)
    assert all(after[r["id"]][0] >= next_row_id for r in new)  # type: ignore[operator]  # lineage values are Optional; every new row has a _row_id
    _check_readers(table, {**expected, **{r["id"]: r for r in new}})

    # Compacting compacted files again reads the stored lineage columns.
    report = compact(table, POLICY, local_rewrite(table.io, POLICY.target_file_bytes))
    assert report.groups_committed == 1  # eu: the compacted file and the new one
    assert lineage(table.metadata_location, "id") == after


class _SparkTasksHere:
    """The Spark rewriter's tasks, run in this process (no Spark session needed)."""

    parallelism = 1

    def rewrite_many(self, metadata: Any, jobs: Any) -> list[Any]:
        from calving.commit.spec import position_map as pm
        from calving.ingest.write.rewrite_spark import SparkRewriter, run_task

        tasks = SparkRewriter(None, {}, POLICY.target_file_bytes, parallelism=1).tasks(
            metadata, jobs
        )
        results = [run_task(t) for t in tasks]
        assert [r.error for r in results] == [None] * len(results)
        return [(r.added, pm.deserialize(r.position_map, "task")) for r in results]


@pytest.mark.parametrize("where", ["local", "spark-tasks"])
def test_compaction_sorts_by_the_sort_order_into_partition_directories(
    sqlite_catalog: Any, where: str
) -> None:
    # payload descending (nulls last), then id ascending: unlike the input order.
    order = SortOrder(1, (desc(4, Transform("truncate", 2)), asc(1)))
    table = _table(sqlite_catalog, "sorted", order)
    seen: Lineage = {}
    expected = _stream(table, 4, seen)
    before = lineage(table.metadata_location, "id")

    rewriter: Any = _SparkTasksHere()
    if where == "local":
        rewriter = local_rewrite(table.io, POLICY.target_file_bytes)
    report = compact(table, POLICY, rewriter)
    assert report.groups_failed == [] and report.groups_committed == 2
    assert lineage(table.metadata_location, "id") == before
    _check_readers(table, expected)
    import pyarrow.parquet as pq

    for entry in table.live_files().data.values():
        f = entry.data_file
        region = f.partition[0]
        assert f"/data/region={region}/rewrite-" in f.file_path
        assert f.sort_order_id == 1
        data = pq.read_table(f.file_path.removeprefix("file://")).to_pylist()
        keys = [(r["payload"][:2], r["id"]) for r in data]
        assert keys == sorted(keys, key=lambda k: (_desc(k[0]), k[1]))
        assert {r["region"] for r in data} == {region}


def _desc(text: str) -> tuple[int, ...]:
    return tuple(-b for b in text.encode()) + (1,)


def test_a_delete_during_a_sorted_rewrite_follows_the_permuted_map(sqlite_catalog) -> None:
    from collections.abc import Sequence

    import pyarrow.parquet as pq

    from calving.commit.maintenance.compaction_plan import RewriteGroup
    from calving.commit.spec.data_file import DataFile
    from calving.commit.spec.metadata import TableMetadata

    table = _table(sqlite_catalog, "sorted_carry", SortOrder(1, (desc(1),)))
    seen: Lineage = {}
    expected = _stream(table, 3, seen)
    before = lineage(table.metadata_location, "id")
    stream = Table.load(sqlite_catalog, ("db", "sorted_carry"))
    rewrite = local_rewrite(table.io, POLICY.target_file_bytes)
    deleted: list[int] = []

    def rewrite_while_the_stream_deletes(
        metadata: TableMetadata, group: RewriteGroup, inputs: Sequence[tuple[DataFile, BitMap64]]
    ) -> Any:
        out = rewrite(metadata, group, inputs)
        data_file, gone = inputs[0]
        positions = [p for p in range(data_file.record_count) if p not in gone][:3]
        ids = pq.read_table(data_file.file_path.removeprefix("file://"), columns=["id"])
        deleted.extend(ids.column(0)[p].as_py() for p in positions)
        stream.refresh()
        stream.commit_or_raise(RowDelta(deletes={data_file.file_path: BitMap64(positions)}))
        return out

    report = compact(table, POLICY, rewrite_while_the_stream_deletes)
    assert report.groups_failed == [] and report.deletes_carried == 6
    _check_readers(table, {i: r for i, r in expected.items() if i not in deleted})
    after = lineage(table.metadata_location, "id")
    assert after == {k: v for k, v in before.items() if k not in deleted}
