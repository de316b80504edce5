"""Compaction groups rewritten as Spark tasks: two partitions' groups run as one job of
two tasks, commit one replace snapshot each and read back exactly; a group whose task
fails (an input file gone) comes back as its typed error naming the file, and the other
group still commits."""

from __future__ import annotations

import os
from typing import Any

import pytest

from calving.commit.maintenance.compaction import compact
from calving.commit.maintenance.compaction_plan import CompactionPolicy
from calving.commit.spec.partition import spec_builder
from calving.commit.spec.transforms import IDENTITY
from calving.ingest.write.rewrite_spark import RewriteTaskError, SparkRewriter
from tests.commit.maintenance.test_compaction import _check, _stream
from tests.support.tables import EVENTS, make_table

POLICY = CompactionPolicy(target_file_bytes=1 << 20, min_input_files=2, max_group_bytes=1 << 24)

pytestmark = [pytest.mark.integration]


def _partition_counts(table: Any) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for e in table.live_files().data.values():
        out[e.data_file.partition] = out.get(e.data_file.partition, 0) + 1
    return out


def test_groups_rewrite_as_spark_tasks(spark, sqlite_catalog) -> None:
    table = make_table(
        sqlite_catalog, "spark_rw", spec=spec_builder(EVENTS, fields=[("region", IDENTITY)])
    )
    expected = _stream(table, 8)
    rewriter = SparkRewriter(spark, {}, POLICY.target_file_bytes, parallelism=2)
    report = compact(table, POLICY, rewriter)
    assert report.groups_failed == [] and report.groups_committed == 2
    assert _partition_counts(table) == {("eu",): 1, ("us",): 1}
    assert table.live_files().dvs == {}
    _check(table, expected)


def test_a_failing_task_fails_only_its_group(spark, sqlite_catalog) -> None:
    table = make_table(
        sqlite_catalog, "spark_fail", spec=spec_builder(EVENTS, fields=[("region", IDENTITY)])
    )
    _stream(table, 6)
    gone = next(
        e.data_file.file_path
        for e in table.live_files().data.values()
        if e.data_file.partition == ("eu",)
    )
    os.remove(gone.removeprefix("file://"))
    report = compact(table, POLICY, SparkRewriter(spark, {}, POLICY.target_file_bytes))
    assert report.groups_committed == 1 and len(report.groups_failed) == 1
    assert RewriteTaskError.__name__ in report.groups_failed[0]
    assert os.path.basename(gone) in report.groups_failed[0]
    counts = _partition_counts(table)
    assert counts[("us",)] == 1 and counts[("eu",)] == 6
