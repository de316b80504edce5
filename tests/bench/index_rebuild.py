"""Index rebuild on Spark executors, as shards, against the driver's rebuild.

One keyed table (``id`` long, a string and a double; ``--keys`` rows in files of
``--rows-per-file``; one file in two with a deletion vector on 1% of its rows) is
rebuilt three ways, each measured in the same run:

* ``driver``: ``store.build_from_table`` in this process (the driver-resident index's
  rebuild today; 4 reader threads) -- the peer;
* ``cluster x1`` and ``cluster x2``: ``ingest.sink.index_rebuild.rebuild_sharded`` on a
  standalone cluster from ``deploy/standalone/`` (master + 1 or 2 workers of one core
  each, on 127.0.0.1), the driver in client mode, in a child process per set-up. Each
  child warms its Python workers and its executors' shuffle with two small jobs, then
  times ``--repeat`` rebuilds (median; 2 quick, 3 full), and once merges the shards
  into a driver index (``load_sharded``). It then times a new shard count made from
  the shards (``shard_stage.reshard_on_executors``: split into twice as many, merged
  into half as many) against a rebuild from the data files at twice as many.

CPU-seconds cover this process's tree (driver Python, its JVM and Python workers) and
the cluster's daemons with everything under them (executors, their Python workers),
read from /proc before and after each rebuild.

Goal (issue 25): rebuild with 2 workers >= 1.7x as fast as with 1 (sharded).

    python -m tests.bench.index_rebuild [--keys N] [--shards S] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap64

from calving.commit.catalog import SqlCatalog
from calving.commit.index.store import build_from_table
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import DOUBLE, LONG, STRING, NestedField
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.table import Table, create_table
from calving.ingest.write.parquet_writer import write_data_file
from tests.bench.figures import Figure, at_least

QUICK_KEYS = 10_000_000
FULL_KEYS = 50_000_000
ROWS_PER_FILE = 1_000_000
SHARDS = 32
GOAL_SCALING = 1.7
SCHEMA = Schema(
    (
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "name", STRING),
        NestedField(3, "amount", DOUBLE),
    ),
    identifier_field_ids=(1,),
)
NAME = ("bench", "rebuild")


def log(msg: str) -> None:
    print(f"[index_rebuild] {msg}", file=sys.stderr, flush=True)


def build_table(root: Path, keys: int, rows_per_file: int) -> tuple[str, str]:
    """The keyed table under ``root``; (catalog URI, warehouse)."""
    uri, warehouse = f"sqlite:///{root}/catalog.db", f"{root}/warehouse"
    catalog = SqlCatalog("bench", uri, warehouse)
    catalog.create_namespace(NAME[:1])
    table = create_table(catalog, NAME, SCHEMA)
    rng = np.random.default_rng(25)
    ids = rng.permutation(4 * keys)[:keys].astype(np.int64)
    files = []
    for i, start in enumerate(range(0, keys, rows_per_file)):
        chunk = ids[start : start + rows_per_file]
        rows = pa.table(
            {
                "id": chunk,
                "name": pc.binary_join_element_wise(
                    "customer-", pc.cast(pa.array(chunk), pa.string()), ""
                ),
                "amount": rng.random(len(chunk)),
            }
        )
        location = f"{table.metadata.location}/data/base-{i:05d}.parquet"
        files.append(write_data_file(table.io, location, rows, SCHEMA))
    table.commit_or_raise(FastAppend(tuple(files)))
    deletes = {
        f.file_path: BitMap64(rng.choice(f.record_count, f.record_count // 100, replace=False))
        for f in files[::2]
    }
    table.commit_or_raise(RowDelta((), deletes))
    return uri, warehouse


def load(uri: str, warehouse: str) -> Table:
    return Table.load(SqlCatalog("bench", uri, warehouse), NAME)


# ---------------------------------------------------------------- CPU accounting


def tree_cpu(roots: list[int]) -> dict[int, float]:
    """CPU seconds so far of every process in the trees under ``roots``."""
    from tests.bench.streaming import _proc_stat
    from tests.deploy.cluster import descendants

    pids = set(roots)
    for root in roots:
        pids |= descendants(root)
    stats = {pid: _proc_stat(pid) for pid in pids}
    return {pid: stat[1] for pid, stat in stats.items() if stat is not None}


def cpu_between(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


# ---------------------------------------------------------------- the sides


def driver_side(uri: str, warehouse: str, repeat: int) -> dict[str, Any]:
    table = load(uri, warehouse)
    seconds, cpu = [], []
    for _ in range(repeat):
        before, t0 = tree_cpu([os.getpid()]), time.perf_counter()
        index = build_from_table(table.io, table.metadata)
        seconds.append(time.perf_counter() - t0)
        cpu.append(cpu_between(before, tree_cpu([os.getpid()])))
        entries = len(index)
        del index
    return {"seconds": seconds, "cpu": cpu, "entries": entries}


def child(args: argparse.Namespace) -> None:
    """One cluster set-up (this process is its driver): JSON on stdout."""
    from calving.commit.index.shards import load_sharded
    from calving.ingest.sink.index_rebuild import rebuild_sharded
    from calving.ingest.sink.spark_tasks import run_tasks
    from tests.support.spark import local_session

    spark = local_session("calving-index-rebuild", master=args.child)
    cluster = [int(p) for p in args.cluster_pids.split(",") if p]
    workers = len(cluster) - 1
    # Warm up: every executor starts the Python worker the rebuild's jobs run in
    # (``spark_tasks``: the mapInArrow pool) and imports calving there.
    run_tasks(spark, _warm, list(range(4 * workers)))
    table = load(args.catalog, args.warehouse)
    roots = [os.getpid(), *cluster]
    seconds, cpu = [], []
    for _ in range(args.repeat):
        before, t0 = tree_cpu(roots), time.perf_counter()
        location, manifest = rebuild_sharded(
            spark, table.io, table.metadata, args.shards, table.io.properties
        )
        seconds.append(time.perf_counter() - t0)
        cpu.append(cpu_between(before, tree_cpu(roots)))
    t0 = time.perf_counter()
    merged = load_sharded(table.io, location, table.metadata)
    merge_s = time.perf_counter() - t0
    merged_entries = len(merged)
    del merged  # the reshards below run without the merged index in memory
    out = {
        "seconds": seconds,
        "cpu": cpu,
        "entries": manifest.entries,
        "merged": merged_entries,
        "merge_s": merge_s,
        "reshard": reshard_side(spark, table, manifest, roots, args.repeat),
    }
    spark.stop()
    print(json.dumps(out))


def reshard_side(
    spark: Any, table: Table, manifest: Any, roots: list[int], repeat: int
) -> dict[str, Any]:
    """The rebuilt shards split into twice as many and merged into half as many
    (``reshard_on_executors``: no data file read), against a rebuild at twice as many
    (what a new shard count cost before): seconds and CPU-seconds of each."""
    from calving.ingest.sink.index_rebuild import rebuild_sharded
    from calving.ingest.sink.shard_stage import reshard_on_executors

    count = manifest.shard_count
    out: dict[str, Any] = {}
    runs = {
        f"split {count} -> {2 * count}": lambda: reshard_on_executors(
            spark, table.io.properties, table.metadata.location, manifest, 2 * count
        ),
        f"merge {count} -> {count // 2}": lambda: reshard_on_executors(
            spark, table.io.properties, table.metadata.location, manifest, count // 2
        ),
        f"rebuild at {2 * count}": lambda: rebuild_sharded(
            spark, table.io, table.metadata, 2 * count, table.io.properties
        ),
    }
    for name, run in runs.items():
        seconds, cpu = [], []
        for _ in range(repeat):
            before, t0 = tree_cpu(roots), time.perf_counter()
            run()
            seconds.append(time.perf_counter() - t0)
            cpu.append(cpu_between(before, tree_cpu(roots)))
        out[name] = {"seconds": seconds, "cpu": cpu}
        log(f"{name}: {[round(x, 2) for x in seconds]} s, CPU {[round(x, 1) for x in cpu]}")
    return out


def _warm(task: int, item: int) -> list[int]:
    import calving.ingest.sink.index_rebuild  # noqa: F401

    return [item]


def cluster_side(
    workers: int, uri: str, warehouse: str, shards: int, repeat: int, root: Path
) -> dict[str, Any]:
    from tests.bench.cost import _cluster_env
    from tests.deploy.cluster import StandaloneCluster

    cluster = StandaloneCluster(
        _cluster_env(root / f"home-{workers}"), root / f"spark-{workers}", workers
    )
    try:
        cluster.start()  # inside: a failed start still stops what it started
        daemons = cluster.daemon_pids()
        command = [
            sys.executable, "-m", "tests.bench.index_rebuild", "--child", cluster.url,
            "--cluster-pids", ",".join(str(p) for p in daemons), "--catalog", uri,
            "--warehouse", warehouse, "--shards", str(shards), "--repeat", str(repeat),
        ]  # fmt: skip
        done = subprocess.run(command, check=True, timeout=3600, capture_output=True, text=True)
    finally:
        cluster.stop()
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"cluster x{workers}: no result in {done.stdout[-2000:]!r}")
    result = dict(json.loads(lines[-1]))
    log(f"cluster x{workers}: rebuilds {[round(s, 2) for s in result['seconds']]} s")
    return result


# ---------------------------------------------------------------- figures


def measure(keys: int, shards: int, repeat: int, rows_per_file: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="calving-index-rebuild-") as tmp:
        root = Path(tmp)
        log(f"writing {keys:,} keys in files of {rows_per_file:,} rows")
        uri, warehouse = build_table(root, keys, rows_per_file)
        log("driver rebuild")
        results = {"driver": driver_side(uri, warehouse, repeat)}
        for workers in (1, 2):
            log(f"cluster x{workers}")
            results[f"cluster x{workers}"] = cluster_side(
                workers, uri, warehouse, shards, repeat, root
            )
    results["keys"] = keys
    results["shards"] = shards
    return results


def to_figures(results: dict[str, Any]) -> list[Figure]:
    keys, shards = results["keys"], results["shards"]
    label = f"{keys / 1e6:g}M keys, {shards} shards"
    med = {k: statistics.median(v["seconds"]) for k, v in results.items() if isinstance(v, dict)}
    cpu = {
        k: statistics.median(v["cpu"]) / keys * 1e6
        for k, v in results.items()
        if isinstance(v, dict)
    }
    live = {v["entries"] for v in results.values() if isinstance(v, dict)}
    note = f"live keys: {sorted(live)}; CPU-s per million keys: " + ", ".join(
        f"{k} {c:.2f}" for k, c in cpu.items()
    )
    x1, x2 = med["cluster x1"], med["cluster x2"]
    return [
        *_reshard_figures(results, label),
        Figure(
            "index_rebuild",
            f"rebuild {label}, 2 workers (sharded), s",
            x2,
            "1 worker",
            x1,
            goal=f"ratio >= {GOAL_SCALING}x",
            met=at_least(x1 / x2, GOAL_SCALING),
            note=note,
        ),
        Figure(
            "index_rebuild", f"rebuild {label}, 2 workers (sharded), s", x2, "driver", med["driver"]
        ),
        Figure(
            "index_rebuild",
            f"rebuild {label}, 2 workers + merge into a driver index, s",
            x2 + results["cluster x2"]["merge_s"],
            "driver",
            med["driver"],
        ),
        Figure(
            "index_rebuild",
            f"rebuild {label}, CPU-s per million keys, 2 workers",
            cpu["cluster x2"],
            "driver",
            cpu["driver"],
        ),
    ]


def _reshard_figures(results: dict[str, Any], label: str) -> list[Figure]:
    """A new shard count on 2 workers, from the shards against a rebuild, per side."""
    out = []
    for side in ("cluster x1", "cluster x2"):
        runs = results[side].get("reshard", {})
        rebuild = next((v for k, v in runs.items() if k.startswith("rebuild")), None)
        if rebuild is None:
            continue
        peer = statistics.median(rebuild["seconds"])
        peer_cpu = statistics.median(rebuild["cpu"])
        for name, run in runs.items():
            if name.startswith("rebuild"):
                continue
            out.append(
                Figure(
                    "index_rebuild",
                    f"{name} shards of {label}, {side[len('cluster ') :]}, s",
                    statistics.median(run["seconds"]),
                    "rebuild from the data files",
                    peer,
                    note=f"CPU-s {statistics.median(run['cpu']):.1f} vs {peer_cpu:.1f}",
                )
            )
    return out


def figures(quick: bool) -> list[Figure]:
    keys = QUICK_KEYS if quick else FULL_KEYS
    return to_figures(measure(keys, SHARDS, 2 if quick else 3, ROWS_PER_FILE))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=QUICK_KEYS)
    parser.add_argument("--rows-per-file", type=int, default=ROWS_PER_FILE)
    parser.add_argument("--shards", type=int, default=SHARDS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--cluster-pids", default="", help=argparse.SUPPRESS)
    parser.add_argument("--catalog", help=argparse.SUPPRESS)
    parser.add_argument("--warehouse", help=argparse.SUPPRESS)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return
    from tests.bench.figures import render

    results = measure(args.keys, args.shards, args.repeat, args.rows_per_file)
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=1))
    print(render(to_figures(results)))


if __name__ == "__main__":
    main()
