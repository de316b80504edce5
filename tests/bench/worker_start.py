"""Spark's Python workers from calving's daemon against Spark's own, in one run.

Each side is a child process that starts a fresh ``local[2]`` session, with
``spark.python.daemon.module`` set to ``calving.ingest.spark_daemon`` (calving) or
``pyspark.daemon`` (the peer, Spark's default), and times its first two jobs: a
two-task ``mapInArrow`` made by ``spark_tasks.map_in_arrow`` (calving's pool, as the
write stages are) whose function imports calving's task modules, as a write task does.
The first job starts the daemons and their workers; the second finds them running. CPU
seconds are the child's whole process tree (driver, JVM, daemons, workers) over the first
job. Beside it, the import behind the difference: ``pyspark.worker`` in a fresh
interpreter from Spark's ``pyspark.zip`` against the installed package.

    python -m tests.bench.worker_start [--repeat N]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from calving.ingest.spark_daemon import DAEMON_MODULE
from tests.bench.figures import Figure
from tests.bench.index_rebuild import cpu_between, tree_cpu

TASK_MODULES = ("calving.ingest.sink.executor", "calving.ingest.sink.fused")
SIDES = {"calving": DAEMON_MODULE, "peer": "pyspark.daemon"}


def log(msg: str) -> None:
    print(f"[worker_start] {msg}", file=sys.stderr, flush=True)


def _task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for module in TASK_MODULES:  # what a write task imports
        importlib.import_module(module)
    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([{"pid": os.getpid()}])


def child(daemon: str) -> None:
    from calving.ingest.sink.spark_tasks import map_in_arrow
    from tests.support.spark import local_session

    spark = local_session("worker-start", "local[2]", {"spark.python.daemon.module": daemon})

    def job() -> float:
        started = time.perf_counter()
        map_in_arrow(spark.range(0, 2, 1, 2), _task, "pid long").collect()
        return time.perf_counter() - started

    before = tree_cpu([os.getpid()])
    seconds = [job()]
    cpu = cpu_between(before, tree_cpu([os.getpid()]))
    seconds.append(job())
    spark.stop()
    print(json.dumps({"first": seconds[0], "second": seconds[1], "cpu": cpu}))


def _side(daemon: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "tests.bench.worker_start", "--child", daemon],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def import_seconds(from_zip: bool) -> float:
    """Wall seconds of ``import pyspark.worker`` in a fresh interpreter."""
    import pyspark

    env = dict(os.environ)
    if from_zip:
        lib = Path(pyspark.__file__).parent / "python" / "lib"
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in sorted(lib.glob("*.zip")))
    else:
        env.pop("PYTHONPATH", None)
    code = "import time; t = time.perf_counter(); import pyspark.worker; print(time.perf_counter() - t)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip())


def measure(repeat: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    for _ in range(repeat):  # alternate, so a slow moment of the machine hits both
        for side, daemon in SIDES.items():
            got = _side(daemon)
            log(f"{side} ({daemon}): first job {got['first']:.2f} s, second {got['second']:.2f} s")
            runs[side].append(got)
    imports = {z: statistics.median(import_seconds(z) for _ in range(3)) for z in (True, False)}
    return {"runs": runs, "import_zip": imports[True], "import_installed": imports[False]}


def to_figures(result: dict[str, Any]) -> list[Figure]:
    def median(side: str, key: str) -> float:
        return statistics.median(r[key] for r in result["runs"][side])

    n = len(result["runs"]["calving"])
    return [
        Figure(
            "worker_start",
            f"first calving job of a fresh local[2] session, s (median of {n})",
            median("calving", "first"),
            "Spark's daemon",
            median("peer", "first"),
        ),
        Figure(
            "worker_start",
            "the same job's CPU-seconds (driver, JVM, daemons, workers)",
            median("calving", "cpu"),
            "Spark's daemon",
            median("peer", "cpu"),
        ),
        Figure(
            "worker_start",
            "the second job, s (workers running)",
            median("calving", "second"),
            "Spark's daemon",
            median("peer", "second"),
        ),
        Figure(
            "worker_start",
            "import pyspark.worker in a fresh interpreter, s",
            result["import_installed"],
            "from Spark's pyspark.zip",
            result["import_zip"],
        ),
    ]


def figures(quick: bool) -> list[Figure]:
    return to_figures(measure(2 if quick else 5))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child)
        return
    from tests.bench.figures import render

    print(render(to_figures(measure(args.repeat))))


if __name__ == "__main__":
    main()
