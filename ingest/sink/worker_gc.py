"""Garbage collection in Spark's Python workers: what lives as long as the worker is not
scanned again after every task.

A reused PySpark worker runs a full ``gc.collect()`` after each task it runs
(``pyspark.daemon``). Its heap is mostly objects that live as long as the worker: the
modules it imported (pyspark, pyarrow, calving: about 111,000 objects), parsed plans,
decoders and caches. A full collection scans them all: 30 ms here on an idle machine,
90-130 ms on a busy 2-core one, after every task of every batch, beside the driver's
commit stage.

``task_done()``, called as a calving task ends (``at_task_end`` wraps a task function),
moves every object then alive into the permanent generation (``gc.freeze``), so the
collection after the task only scans what the task left. Every ``FULL_EVERY``-th task
unfreezes them instead, so that PySpark's collection after it scans everything and
reclaims the cyclic garbage that was frozen (at most that many tasks' worth waits for
it); that collection, like every full one, runs after the task has sent its output,
never inside a task. Reference counting frees everything else as usual. Outside a
Spark task (the driver, tests running tasks in process) it does nothing.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

#: Every this many tasks, the frozen objects are unfrozen for PySpark's collection.
FULL_EVERY = 50

_T = TypeVar("_T")
_tasks = 0


def _in_spark_task() -> bool:
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - pyspark is installed wherever tasks run
        return False
    return TaskContext.get() is not None


def task_done() -> None:
    """Freeze the worker's surviving objects after a task (see the module); every
    ``FULL_EVERY``-th call unfreezes them for the full collection that follows the
    task. No-op outside a Spark task."""
    global _tasks
    if not _in_spark_task():
        return
    _tasks += 1
    if _tasks % FULL_EVERY == 0:
        gc.unfreeze()
    else:
        gc.freeze()


def at_task_end(fn: Callable[..., Iterator[_T]]) -> Callable[..., Iterator[_T]]:
    """``fn`` (a ``mapInArrow``, ``mapPartitions`` or ``mapPartitionsWithIndex``
    function) calling ``task_done`` once its output is exhausted."""

    def run(*args: Any) -> Iterator[_T]:
        yield from fn(*args)
        task_done()

    return run
