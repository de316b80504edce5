"""Commit latency of a 10-file append at N existing snapshots: calving vs pyiceberg.

Both commit the same kind of pre-written Parquet files to tables on the same SQLite
catalog. calving writes format v3; pyiceberg (``add_files``, which registers files
it did not write, and reads their footers) writes v2. pyiceberg's duplicate-file check
(a scan of every manifest) is turned off: calving's ``FastAppend`` does not check either,
so both sides do the same work. Each side has a table per history size, grown by one-file
commits, and the sizes are sampled in turn (``run``). calving's tables are created as
calving creates them (gzip metadata files, ``spec.metadata_gzip``). Prints medians and
ratios; ``figures`` returns them to the suite (``python -m tests.bench``).

    python -m tests.bench.commit_latency [--quick] [--sizes 10,100,1000] [--repeat 15]
        [--json-out docs/benchmarks/data/commit_latency.json]

``--json-out`` also writes every sample (tests.bench.record), which
``python -m tests.bench.plots`` draws as commit latency against table age.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from calving.commit.catalog import SqlCatalog
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import LONG, STRING, NestedField
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.table import create_table
from calving.ingest.write.parquet_writer import write_data_file
from tests.bench import record
from tests.bench.figures import Figure, at_most

SCHEMA = Schema((NestedField(1, "id", LONG, required=True), NestedField(2, "name", STRING)))
FILES_PER_COMMIT = 10
#: Samples per history size (commits to each size's table, taken in rounds).
REPEAT = 15


def _arrow(n: int, start: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "name": [f"n{i}" for i in range(start, start + n)],
        }
    )


class CalvingSide:
    name = "calving"

    def __init__(self, catalog: SqlCatalog, root: str) -> None:
        self.table = create_table(catalog, ("bench", f"calving_{uuid.uuid4().hex[:6]}"), SCHEMA)
        self.root = root
        self.counter = 0

    def _files(self, n: int):
        out = []
        for _ in range(n):
            self.counter += 1
            loc = f"{self.table.metadata.location}/data/f{self.counter}.parquet"
            out.append(write_data_file(self.table.io, loc, _arrow(10, self.counter * 10), SCHEMA))
        return tuple(out)

    def commit(self, n_files: int) -> float:
        files = self._files(n_files)
        t0 = time.perf_counter()
        self.table.commit_or_raise(FastAppend(files))
        return time.perf_counter() - t0


class PyIcebergSide:
    name = "pyiceberg"

    def __init__(self, uri: str, warehouse: str) -> None:
        from pyiceberg.catalog.sql import SqlCatalog as PyCatalog

        self.catalog = PyCatalog("bench", uri=uri, warehouse=warehouse)
        self.table = self.catalog.create_table(
            f"bench.py_{uuid.uuid4().hex[:6]}", schema=_arrow(1, 0).schema
        )
        self.dir = os.path.join(warehouse.replace("file://", ""), "pydata", uuid.uuid4().hex[:6])
        os.makedirs(self.dir)
        self.counter = 0

    def commit(self, n_files: int) -> float:
        paths = []
        for _ in range(n_files):
            self.counter += 1
            p = os.path.join(self.dir, f"f{self.counter}.parquet")
            pq.write_table(_arrow(10, self.counter * 10), p)
            paths.append("file://" + p)
        t0 = time.perf_counter()
        self.table.add_files(paths, check_duplicate_files=False)
        return time.perf_counter() - t0


def run(sizes: list[int], repeat: int) -> list[dict]:
    """Per side, one table per history size, grown with 1-file commits; then the
    ``FILES_PER_COMMIT``-file samples taken in rounds, one commit to each table per
    round (the order turning each round), so that the machine's load drifting during
    the run falls on every size alike. A table's history grows by ``repeat`` snapshots
    while it is sampled."""
    tmp = tempfile.mkdtemp(prefix="calving-bench-")
    uri = f"sqlite:///{tmp}/catalog.db"
    catalog = SqlCatalog("bench", uri, f"{tmp}/warehouse")
    catalog.create_namespace(("bench",))
    makers: list[Callable[[], CalvingSide | PyIcebergSide]] = [
        lambda: CalvingSide(catalog, tmp),
        lambda: PyIcebergSide(uri, f"file://{tmp}/warehouse"),
    ]
    results = []
    for make in makers:
        tables = {size: make() for size in sizes}
        for size, side in tables.items():
            for _ in range(size):
                side.commit(1)
        samples: dict[int, list[float]] = {size: [] for size in sizes}
        for r in range(repeat):
            turn = r % len(sizes)
            for size in sizes[turn:] + sizes[:turn]:
                samples[size].append(tables[size].commit(FILES_PER_COMMIT))
        for size in sizes:
            results.append(
                {
                    "side": tables[size].name,
                    "snapshots": size,
                    "median_ms": statistics.median(samples[size]) * 1000,
                    "samples_ms": [s * 1000 for s in samples[size]],
                }
            )
    return results


def report(results: list[dict]) -> str:
    by = {(r["side"], r["snapshots"]): r["median_ms"] for r in results}
    sizes = sorted({r["snapshots"] for r in results})
    lines = [
        "| existing snapshots | calving ms | pyiceberg ms | pyiceberg / calving |",
        "|---:|---:|---:|---:|",
    ]
    for s in sizes:
        c, p = by[("calving", s)], by[("pyiceberg", s)]
        lines.append(f"| {s} | {c:.1f} | {p:.1f} | {p / c:.1f}x |")
    first, last = sizes[0], sizes[-1]
    lines.append("")
    lines.append(
        f"calving growth {first}->{last} snapshots: "
        f"{by[('calving', last)] / by[('calving', first)]:.2f}x (goal <= 1.2x); "
        f"pyiceberg growth: {by[('pyiceberg', last)] / by[('pyiceberg', first)]:.2f}x"
    )
    return "\n".join(lines)


def figures(quick: bool) -> list[Figure]:
    """Median commit latency per history size and calving's growth (goal <= 1.2x)."""
    sizes = [10, 100] if quick else [10, 100, 1000]
    results = run(sizes, repeat=REPEAT)
    by = {(r["side"], r["snapshots"]): r["median_ms"] for r in results}
    out = [
        Figure(
            "commit_latency",
            f"append {FILES_PER_COMMIT} files @{s} snapshots, ms",
            by[("calving", s)],
            "pyiceberg add_files",
            by[("pyiceberg", s)],
        )
        for s in sizes
    ]
    first, last = sizes[0], sizes[-1]
    growth = by[("calving", last)] / by[("calving", first)]
    out.append(
        Figure(
            "commit_latency",
            f"latency growth {first}->{last} snapshots, x",
            growth,
            "pyiceberg add_files",
            by[("pyiceberg", last)] / by[("pyiceberg", first)],
            goal="calving <= 1.2x",
            met=at_most(growth, 1.2),
        )
    )
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="10 and 100 snapshots only")
    ap.add_argument("--sizes", default=None)
    ap.add_argument("--repeat", type=int, default=REPEAT)
    ap.add_argument("--json-out", type=Path, help="also write the run here (tests.bench.record)")
    args = ap.parse_args(argv)
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else ([10, 100] if args.quick else [10, 100, 1000])
    )
    results = run(sizes, args.repeat)
    print(report(results))
    if args.json_out is not None:
        params = {"sizes": sizes, "repeat": args.repeat, "files_per_commit": FILES_PER_COMMIT}
        record.write(args.json_out, "commit_latency", params, results)


if __name__ == "__main__":
    main()
