"""The child of ``tests/ingest/sink/test_shard_owners.py``: on a standalone cluster of
two one-core workers, pins tasks to executors (``spark_tasks.run_tasks`` with places)
and commits keyed upserts in sharded mode through the separate stage, whose steps run
on the shards' owners; prints what it saw as one JSON line.

    python -m tests.support.shard_owners <spark://...> <root>
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

KEYS = 200_000
ROWS_PER_FILE = 50_000
BATCH_ROWS = 25_000  # above shard_stage.SMALL_BATCH_ROWS: one task a core
BATCHES = 5
SHARDS = 4
#: The count the table is resharded to after ``BATCHES`` batches, and the batches then.
RESHARDED = 8
BATCHES_AFTER = 2


def _executor_process(task: int, item: int) -> list[tuple[int, int]]:
    """(item, the pid of the executor JVM running this task: the Python worker's
    daemon's parent)."""

    def parent(pid: int) -> int:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])

    return [(item, parent(parent(os.getpid())))]


def _cached(task: int, item: int) -> list[tuple[int, list[int], int]]:
    from calving.commit.index.shard_lookup import CACHE

    return [(item, CACHE.shards(), CACHE.tidied)]


def _executors(spark: Any, count: int) -> list[str]:
    from calving.ingest.sink.spark_tasks import executors

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        places = executors(spark)
        if len(places) >= count:
            return places
        time.sleep(0.5)
    raise RuntimeError(f"{count} executors did not register: {executors(spark)}")


def main(url: str, root: Path) -> None:
    from calving.commit.index.sharded import ShardedIndex
    from calving.commit.table.actions.update_properties import UpdateProperties
    from calving.commit.table.ledger import OffsetRange
    from calving.ingest.sink import spark_tasks
    from calving.ingest.sink.coordinator import Coordinator, ParsedMessages
    from calving.ingest.sink.shard_stage import (
        SparkReshard,
        SparkShardRebuild,
        SparkShardResolver,
    )
    from calving.ingest.sink.spark_tasks import run_tasks
    from tests.bench.index_rebuild import build_table, load
    from tests.bench.index_sharded import _batch
    from tests.support.spark import local_session

    spark = local_session(
        "calving-shard-owners",
        master=url,
        conf={"spark.executor.cores": "1", "spark.cores.max": "2", "spark.executor.memory": "512m"},
    )
    places = _executors(spark, 2)
    pinned = [run_tasks(spark, _executor_process, [0, 1], places) for _ in range(3)]
    pinned.append(run_tasks(spark, _executor_process, [0, 1], places[::-1]))

    uri, warehouse = build_table(root, KEYS, ROWS_PER_FILE)
    table = load(uri, warehouse)
    # The shards rebuilt by pinned Spark tasks (this small table's would be in the driver).
    table.commit_or_raise(UpdateProperties({"calving.index.executor-rebuild-rows": "0"}))
    initial = table.metadata_location
    props = dict(table.io.properties)
    steps: list[dict[str, int]] = []
    upserted: list[list[int]] = []

    def writer() -> tuple[Coordinator, ShardedIndex]:
        """A (re)started writer: a coordinator with sharded mode's Spark parts."""
        coordinator = Coordinator(table, "owners", index_save_every=1_000_000)
        sharded = ShardedIndex(
            table.io,
            SparkShardResolver(spark),
            SparkShardRebuild(spark, props),
            shard_count=SHARDS,
            io_properties=props,
            reshard=SparkReshard(spark, props),
        )
        coordinator.sharded = sharded
        resolve = sharded.resolve

        def watched(*a: Any, **kw: Any) -> Any:
            got = resolve(*a, **kw)
            steps.append({"shards": len(got.results), "hits": got.cache_hits})
            return got

        sharded.resolve = watched  # type: ignore[method-assign]  # the test's probe
        return coordinator, sharded

    def batches(coordinator: Coordinator, first: int, count: int) -> None:
        for i in range(first, first + count):
            data_file, keys = _batch(table, BATCH_ROWS, i + 1)
            parsed = ParsedMessages()
            parsed.files.append((data_file, keys))
            parsed.ranges[("owners", 0)] = OffsetRange(i * BATCH_ROWS, (i + 1) * BATCH_ROWS)
            stats = coordinator.commit_batch(i, parsed)
            if stats.outcome != "committed":
                raise AssertionError(stats)
            upserted.append(keys.column("id").to_pylist())

    coordinator, sharded = writer()
    batches(coordinator, 0, BATCHES)
    cached = run_tasks(spark, _cached, [0, 1], places)
    # A restart after calving.index.shards changed: the shards split on their owners.
    # Its jobs' items go by broadcast (every size past 0 bytes), the earlier ones' rode
    # in the pinned relation: both ways pin alike.
    spark_tasks.PINNED_INLINE_BYTES = 0
    table.commit_or_raise(UpdateProperties({"calving.index.shards": str(RESHARDED)}))
    table.refresh()
    restarted, resharded = writer()
    batches(restarted, BATCHES, BATCHES_AFTER)
    cached_after = run_tasks(spark, _cached, [0, 1], places)
    spark.stop()
    out = {
        "places": places,
        "pinned": pinned,
        "steps": steps,
        "cached": cached,
        "cached_after": cached_after,
        "reshards": [resharded.reshards, resharded.rebuilds],
        "reshard_places": [resharded.reshard.in_driver, resharded.reshard.on_executors]
        if isinstance(resharded.reshard, SparkReshard)
        else [],
        "initial": initial,
        "final": table.refresh().metadata_location,
        "upserted": upserted,
        "rebuilds": sharded.rebuilds,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
