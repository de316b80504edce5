"""Python work the driver hands out as Spark tasks, one task an item, run by the Python
workers that the batch's write tasks use.

The index's jobs (the shards' rebuild, the separate shard stage) are lists of items
(groups of data files, groups of shards), each one task's work. They run here as a
``mapInArrow`` over ``spark.range(n, numPartitions=n)`` (task ``i`` takes item ``i``),
not as RDD jobs (``parallelize(...).mapPartitions``): on Spark 4 an RDD job's Python
functions run in a pool of Python workers of their own, beside the one ``mapInArrow``
jobs share. On a running stream that cost the first RDD job 1.6-2.2 s for a new worker
daemon on each executor (the write tasks' workers sat idle), and a shard one pool
cached was cold in the other.

The items travel with the function (pickled once, each task unpickling its own); the
results come back pickled in a binary column, in item order. Both ends are this
module: one encoder, one decoder.
"""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa

from calving.ingest.sink.worker_gc import at_task_end

_T = TypeVar("_T")
_R = TypeVar("_R")

_RESULT = "result"


def run_tasks(spark: Any, fn: Callable[[int, _T], Iterable[_R]], items: Sequence[_T]) -> list[_R]:
    """``fn(i, items[i])`` in task ``i``, on ``spark``'s executors; every result, in item
    order. A failed task fails the job (py4j raises on the driver)."""
    if not items:
        return []
    packed = [pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL) for item in items]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for i in batch.column(0).to_pylist():
                out = [
                    pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL)
                    for r in fn(i, pickle.loads(packed[i]))
                ]
                yield pa.RecordBatch.from_arrays([pa.array(out, pa.binary())], names=[_RESULT])

    count = len(items)
    frame = spark.range(0, count, 1, count).mapInArrow(at_task_end(run), f"{_RESULT} binary")
    return [pickle.loads(row[0]) for row in frame.collect()]


def slices(items: Sequence[_T], count: int) -> list[list[_T]]:
    """``items`` in ``count`` consecutive slices of near-equal size (as
    ``SparkContext.parallelize`` slices a list); empty slices are left out."""
    n = len(items)
    cut = [i * n // count for i in range(count + 1)]
    return [list(items[a:b]) for a, b in itertools.pairwise(cut) if b > a]
