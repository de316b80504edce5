"""Sharded mode's write-task steps: their time on a batch's critical path, with the
cache's background work between tasks against without, in one run.

A keyed table (``id`` long, a string, a long; ``--keys`` rows in files of 1M) is
sharded (``--shards``) and upserted by ``--batches`` batches of ``--batch-keys``
random existing keys (one in twenty deleted instead), split by key parity between two
write tasks, each with a cache of its own as two Python workers would have
(``shard_lookup.CACHE`` swapped per task). Each batch's two ``run_task_steps`` run one
after the other here; on a cluster they run in parallel, so a batch's critical path is
the longer of the two. The driver commits each batch (``Coordinator.prepare`` and
``finish``, untimed). Two sides on the same keys, each on a table of its own:

* ``background``: each task starts with ``read_ahead_in_background`` and ends with
  ``tidy_in_background`` (as the write tasks do); both are joined and timed apart (off
  the critical path on a cluster: the task waits for its records, or the worker for
  its next task, meanwhile);
* ``plain``: neither (the peer): the steps bring their shards forward and the lookups
  merge.

Figures: the steps' critical path summed over the batches after two warm-up batches
(the first has no steps: the separate stage), and the CPU-seconds of the steps and the
background work together (it moves work; it does not save it).

    python -m tests.bench.shard_steps [--keys N] [--shards S] [--batch-keys K] [--batches B]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tests.bench.figures import Figure

QUICK = {"keys": 2_000_000, "shards": 4, "batch_keys": 50_000, "batches": 32}
FULL = {"keys": 10_000_000, "shards": 16, "batch_keys": 100_000, "batches": 48}
WARM = 2  # batches left out: the first goes to the separate stage, the next loads shards


def _table(root: Path, keys: int) -> Any:
    """The keyed CDC table ``index_sharded`` streams into, in sharded mode."""
    from calving.commit.table.actions.update_properties import UpdateProperties
    from tests.bench.index_sharded import _cdc_table
    from tests.bench.streaming import Catalogs

    table = _cdc_table(Catalogs.at(root), keys)
    properties = {"calving.index.mode": "sharded", "calving.index.driver-step-keys": "0"}
    table.commit_or_raise(UpdateProperties(properties))
    return table


def _task_files(table: Any, ids: np.ndarray, version: int) -> tuple[Any, pa.Table, pa.Table]:
    """One write task's share of a batch: a data file upserting all but one in twenty
    of ``ids`` (with its keys), and the keys it deletes."""
    from calving.commit.spec.arrow import schema_to_arrow
    from calving.ingest.write.parquet_writer import write_data_file
    from tests.support.cdc import SCHEMA

    gone, kept = ids[: len(ids) // 20], ids[len(ids) // 20 :]
    upserted = pa.table({"id": pa.array(kept, pa.int64())})
    columns = {
        "id": kept,
        "status": pa.array(["u"] * len(kept)),
        "version": np.full(len(kept), version),
    }
    rows = pa.table(columns, schema=schema_to_arrow(SCHEMA))
    location = f"{table.metadata.location}/data/{uuid.uuid4()}.parquet"
    data_file = write_data_file(table.io, location, rows, SCHEMA)
    return data_file, upserted, pa.table({"id": pa.array(gone, pa.int64())})


def _commit(coordinator: Any, table: Any, messages: list[Any], start: int, end: int) -> None:
    from calving.commit.table.ledger import OffsetRange
    from calving.ingest.sink.coordinator import ParsedMessages

    parsed = ParsedMessages.of(messages)
    parsed.ranges[("events", 0)] = OffsetRange(start, end)
    prepared = coordinator.prepare(end, parsed)
    outcome = table.commit(prepared.action, from_cache=True)
    if coordinator.finish(prepared, outcome).outcome != "committed":
        raise RuntimeError(f"the batch ending at {end} did not commit")


def run_side(
    root: Path, background: bool, keys: int, shards: int, batch_keys: int, batches: int
) -> dict[str, float]:
    """One side: the steps' critical path (seconds), their CPU-seconds with the
    background work's, and the background work's wall time, over the batches after the
    warm-up."""
    from calving.commit.index import shard_lookup
    from calving.commit.index.shard_lookup import LocalResolver, ShardCache
    from calving.commit.index.sharded import ShardedIndex
    from calving.commit.index.task_steps import run_task_steps
    from calving.ingest.sink.coordinator import Coordinator
    from calving.ingest.sink.messages import DataFileWritten, KeysDeleted, ShardStepsTaken

    table = _table(root, keys)
    coordinator = Coordinator(table, "bench", index_save_every=1)
    coordinator.sharded = ShardedIndex(table.io, LocalResolver(), shard_count=shards)
    caches = [ShardCache(), ShardCache()]
    rng = np.random.default_rng(25)  # the same keys on both sides
    saved = shard_lookup.CACHE
    critical = cpu = aside = 0.0
    offset = 0
    try:
        for b in range(batches):
            job = coordinator.shard_job() if b else None
            ids = np.unique(rng.integers(0, keys, batch_keys))
            messages: list[Any] = []
            longest = 0.0
            for task in (0, 1):
                data_file, upserted, deleted = _task_files(table, ids[ids % 2 == task], b)
                messages += [DataFileWritten(data_file, upserted), KeysDeleted(deleted)]
                if job is None:
                    continue
                shard_lookup.CACHE = caches[task]  # this task's worker
                wall, process = time.perf_counter(), time.process_time()
                if background:
                    shard_lookup.read_ahead_in_background(job, task)
                    caches[task].settle()
                ahead = time.perf_counter()
                steps = run_task_steps(job, [(data_file, upserted)], [deleted], task)
                stepped = time.perf_counter() - ahead
                if background:
                    shard_lookup.tidy_in_background()
                    caches[task].settle()
                if b >= WARM:
                    longest = max(longest, stepped)
                    cpu += time.process_time() - process
                    aside += time.perf_counter() - wall - stepped
                if steps.unreadable:
                    raise RuntimeError(f"batch {b}: {steps.unreadable}")
                messages.append(ShardStepsTaken(steps))
            critical += longest
            _commit(coordinator, table, messages, offset, offset + len(ids))
            offset += len(ids)
    finally:
        shard_lookup.CACHE = saved
    merged = sum(c.merged for c in caches)
    return {"critical_s": critical, "cpu_s": cpu, "aside_s": aside, "merged": merged}


def figures(quick: bool, **sizes: int) -> list[Figure]:
    size = {**(QUICK if quick else FULL), **sizes}
    with tempfile.TemporaryDirectory(prefix="calving-shard-steps-") as tmp:
        sides = {}
        for name in ("plain", "background"):
            (Path(tmp) / name).mkdir()
            sides[name] = run_side(Path(tmp) / name, name == "background", **size)
    t, p = sides["background"], sides["plain"]
    label = (
        f"write-task shard steps, {size['keys'] / 1e6:g}M keys, {size['shards']} shards, "
        f"{size['batch_keys']:,} keys a batch, {size['batches'] - WARM} batches"
    )
    return [
        Figure(
            "shard_steps",
            f"{label}: critical path, s",
            t["critical_s"],
            "no background work",
            p["critical_s"],
            note=f"read-aheads and tidies between tasks: {t['aside_s']:.2f} s, "
            f"{t['merged']} full merges",
        ),
        Figure(
            "shard_steps",
            f"{label}: CPU-s of the steps and background work",
            t["cpu_s"],
            "no background work",
            p["cpu_s"],
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for key, value in QUICK.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, default=value)
    args = parser.parse_args(argv)
    from tests.bench.figures import render

    print(render(figures(True, **{k: getattr(args, k) for k in QUICK})))


if __name__ == "__main__":
    main()
