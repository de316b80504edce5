"""calving's Python functions as Spark tasks, on Python workers of their own.

Spark keeps a pool of Python workers per set of environment variables a function
carries. ``map_in_arrow`` (every write stage of the sink) and ``run_tasks`` (the
index's jobs) create their functions with ``CALVING_PYTHON_WORKERS`` set, so they share
one pool, apart from every other Python function: a fused task's Kafka reader (a
Python data source) takes a worker of the other pool. Before, the reader and the write
function of a task each took a worker of one pool, a batch's step ran in either, and
each executor kept two copies of the index shards (a profile of a stream's steps found
four workers stepping shards on two one-core executors).

The index's jobs are lists of items (groups of data files, groups of shards). They
run as a ``mapInArrow`` over a local relation of the pickled items (``spark.
createDataFrame`` of an Arrow table: one row an item, sliced over at most one task a
core, in order, each task receiving only its own rows), not as RDD jobs
(``parallelize(...).mapPartitions``): on Spark 4 an RDD job's Python functions run in a
pool of their own too, so on a running stream the first RDD job waited 1.6-2.2 s for a
new worker daemon on each executor, and a shard one pool cached was cold in the other.
Results come back pickled in a binary column, in item order: one encoder, one decoder.
"""

from __future__ import annotations

import itertools
import pickle
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa

from calving.ingest.sink.worker_gc import at_task_end

Batches = Iterator[pa.RecordBatch]
_T = TypeVar("_T")
_R = TypeVar("_R")

_TASK, _ITEM, _RESULT = "task", "item", "result"

#: The environment variable that puts calving's functions in a Python worker pool of
#: their own (set while one is created: a function carries the variables of its time).
POOL_ENV = "CALVING_PYTHON_WORKERS"
_POOL_LOCK = threading.Lock()


def map_in_arrow(frame: Any, fn: Callable[[Batches], Batches], schema: Any) -> Any:
    """``frame.mapInArrow(fn, schema)`` run by calving's Python workers (``fn`` wrapped
    by ``worker_gc.at_task_end``)."""
    environment = frame.sparkSession.sparkContext.environment
    with _POOL_LOCK:
        environment[POOL_ENV] = "1"
        try:
            return frame.mapInArrow(at_task_end(fn), schema)
        finally:
            environment.pop(POOL_ENV, None)


def run_tasks(spark: Any, fn: Callable[[int, _T], Iterable[_R]], items: Sequence[_T]) -> list[_R]:
    """``fn(i, items[i])`` for every item, in Spark tasks on ``spark``'s executors (at
    most one task a core: items beyond that share a task, in order); every result, in
    item order. A failed task fails the job (py4j raises on the driver)."""
    if not items:
        return []
    work = pa.table(
        {
            _TASK: pa.array(range(len(items)), pa.int64()),
            _ITEM: pa.array(
                [pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL) for item in items],
                pa.binary(),
            ),
        }
    )

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for i, packed in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                out = [
                    pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL)
                    for r in fn(i, pickle.loads(packed))
                ]
                yield pa.RecordBatch.from_arrays([pa.array(out, pa.binary())], names=[_RESULT])

    frame = map_in_arrow(spark.createDataFrame(work), run, f"{_RESULT} binary")
    return [pickle.loads(row[0]) for row in frame.collect()]


def slices(items: Sequence[_T], count: int) -> list[list[_T]]:
    """``items`` in ``count`` consecutive slices of near-equal size (as
    ``SparkContext.parallelize`` slices a list); empty slices are left out."""
    n = len(items)
    cut = [i * n // count for i in range(count + 1)]
    return [list(items[a:b]) for a, b in itertools.pairwise(cut) if b > a]
