"""``spark_tasks.run_tasks``: one item a task, results in item order, on the Python
workers that ``mapInArrow`` jobs (the write tasks) use, not the RDD jobs' pool."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from calving.ingest.sink.spark_tasks import run_tasks, slices

pytestmark = pytest.mark.integration


def _pid_and_item(task: int, item: tuple[str, int]) -> Iterator[tuple[int, str, int, int]]:
    yield task, item[0], item[1], os.getpid()


def _fail(task: int, item: int) -> Iterator[int]:
    if item == 2:
        raise ValueError(f"item {item} is bad")
    yield item


def _write_task_pids(spark: Any) -> set[int]:
    """The Python workers a two-task ``mapInArrow`` job ran in."""

    def pids(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            pass
        yield pa.RecordBatch.from_arrays([pa.array([os.getpid()], pa.int64())], names=["pid"])

    return {r[0] for r in spark.range(0, 2, 1, 2).mapInArrow(pids, "pid long").collect()}


def test_items_run_one_a_task_and_come_back_in_order(spark: Any) -> None:
    items = [(f"item-{i}", i * i) for i in range(7)]  # more items than cores
    out = run_tasks(spark, _pid_and_item, items)
    assert [(t, name, v) for t, name, v, _ in out] == [(i, n, v) for i, (n, v) in enumerate(items)]
    assert run_tasks(spark, _pid_and_item, []) == []


def test_the_tasks_run_on_the_write_tasks_python_workers(spark: Any) -> None:
    """Spark 4 runs an RDD job's Python functions in a worker pool of its own; the
    index's jobs must share the write tasks' workers (and their cached shards)."""
    written = _write_task_pids(spark)
    ours = {pid for *_, pid in run_tasks(spark, _pid_and_item, [("a", 1), ("b", 2)])}
    assert ours & written
    rdd = set(spark.sparkContext.parallelize([0, 1], 2).map(lambda _: os.getpid()).collect())
    assert not rdd & written  # why run_tasks is not an RDD job


def test_a_failing_item_fails_the_job(spark: Any) -> None:
    with pytest.raises(Exception, match="item 2 is bad"):
        run_tasks(spark, _fail, [1, 2, 3])


def test_slices_are_consecutive_and_near_equal() -> None:
    assert slices(list(range(7)), 3) == [[0, 1], [2, 3], [4, 5, 6]]
    assert slices([1, 2], 4) == [[1], [2]]
    assert slices([], 2) == []
