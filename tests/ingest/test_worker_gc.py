"""Spark's Python workers freeze what survives a calving task, so the full collection
PySpark runs after each task scans only newer objects; a full collection still runs
every ``FULL_EVERY`` tasks, and nothing happens outside a Spark task."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from calving.ingest import worker_gc


@pytest.fixture
def in_task(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Calls as if in a Spark task; the generations each ``gc.collect`` asked for."""
    monkeypatch.setattr(worker_gc, "_in_spark_task", lambda: True)
    monkeypatch.setattr(worker_gc, "_tasks", 0)
    monkeypatch.setattr(worker_gc, "FULL_EVERY", 5)
    collected: list[int] = []
    real = gc.collect

    def counted(generation: int = 2) -> int:
        collected.append(generation)
        return real(generation)

    monkeypatch.setattr(gc, "collect", counted)
    yield collected
    gc.unfreeze()


def test_each_task_freezes_and_every_nth_collects_first(in_task: list[int]) -> None:
    worker_gc.task_done()
    assert in_task == [2] and gc.get_freeze_count() > 0
    for _ in range(worker_gc.FULL_EVERY - 1):
        worker_gc.task_done()
    assert in_task == [2], "no full collection between the first and the sixth task"
    worker_gc.task_done()
    assert in_task == [2, 2]


def test_what_a_task_leaves_alive_is_not_scanned_after_it(in_task: list[int]) -> None:
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
def test_a_wrapped_spark_task_freezes_its_worker(spark) -> None:  # type: ignore[no-untyped-def]
    """In a real Spark Python worker: once the wrapped function's output is used up, the
    worker's surviving objects are frozen (counted in the same task)."""

    def probe(items: Iterator[int]) -> Iterator[int]:
        yield from worker_gc.at_task_end(lambda xs: (x * 2 for x in xs))(items)
        yield -gc.get_freeze_count()

    out = spark.sparkContext.parallelize([1, 2, 3], 1).mapPartitions(probe).collect()
    assert out[:3] == [2, 4, 6]
    assert out[3] < -10_000, f"worker froze {-out[3]} objects"
    assert gc.get_freeze_count() == 0, "the driver is left alone"
