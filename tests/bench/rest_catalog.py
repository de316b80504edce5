"""Commit latency through the REST catalog: calving's ``RestCatalog`` against a
``calving catalog serve`` process, vs calving committing to the same SQL catalog
directly, vs pyiceberg's ``RestCatalog`` appending through the same server (the peer).

Each side appends a 10-file batch (pre-written Parquet files; calving ``FastAppend``,
pyiceberg ``add_files`` with its duplicate check off, as in ``commit_latency``) to its
own table, ``--repeat`` times after a few warm-up commits, on SQLite and on PostgreSQL
(when it is reachable). Printed: median and p90 ms, the ratios, and the CPU-seconds of
the client (this process, including writing each batch's 10 Parquet files outside the
timed commit) and of the server process, per commit.

    python -m tests.bench.rest_catalog [--quick] [--repeat 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq

from calving.commit.catalog import SqlCatalog
from calving.commit.catalog.base import Catalog
from calving.commit.catalog.rest.client import RestCatalog
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.table import create_table
from calving.ingest.write.parquet_writer import write_data_file
from tests.bench.commit_latency import FILES_PER_COMMIT, SCHEMA, _arrow
from tests.bench.figures import Figure

PG_ADMIN = os.environ.get(
    "CALVING_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
WARM_UP = 3


def _cpu(pid: int) -> float:
    """CPU-seconds (user + system) of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _self_cpu() -> float:
    t = os.times()
    return t.user + t.system


class Serve:
    """``calving catalog serve`` over ``uri`` in a child process."""

    def __init__(self, uri: str, name: str, warehouse: str, log: Path) -> None:
        cmd = [sys.executable, "-m", "calving.ingest.cli", "catalog", "serve", "--catalog", uri,
               "--catalog-name", name, "--warehouse", warehouse, "--port", "0", "--insecure"]  # fmt: skip
        self._log = open(log, "w")  # noqa: SIM115 - the child writes it until stop()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.stop()
            raise RuntimeError(f"calving catalog serve did not start ({log})")
        self.url = line.rsplit(" ", 1)[-1].strip()

    def cpu(self) -> float:
        return _cpu(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self._log.close()


def _calving_commit(catalog: Catalog) -> Callable[[], float]:
    table = create_table(catalog, ("bench", f"c_{uuid.uuid4().hex[:6]}"), SCHEMA)
    counter = [0]

    def commit() -> float:
        files = []
        for _ in range(FILES_PER_COMMIT):
            counter[0] += 1
            location = f"{table.metadata.location}/data/f{counter[0]}.parquet"
            files.append(write_data_file(table.io, location, _arrow(10, counter[0] * 10), SCHEMA))
        t0 = time.perf_counter()
        table.commit_or_raise(FastAppend(tuple(files)))
        return time.perf_counter() - t0

    return commit


def _pyiceberg_commit(url: str, root: Path) -> Callable[[], float]:
    from pyiceberg.catalog.rest import RestCatalog as PyIcebergRest

    table = PyIcebergRest("bench", uri=url).create_table(
        f"bench.p_{uuid.uuid4().hex[:6]}", schema=_arrow(1, 0).schema
    )
    directory = root / f"pydata-{uuid.uuid4().hex[:6]}"
    directory.mkdir(parents=True)
    counter = [0]

    def commit() -> float:
        paths = []
        for _ in range(FILES_PER_COMMIT):
            counter[0] += 1
            path = directory / f"f{counter[0]}.parquet"
            pq.write_table(_arrow(10, counter[0] * 10), path)
            paths.append(f"file://{path}")
        t0 = time.perf_counter()
        table.add_files(paths, check_duplicate_files=False)
        return time.perf_counter() - t0

    return commit


def _measure(commit: Callable[[], float], repeat: int, server: Serve) -> dict[str, float]:
    for _ in range(WARM_UP):
        commit()
    client0, server0 = _self_cpu(), server.cpu()
    samples = sorted(commit() for _ in range(repeat))
    return {
        "median_ms": statistics.median(samples) * 1000,
        "p90_ms": samples[int(0.9 * (len(samples) - 1))] * 1000,
        "client_cpu_ms": (_self_cpu() - client0) / repeat * 1000,
        "server_cpu_ms": (server.cpu() - server0) / repeat * 1000,
    }


def run(repeat: int, quick: bool) -> dict[str, dict[str, dict[str, float]]]:
    """Every side on SQLite, then (unless ``quick``) on PostgreSQL if it is reachable."""
    from tests.faults.catalogs import postgres_available, temporary_pg_database

    root = tempfile.mkdtemp(prefix="calving-bench-rest-")
    results = {"sqlite": _run_on(f"sqlite:///{root}/catalog.db", repeat)}
    if not quick and postgres_available(PG_ADMIN):
        with temporary_pg_database(PG_ADMIN) as pg_uri:
            results["postgres"] = _run_on(pg_uri, repeat)
    return results


def _run_on(uri: str, repeat: int) -> dict[str, dict[str, float]]:
    root = Path(tempfile.mkdtemp(prefix="calving-bench-rest-"))
    name = f"bench_{uuid.uuid4().hex[:6]}"
    direct = SqlCatalog(name, uri, str(root / "warehouse"))
    direct.create_namespace(("bench",))
    server = Serve(uri, name, str(root / "warehouse"), root / "serve.log")
    try:
        rest = RestCatalog("bench", server.url)
        return {
            "sql": _measure(_calving_commit(direct), repeat, server),
            "rest": _measure(_calving_commit(rest), repeat, server),
            "pyiceberg": _measure(_pyiceberg_commit(server.url, root), repeat, server),
        }
    finally:
        server.stop()
        direct.close()


def report(results: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = [
        "| catalog | side | median ms | p90 ms | client CPU ms/commit | server CPU ms/commit |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for backend, sides in results.items():
        for side, r in sides.items():
            label = {"sql": "calving -> SQL directly", "rest": "calving -> REST",
                     "pyiceberg": "pyiceberg -> REST"}[side]  # fmt: skip
            lines.append(
                f"| {backend} | {label} | {r['median_ms']:.1f} | {r['p90_ms']:.1f} | "
                f"{r['client_cpu_ms']:.1f} | {r['server_cpu_ms']:.1f} |"
            )
        rest, sql, py = (sides[k]["median_ms"] for k in ("rest", "sql", "pyiceberg"))
        lines.append(
            f"\n{backend}: REST costs {rest / sql:.2f}x the direct SQL commit; "
            f"pyiceberg's REST append takes {py / rest:.1f}x calving's REST commit"
        )
    return "\n".join(lines)


def figures(quick: bool) -> list[Figure]:
    results = run(10 if quick else 30, quick)
    out = []
    for backend, sides in results.items():
        rest, sql, py = (sides[k]["median_ms"] for k in ("rest", "sql", "pyiceberg"))
        what = f"append {FILES_PER_COMMIT} files through REST ({backend}), ms"
        out.append(Figure("rest_catalog", what, rest, "pyiceberg RestCatalog append", py))
        out.append(
            Figure(
                "rest_catalog",
                f"same, SQL catalog directly ({backend}), ms",
                sql,
                "calving through REST",
                rest,
                note="ratio: REST's cost over a direct commit",
            )
        )
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="SQLite only, 10 commits per side")
    ap.add_argument("--repeat", type=int, default=None)
    args = ap.parse_args(argv)
    repeat = args.repeat or (10 if args.quick else 30)
    print(report(run(repeat, args.quick)))


if __name__ == "__main__":
    main()
