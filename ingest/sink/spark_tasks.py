"""Python work the driver hands out as Spark tasks, run by the Python workers that the
batch's write tasks use.

The index's jobs (the shards' rebuild, the separate shard stage) are lists of items
(groups of data files, groups of shards). They run here as a ``mapInArrow`` over a
local relation of the pickled items (``spark.createDataFrame`` of an Arrow table: one
row an item, sliced over at most one task a core, in order, each task receiving only
its own rows), not as RDD jobs (``parallelize(...).mapPartitions``): on Spark 4 an RDD
job's Python functions run in a pool of Python workers of their own, beside the one
``mapInArrow`` jobs share. On a running stream that cost the first RDD job 1.6-2.2 s
for a new worker daemon on each executor (the write tasks' workers sat idle), and a
shard one pool cached was cold in the other.

Results come back pickled in a binary column, in item order. Both ends are this
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

_TASK, _ITEM, _RESULT = "task", "item", "result"


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

    frame = spark.createDataFrame(work).mapInArrow(at_task_end(run), f"{_RESULT} binary")
    return [pickle.loads(row[0]) for row in frame.collect()]


def slices(items: Sequence[_T], count: int) -> list[list[_T]]:
    """``items`` in ``count`` consecutive slices of near-equal size (as
    ``SparkContext.parallelize`` slices a list); empty slices are left out."""
    n = len(items)
    cut = [i * n // count for i in range(count + 1)]
    return [list(items[a:b]) for a, b in itertools.pairwise(cut) if b > a]
