"""Spark's Python workers freeze what survives a calving task, so the full collection
PySpark runs after each task scans only newer objects; a full collection still runs
every ``FULL_EVERY`` tasks, and nothing happens outside a Spark task."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from calving.ingest.sink import worker_gc


@pytest.fixture
def in_task(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Calls as if in a Spark task, every fifth one unfreezing; the test's process is
    unfrozen after it."""
    monkeypatch.setattr(worker_gc, "_in_spark_task", lambda: True)
    monkeypatch.setattr(worker_gc, "_tasks", 0)
    monkeypatch.setattr(worker_gc, "FULL_EVERY", 5)
    yield
    gc.unfreeze()


def test_each_task_freezes_and_every_nth_unfreezes_for_the_full_collection(
    in_task: None,
) -> None:
    """Tasks 1-4 freeze, the 5th unfreezes (PySpark's collection after it then scans
    and reclaims everything, outside the task), the 6th freezes again; the worker's
    own code never runs a collection inside a task."""
    frozen = []
    for _ in range(6):
        worker_gc.task_done()
        frozen.append(gc.get_freeze_count() > 0)
    assert frozen == [True, True, True, True, False, True]


def test_what_a_task_leaves_alive_is_not_scanned_after_it(in_task: None) -> None:
    """The objects alive at a task's end leave the collector's generations: the
    collection PySpark runs next has only what was made since."""
    kept = [[i] for i in range(10_000)]  # 10,001 tracked containers
    assert len(gc.get_objects()) > len(kept)
    worker_gc.task_done()
    assert len(gc.get_objects()) < 100
    assert gc.get_freeze_count() > len(kept)


def test_nothing_happens_outside_a_spark_task() -> None:
    before = gc.get_freeze_count()
    worker_gc.task_done()
    assert gc.get_freeze_count() == before == 0


@pytest.mark.integration
def test_a_wrapped_spark_task_freezes_its_worker(spark: Any) -> None:
    """In a real Spark Python worker: once the wrapped function's output is used up, the
    worker's surviving objects are frozen (counted in the same task)."""

    def probe(items: Iterator[int]) -> Iterator[int]:
        yield from worker_gc.at_task_end(lambda xs: (x * 2 for x in xs))(items)
        yield -gc.get_freeze_count()

    out = spark.sparkContext.parallelize([1, 2, 3], 1).mapPartitions(probe).collect()
    assert out[:3] == [2, 4, 6]
    assert out[3] < -10_000, f"worker froze {-out[3]} objects"
    assert gc.get_freeze_count() == 0, "the driver is left alone"
