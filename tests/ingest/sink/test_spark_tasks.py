"""``spark_tasks``: ``run_tasks`` runs one item a task, results in item order; it and
``map_in_arrow`` (the write stages) run on Python workers of their own, apart from
other ``mapInArrow`` functions (such as the Kafka source's reader) and RDD jobs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from calving.ingest.sink import spark_tasks
from calving.ingest.sink.spark_tasks import map_in_arrow, pinned_groups, run_tasks, slices

pytestmark = pytest.mark.integration


def _pid_and_item(task: int, item: tuple[str, int]) -> Iterator[tuple[int, str, int, int]]:
    yield task, item[0], item[1], os.getpid()


def _fail(task: int, item: int) -> Iterator[int]:
    if item == 2:
        raise ValueError(f"item {item} is bad")
    yield item


def _pids(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        pass
    yield pa.RecordBatch.from_arrays([pa.array([os.getpid()], pa.int64())], names=["pid"])


def _job_pids(spark: Any, ours: bool) -> set[int]:
    """The Python workers a two-task ``mapInArrow`` job ran in (``ours``: made by
    ``map_in_arrow``, as the write stages are)."""
    frame = spark.range(0, 2, 1, 2)
    job = map_in_arrow(frame, _pids, "pid long") if ours else frame.mapInArrow(_pids, "pid long")
    return {r[0] for r in job.collect()}


def test_items_run_one_a_task_and_come_back_in_order(spark: Any) -> None:
    items = [(f"item-{i}", i * i) for i in range(7)]  # more items than cores
    out = run_tasks(spark, _pid_and_item, items)
    assert [(t, name, v) for t, name, v, _ in out] == [(i, n, v) for i, (n, v) in enumerate(items)]
    assert run_tasks(spark, _pid_and_item, []) == []


def test_the_tasks_run_on_the_write_stages_python_workers_and_no_others(spark: Any) -> None:
    """The index's jobs share the write stages' Python workers (and their cached
    shards); no other Python function of a task (the Kafka source's reader, a plain
    ``mapInArrow``, an RDD job) takes one of them."""
    written = _job_pids(spark, ours=True)
    ours = {pid for *_, pid in run_tasks(spark, _pid_and_item, [("a", 1), ("b", 2)])}
    assert ours & written
    others = _job_pids(spark, ours=False)
    rdd = set(spark.sparkContext.parallelize([0, 1], 2).map(lambda _: os.getpid()).collect())
    assert not (others | rdd) & (written | ours)
    assert "CALVING_PYTHON_WORKERS" not in spark.sparkContext.environment


@pytest.mark.parametrize("inline_bytes", [1 << 30, 0], ids=["in-the-relation", "broadcast"])
def test_pinned_items_come_back_in_order_inline_or_by_broadcast(
    spark: Any, inline_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pinned items (places that local mode does not have: they run on its one
    executor) ride in the JVM relation, or past ``PINNED_INLINE_BYTES`` by a broadcast
    that the job destroys at its end, and come back in order either way; a failing
    item fails the job and destroys the broadcast too."""
    monkeypatch.setattr(spark_tasks, "PINNED_INLINE_BYTES", inline_bytes)
    made: list[Any] = []
    broadcast = spark.sparkContext.broadcast

    def counted(value: Any) -> Any:
        made.append(broadcast(value))
        return made[-1]

    monkeypatch.setattr(spark.sparkContext, "broadcast", counted)
    items = [(f"item-{i}", "x" * 1000 * i) for i in range(3)]
    places = [f"executor_127.0.0.1_{i}" for i in range(3)]
    out = run_tasks(spark, _pid_and_item, items, places)
    assert [(t, name, v) for t, name, v, _ in out] == [(i, n, v) for i, (n, v) in enumerate(items)]
    with pytest.raises(Exception, match="item 2 is bad"):
        run_tasks(spark, _fail, [1, 2, 3], places)
    assert len(made) == (0 if inline_bytes else 2)
    for shared in made:  # destroyed: its file is gone from the driver
        with pytest.raises(FileNotFoundError):
            shared.value  # noqa: B018


def test_a_failing_item_fails_the_job(spark: Any) -> None:
    with pytest.raises(Exception, match="item 2 is bad"):
        run_tasks(spark, _fail, [1, 2, 3])


def test_slices_are_consecutive_and_near_equal() -> None:
    assert slices(list(range(7)), 3) == [[0, 1], [2, 3], [4, 5, 6]]
    assert slices([1, 2], 4) == [[1], [2]]
    assert slices([], 2) == []


PLACES = ["executor_127.0.0.1_0", "executor_127.0.0.1_1"]


def test_pinned_groups_put_key_k_on_the_k_mod_n_th_place() -> None:
    groups, places = pinned_groups([5, 0, 1, 2, 4], int, PLACES, 2)
    assert groups == [(0, [0, 2, 4]), (1, [5, 1])]
    assert places == PLACES


def test_an_owner_splits_its_keys_over_its_share_of_the_tasks() -> None:
    groups, places = pinned_groups(list(range(8)), int, PLACES, 4)
    assert groups == [(0, [0, 4]), (0, [2, 6]), (1, [1, 5]), (1, [3, 7])]
    assert places == [PLACES[0], PLACES[0], PLACES[1], PLACES[1]]


def test_an_owner_without_a_key_gets_no_task() -> None:
    groups, places = pinned_groups([0, 2], int, [*PLACES, "executor_h_2"], 1)
    assert groups == [(0, [0]), (2, [2])]
    assert places == [PLACES[0], "executor_h_2"]
