"""Cost per record: CPU-seconds per million records beside throughput, for JSON append,
Avro append and Debezium into a keyed table, on four Spark set-ups:

* ``local[1]`` and ``local[2]``: 1 and 2 executor cores in the driver's JVM;
* ``cluster x1`` and ``cluster x2``: a standalone cluster started with
  ``deploy/standalone/`` (master + 1 or 2 workers of one core each, all on 127.0.0.1),
  the driver in client mode.

Each set-up runs ``tests.bench.throughput`` in its own process (a process has one Spark
master), which measures calving, the raw loop (one process, no Spark, no commits) and the
pyiceberg ``foreachBatch`` peer on the same pre-produced topic. CPU-seconds come from
/proc and cover every process: Spark JVMs (driver, standalone daemons and executors),
Python workers, the driver's Python and the broker. Rates are Kafka records per second.

Goals (issue 12): CPU per million <= 1.5x the raw loop and below pyiceberg, for JSON
append and Debezium keyed; Debezium keyed throughput >= 0.95x raw on ``local[2]``; with 2
cluster workers, throughput >= 1.7x that with 1 worker.

    python -m tests.bench.cost [--quick] [--records N] [--setups local[1],cluster x2]
        [--json-out docs/benchmarks/data/cost.json]

``--json-out`` also writes the runs (tests.bench.record), which ``python -m
tests.bench.plots`` draws as CPU per million records by set-up.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.bench import record, streaming
from tests.bench.figures import Figure, at_least, at_most

QUICK_RECORDS = 100_000
FULL_RECORDS = 300_000
SETUPS = ("local[1]", "local[2]", "cluster x1", "cluster x2")
KINDS = ("json", "avro", "debezium")
LABELS = {"json": "JSON append", "avro": "Avro append", "debezium": "Debezium keyed"}
GOAL_OF_RAW_CPU = 1.5
GOAL_SCALING = 1.7
GOAL_DEBEZIUM_OF_RAW = 0.95
SIDES = ("calving", "raw", "pyiceberg")


def _cluster_env(home: Path) -> dict[str, str]:
    """This environment without Spark settings, with a private HOME for the daemons."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPARK_", "PYSPARK_", "CALVING_", "_SPARK_"))
        and k not in ("PYTHONPATH", "HOME")
    }
    home.mkdir(parents=True, exist_ok=True)
    # USER names the daemons' pid files (read to find their processes).
    return {
        **env,
        "HOME": str(home),
        "USER": env.get("USER") or "calving",
        "PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


def run_setup(setup: str, records: int, repeat: int, root: Path) -> list[dict[str, Any]]:
    """``tests.bench.throughput`` on ``setup``; its runs as JSON."""
    from tests.deploy.cluster import StandaloneCluster

    out = root / f"{setup.replace(' ', '-').replace('[', '').replace(']', '')}.json"
    env = dict(os.environ)
    cluster = None
    if setup.startswith("cluster"):
        workers = int(setup.rsplit("x", 1)[1])
        cluster = StandaloneCluster(_cluster_env(root / "home"), root / "spark", workers)
        cluster.start()
        env[streaming.MASTER_ENV] = cluster.url
        daemons = cluster.daemon_pids()
        if len(daemons) != workers + 1:
            raise RuntimeError(f"found {len(daemons)} of the cluster's {workers + 1} daemons")
        env[streaming.CLUSTER_PIDS_ENV] = ",".join(str(p) for p in daemons)
    else:
        env[streaming.MASTER_ENV] = setup
    command = [
        sys.executable, "-m", "tests.bench.throughput",
        "--kinds", ",".join(KINDS), "--records", str(records), "--repeat", str(repeat),
        "--json-out", str(out),
    ]  # fmt: skip
    streaming.log("cost", f"{setup}: {' '.join(command[1:])}")
    try:
        subprocess.run(command, env=env, check=True, timeout=3600, stdout=subprocess.DEVNULL)
    finally:
        if cluster is not None:
            cluster.stop()
    return json.loads(out.read_text())


def per_million(side: dict[str, Any], records: int, part: str = "cpu") -> float:
    """CPU-seconds per million records: ``cpu`` the whole run, ``cpu_batches`` from the
    sink's first call on (the query's start-up left out)."""
    return sum(side.get(part, side["cpu"]).values()) / records * 1e6


def rate(side: dict[str, Any], records: int, after_startup: bool = False) -> float:
    """Records per second over the run, or from the sink's first call on."""
    return records / (side["seconds"] - (side["startup_s"] if after_startup else 0.0))


def _cpu_note(side: dict[str, Any], part: str = "cpu") -> str:
    order = ["jvm", "python workers", "driver", "broker", "other"]
    cpu = side.get(part, side["cpu"])
    return ", ".join(f"{k} {cpu[k]:.1f}" for k in order if cpu.get(k, 0) >= 0.05)


def kind_figures(setup: str, run: dict[str, Any]) -> list[Figure]:
    """Four CPU figures of one kind on one set-up (whole run and after start-up, each
    against the raw loop and pyiceberg), plus Debezium's throughput on ``local[2]``."""
    kind, n, sides = run["kind"], run["records"], run["sides"]
    calving, raw, peer = (sides[s] for s in SIDES)
    goal = kind != "avro"  # the goals name JSON append and Debezium keyed
    raw_cpu = per_million(raw, n)
    out = []
    for part, what in (("cpu", "whole run"), ("cpu_batches", "after query start-up")):
        cpu, peer_cpu = per_million(calving, n, part), per_million(peer, n, part)
        name = f"{LABELS[kind]}, {setup}, CPU-s per million records, {what}"
        note = (
            f"{n:,} records; calving {rate(calving, n):,.0f}/s, CPU s {_cpu_note(calving, part)}; "
            f"raw {rate(raw, n):,.0f}/s; pyiceberg {rate(peer, n):,.0f}/s, "
            f"CPU s {_cpu_note(peer, part)}"
        )
        out.append(
            Figure(
                "cost",
                name,
                cpu,
                "raw loop (1 process)",
                raw_cpu,
                goal=f"<= {GOAL_OF_RAW_CPU}x raw" if goal else "report",
                met=at_most(cpu / raw_cpu, GOAL_OF_RAW_CPU) if goal else None,
                note=note,
            )
        )
        out.append(
            Figure(
                "cost",
                name,
                cpu,
                "pyiceberg in foreachBatch",
                peer_cpu,
                goal="below pyiceberg" if goal else "report",
                met=cpu < peer_cpu if goal else None,
            )
        )
    if kind == "debezium" and setup == "local[2]":
        out.append(
            Figure(
                "cost",
                f"{LABELS[kind]}, {setup}, records/s",
                rate(calving, n),
                "raw loop (no merge)",
                rate(raw, n),
                better="higher",
                goal=f">= {GOAL_DEBEZIUM_OF_RAW}x raw",
                met=at_least(rate(calving, n) / rate(raw, n), GOAL_DEBEZIUM_OF_RAW),
            )
        )
    return out


def to_figures(results: dict[str, list[dict[str, Any]]]) -> list[Figure]:
    figures: list[Figure] = []
    for setup, runs in results.items():
        for run in runs:
            figures += kind_figures(setup, run)
    return figures + scaling(results)


def scaling(results: dict[str, list[dict[str, Any]]]) -> list[Figure]:
    """Throughput with 2 cluster workers against 1, per kind."""
    one = {r["kind"]: r for r in results.get("cluster x1", [])}
    two = {r["kind"]: r for r in results.get("cluster x2", [])}
    out = []
    for kind in KINDS:
        if kind not in one or kind not in two:
            continue
        r1, r2 = one[kind], two[kind]
        for what, startup in (("whole run", False), ("after query start-up", True)):
            v1 = rate(r1["sides"]["calving"], r1["records"], startup)
            v2 = rate(r2["sides"]["calving"], r2["records"], startup)
            out.append(
                Figure(
                    "cost",
                    f"{LABELS[kind]}, standalone 2 workers, records/s, {what}",
                    v2,
                    "same, 1 worker",
                    v1,
                    better="higher",
                    goal=f">= {GOAL_SCALING}x 1 worker",
                    met=at_least(v2 / v1, GOAL_SCALING),
                    note="workers of 1 core each; driver, master and broker share the "
                    f"machine's {os.cpu_count()} cores with them",
                )
            )
    return out


def measure(setups: list[str], records: int, repeat: int) -> dict[str, list[dict[str, Any]]]:
    root = Path(tempfile.mkdtemp(prefix="calving-bench-cost-"))
    return {setup: run_setup(setup, records, repeat, root) for setup in setups}


def figures(quick: bool) -> list[Figure]:
    records = QUICK_RECORDS if quick else FULL_RECORDS
    return to_figures(measure(list(SETUPS), records, 1 if quick else 2))


def main(argv: list[str] | None = None) -> None:
    from tests.bench.figures import render

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=0)
    ap.add_argument("--setups", default=",".join(SETUPS))
    ap.add_argument("--json-out", type=Path, help="also write the run here (tests.bench.record)")
    args = ap.parse_args(argv)
    records = args.records or (QUICK_RECORDS if args.quick else FULL_RECORDS)
    repeat = args.repeat or (1 if args.quick else 2)
    setups = args.setups.split(",")
    results = measure(setups, records, repeat)
    print(json.dumps(results), file=sys.stderr)
    print(render(to_figures(results)))
    if args.json_out is not None:
        params = {"setups": setups, "records": records, "repeat": repeat, "kinds": list(KINDS)}
        record.write(args.json_out, "cost", params, results)


def rerender(path: Path) -> str:
    """The table again from a run's JSON (what ``main`` prints to stderr, or the
    ``--json-out`` document)."""
    from tests.bench.figures import render

    doc = json.loads(path.read_text())
    return render(to_figures(doc["results"] if "benchmark" in doc else doc))


if __name__ == "__main__":
    main()
