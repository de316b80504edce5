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

``run_tasks(..., places=...)`` pins each item's task to an executor (``executors``):
the relation is made on the JVM (``SparkContext.makeRDD`` with each item's preferred
location, one partition an item), and the scheduler runs a task on its executor while
that executor is alive (waiting for it, when busy, up to ``spark.locality.wait``).
Items of more than ``PINNED_INLINE_BYTES`` in all go by a Spark broadcast instead (the
relation then carries only the item numbers), destroyed when the job ends. A
plain relation's tasks go to whichever executor offers first: Spark shuffles the
offers, so a job's task ``i`` lands on either of two executors from one job to the next.
"""

from __future__ import annotations

import itertools
import logging
import pickle
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa

from calving.ingest.sink.worker_gc import at_task_end

log = logging.getLogger(__name__)

Batches = Iterator[pa.RecordBatch]
_T = TypeVar("_T")
_R = TypeVar("_R")

_TASK, _ITEM, _RESULT = "task", "item", "result"

#: The environment variable that puts calving's functions in a Python worker pool of
#: their own (set while one is created: a function carries the variables of its time).
POOL_ENV = "CALVING_PYTHON_WORKERS"
_POOL_LOCK = threading.Lock()
#: Set once ``executors`` found Spark's scheduler API missing (warned once).
_UNPINNED: list[str] = []
#: Pinned items of up to this many bytes in all ride in the JVM relation; more go by
#: a broadcast. Medians of six no-op jobs on two workers, relation against broadcast:
#: two empty items 0.30 s against 0.37 s, two of 1 MB 0.35 s against 0.25 s, two of
#: 12 MB 0.79 s against 0.31 s (py4j's byte arrays cost more as items grow).
PINNED_INLINE_BYTES = 1 << 20


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


def run_tasks(
    spark: Any,
    fn: Callable[[int, _T], Iterable[_R]],
    items: Sequence[_T],
    places: Sequence[str] | None = None,
) -> list[_R]:
    """``fn(i, items[i])`` for every item, in Spark tasks on ``spark``'s executors (at
    most one task a core: items beyond that share a task, in order; with ``places``,
    one task an item, run on the executor ``places[i]`` names); every result, in item
    order. A failed task fails the job (py4j raises on the driver)."""
    if not items:
        return []
    if places is not None and len(places) != len(items):
        raise ValueError(f"{len(items)} items, {len(places)} places")
    packed = [pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL) for item in items]
    # Pinned items of many bytes go by broadcast: byte arrays through py4j cost more.
    shared = None
    if places is not None and sum(map(len, packed)) > PINNED_INLINE_BYTES:
        shared = spark.sparkContext.broadcast(packed)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for i, item in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                data = shared.value[i] if shared is not None else item
                out = [
                    pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL)
                    for r in fn(i, pickle.loads(data))
                ]
                yield pa.RecordBatch.from_arrays([pa.array(out, pa.binary())], names=[_RESULT])

    try:
        work = _relation(spark, [b""] * len(packed) if shared is not None else packed, places)
        frame = map_in_arrow(work, run, f"{_RESULT} binary")
        return [pickle.loads(row[0]) for row in frame.collect()]
    finally:
        if shared is not None:
            shared.destroy()


def _relation(spark: Any, packed: Sequence[bytes], places: Sequence[str] | None) -> Any:
    """The work relation: (task, item) rows, a local Arrow relation, or made on the JVM
    with each item's place (``_placed``)."""
    if places is not None:
        return _placed(spark, packed, places)
    return spark.createDataFrame(
        pa.table(
            {
                _TASK: pa.array(range(len(packed)), pa.int32()),
                _ITEM: pa.array(packed, pa.binary()),
            }
        )
    )


def _placed(spark: Any, packed: Sequence[bytes], places: Sequence[str]) -> Any:
    """The work relation made on the JVM: one partition an item, preferring its place."""
    from pyspark.sql import DataFrame
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    sc = spark.sparkContext
    jvm = sc._jvm
    seq = jvm.org.apache.spark.api.python.PythonUtils.toSeq
    pairs = jvm.java.util.ArrayList()
    for i, (item, place) in enumerate(zip(packed, places, strict=True)):
        values = sc._gateway.new_array(jvm.java.lang.Object, 2)
        values[0], values[1] = i, item  # py4j: Integer, byte[]
        where = jvm.java.util.ArrayList()
        where.add(place)
        pairs.add(jvm.scala.Tuple2(jvm.org.apache.spark.sql.RowFactory.create(values), seq(where)))
    any_ref = getattr(getattr(jvm.scala.reflect, "ClassTag$"), "MODULE$").AnyRef()
    rdd = sc._jsc.sc().makeRDD(seq(pairs), any_ref)
    schema = StructType([StructField(_TASK, IntegerType()), StructField(_ITEM, BinaryType())])
    jschema = spark._jsparkSession.parseDataType(schema.json())
    return DataFrame(spark._jsparkSession.createDataFrame(rdd.toJavaRDD(), jschema), spark)


def executors(spark: Any) -> list[str]:
    """The live executors as Spark task locations (``executor_<host>_<id>``), in the
    order of their ids; empty when Spark does not say (local mode: the driver's one)."""
    sc = spark.sparkContext
    try:
        context = sc._jsc.sc()
        ids = context.getExecutorIds()
        if ids.size() == 0:
            return []
        hosts: set[str] = set()
        block_managers = context.getExecutorMemoryStatus().keysIterator()
        while block_managers.hasNext():
            hosts.add(str(block_managers.next()).rsplit(":", 1)[0])
        host_of: dict[str, str] = {}
        for host in hosts:
            alive = context.taskScheduler().getExecutorsAliveOnHost(host)
            if alive.isDefined():
                on_host = alive.get().iterator()
                while on_host.hasNext():
                    host_of[str(on_host.next())] = host
        named = [str(ids.apply(i)) for i in range(ids.size())]
    except Exception as err:  # noqa: BLE001 -- py4j: Spark's internals moved; no pinning
        if not _UNPINNED:
            _UNPINNED.append(type(err).__name__)
            log.warning("executor locations unavailable (%s): tasks run unpinned", _UNPINNED[0])
        return []
    named.sort(key=lambda e: (not e.isdigit(), int(e) if e.isdigit() else 0, e))
    return [f"executor_{host_of[e]}_{e}" for e in named if e in host_of]


def pinned_groups(
    items: Sequence[_T], key: Callable[[_T], int], places: Sequence[str], tasks: int
) -> tuple[list[tuple[int, list[_T]]], list[str]]:
    """``items`` grouped by owner: an item of key ``k`` (a shard number) belongs to
    place ``k mod n`` (``places``: ``n`` executors, by id), which runs it in one of up to
    ``tasks // n`` tasks (at least one), so the same key runs in the same place, job
    after job, while the executors stay. The groups, each with its owner's number, in
    owner order, and their places (for ``run_tasks``)."""
    n = len(places)
    per = max(1, tasks // n)
    grouped: dict[tuple[int, int], list[_T]] = {}
    for item in items:
        k = key(item)
        grouped.setdefault((k % n, (k // n) % per), []).append(item)
    keys = sorted(grouped)
    return [(k[0], grouped[k]) for k in keys], [places[k[0]] for k in keys]


def slices(items: Sequence[_T], count: int) -> list[list[_T]]:
    """``items`` in ``count`` consecutive slices of near-equal size (as
    ``SparkContext.parallelize`` slices a list); empty slices are left out."""
    n = len(items)
    cut = [i * n // count for i in range(count + 1)]
    return [list(items[a:b]) for a, b in itertools.pairwise(cut) if b > a]
