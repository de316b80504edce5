"""Compaction planning: candidates per partition, bounded groups, DV-heavy files alone."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.maintenance.compaction_plan import (
    CompactionPolicy,
    partition_with_small_files,
    plan_compaction,
)
from calving.commit.spec.data_file import DataFile, FileContent

MB = 1024 * 1024


def _file(
    name: str, size: int, rows: int = 1000, partition: tuple[object, ...] = ("a",)
) -> DataFile:
    return DataFile(
        FileContent.DATA, f"s3://t/data/{name}.parquet", "PARQUET", partition, rows, size
    )


POLICY = CompactionPolicy(target_file_bytes=100 * MB, min_input_files=3, max_group_bytes=250 * MB)


def test_small_files_group_per_partition_and_large_clean_files_stay() -> None:
    files = [_file(f"a{i}", 10 * MB) for i in range(4)] + [
        _file(f"b{i}", 10 * MB, partition=("b",)) for i in range(2)
    ] + [_file("big", 99 * MB)]  # fmt: skip
    groups = plan_compaction(files, {}, POLICY)
    assert [(g.partition, sorted(g.paths)) for g in groups] == [
        (("a",), sorted(f.file_path for f in files[:4]))
    ]  # b has 2 < min_input_files small files; 'big' is above 75 % of target


def test_a_file_with_many_deleted_rows_is_rewritten_even_alone() -> None:
    heavy = _file("heavy", 90 * MB, rows=1000)
    groups = plan_compaction([heavy, _file("clean", 90 * MB)], {heavy.file_path: 300}, POLICY)
    assert [g.paths for g in groups] == [(heavy.file_path,)]
    assert groups[0].live_bytes == 63 * MB


def test_a_partition_with_small_files_counts_one_partition_and_spec_at_a_time() -> None:
    spread = [_file(f"p{i}", 10 * MB, partition=(str(i),)) for i in range(5)]
    assert not partition_with_small_files(spread, POLICY, 2)  # five partitions of one each
    large = [_file(f"l{i}", 80 * MB) for i in range(5)]  # above 75 % of the target
    assert not partition_with_small_files(large, POLICY, 2)
    other_spec = dataclasses.replace(spread[0], spec_id=1)
    assert not partition_with_small_files([spread[0], other_spec], POLICY, 2)
    assert partition_with_small_files(
        [*spread, _file("p0-again", 1 * MB, partition=("0",))], POLICY, 2
    )
    assert not partition_with_small_files([], POLICY, 1)


def test_due_small_files_plans_only_the_partitions_holding_that_many() -> None:
    files = [_file(f"a{i}", 10 * MB) for i in range(4)] + [
        _file(f"b{i}", 10 * MB, partition=("b",)) for i in range(3)
    ]  # fmt: skip
    due = dataclasses.replace(POLICY, due_small_files=4)
    assert [g.partition for g in plan_compaction(files, {}, POLICY)] == [("a",), ("b",)]
    assert [g.partition for g in plan_compaction(files, {}, due)] == [("a",)]
    with pytest.raises(ValueError, match="due_small_files"):
        dataclasses.replace(POLICY, due_small_files=-1)


def test_bad_policies_are_refused() -> None:
    for bad in (
        {"target_file_bytes": 0},
        {"min_input_files": 0},
        {"delete_ratio": 0},
        {"delete_ratio": 1.5},
        {"max_group_bytes": 1},
    ):
        with pytest.raises(ValueError):
            CompactionPolicy(**bad)


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 120), min_size=0, max_size=40),
    deleted=st.lists(st.integers(0, 1000), min_size=40, max_size=40),
)
def test_groups_are_disjoint_bounded_and_within_one_partition(sizes, deleted) -> None:
    files = [_file(f"f{i}", s * MB, partition=(i % 3,)) for i, s in enumerate(sizes)]
    dv = {f.file_path: d for f, d in zip(files, deleted)}
    groups = plan_compaction(files, dv, POLICY)
    seen: set[str] = set()
    for g in groups:
        assert not seen & set(g.paths)
        seen |= set(g.paths)
        assert {c.data_file.partition for c in g.files} == {g.partition}
        assert g.live_bytes <= POLICY.max_group_bytes or len(g.files) == 1
        heavy = any(c.delete_ratio > POLICY.delete_ratio for c in g.files)
        assert len(g.files) >= POLICY.min_input_files or heavy
