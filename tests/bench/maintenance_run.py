"""The measuring half of the maintenance benchmark (``tests.bench.maintenance``): two
streams (maintained inline, unmaintained) fed the same CDC batches, a fresh table of the
final rows, full scans by DuckDB and pyiceberg, bytes on disk, and the interleaved
compaction run of ``tests.bench.maintenance_concurrent``. Wall and CPU time of this
process are kept side by side (``Timed``)."""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from calving.commit.catalog import SqlCatalog
from calving.commit.maintenance.compaction import OneByOne
from calving.commit.maintenance.compaction_plan import CompactionPolicy
from calving.commit.maintenance.policy import JOBS, MaintenancePolicy
from calving.commit.table.table import Table
from calving.ingest.config.maintenance import MaintenanceConfig
from calving.ingest.maintain import Maintainer
from calving.ingest.write.rewrite import local_rewrite
from tests.bench.cdc_stream import HotKeyModel, Stream
from tests.bench.cdc_upsert import _write_table
from tests.bench.maintenance_concurrent import ConcurrencyResult, run_concurrent
from tests.support.oracles import duckdb_connection

T = TypeVar("T")


@dataclass(frozen=True)
class Params:
    rows: int = 1_000_000
    commits: int = 1_000
    batch_rows: int = 1_000
    every: int = 0  # > 0: a pass every this many commits instead of after_batch()
    interval_s: float = 5.0
    budget_s: float = 2.0
    retain_last: int = 10
    window: int = 11
    scan_repeat: int = 5
    concurrent_commits: int = 200
    concurrent_every: int = 10
    jobs: tuple[str, ...] = JOBS


@dataclass
class Timed:
    wall: float = 0.0
    cpu: float = 0.0

    def add(self, fn: Callable[[], T]) -> T:
        w, c = time.perf_counter(), time.process_time()
        try:
            return fn()
        finally:
            self.wall += time.perf_counter() - w
            self.cpu += time.process_time() - c


@dataclass
class Result:
    params: Params
    target_file_bytes: int = 0
    on: Timed = field(default_factory=Timed)  # stream commits, maintenance on
    maintenance: Timed = field(default_factory=Timed)  # the passes
    off: Timed = field(default_factory=Timed)
    rows_on: int = 0
    rows_off: int = 0
    passes: int = 0
    pass_lines: list[str] = field(default_factory=list)
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    scans: dict[str, dict[str, Timed]] = field(default_factory=dict)
    storage: dict[str, dict[str, int]] = field(default_factory=dict)
    concurrent: ConcurrencyResult | None = None


def log(msg: str) -> None:
    print(f"  [maintenance] {msg}", file=sys.stderr, flush=True)


def _policy(p: Params, target: int) -> MaintenanceConfig:
    compaction = CompactionPolicy(target_file_bytes=target, max_group_bytes=10 * target)
    policy = MaintenancePolicy(
        compaction=compaction, retain_last=p.retain_last, max_snapshot_age_ms=0, jobs=p.jobs
    )
    return MaintenanceConfig(
        policy=policy,
        inline=True,
        inline_interval_s=p.interval_s,
        inline_budget_s=p.budget_s,
        rewrite_on="local",
    )


def _data_file_sizes(table: Table) -> list[int]:
    return [e.data_file.file_size_in_bytes for e in table.live_files().data.values()]


def _window(latencies: list[float], at: int, width: int) -> float:
    """Median latency (ms) of ``width`` commits around commit ``at`` (1-based), clipped."""
    lo = max(0, min(at - 1 - width // 2, len(latencies) - width))
    return statistics.median(latencies[lo : lo + width]) * 1000


def _stream_phase(
    p: Params, catalog: SqlCatalog, model: HotKeyModel, r: Result
) -> dict[str, Table]:
    rows_per_file = -(-p.rows // 4)
    chunks = model.chunks(rows_per_file)
    on_table = _write_table(catalog, f"maintained_{uuid.uuid4().hex[:6]}", iter(chunks))
    off_table = _write_table(catalog, f"unmaintained_{uuid.uuid4().hex[:6]}", iter(chunks))
    r.target_file_bytes = int(statistics.mean(_data_file_sizes(on_table)))
    config = _policy(p, r.target_file_bytes)
    maint_table = Table.load(catalog, on_table.ident)
    maintainer = Maintainer(
        maint_table, config, OneByOne(local_rewrite(maint_table.io, r.target_file_bytes))
    )
    on, off = Stream.open(on_table), Stream.open(off_table)
    log(f"{p.rows:,} rows, target file {r.target_file_bytes:,} B; streaming {p.commits} commits")
    for i in range(1, p.commits + 1):
        upserts, deletes = model.batch(p.batch_rows)
        r.on.add(partial(on.step, upserts, deletes))
        if p.every:
            report = (
                r.maintenance.add(lambda: maintainer.run_pass(budget_s=p.budget_s))
                if i % p.every == 0
                else None
            )
        else:
            report = r.maintenance.add(maintainer.after_batch)
        if report is not None:
            r.passes += 1
            r.pass_lines.extend(f"after commit {i}: {line}" for line in report.lines())
        r.off.add(partial(off.step, upserts, deletes))
        if i % max(1, p.commits // 10) == 0:
            log(
                f"commit {i}: on {r.on.wall:.1f}+{r.maintenance.wall:.1f} s ({r.passes} passes), "
                f"off {r.off.wall:.1f} s"
            )
    r.rows_on, r.rows_off = on.rows, off.rows
    last = p.commits
    for name, s in (("on", on), ("off", off)):
        r.latency_ms[name] = {
            "at_10": _window(s.latencies, 10, p.window),
            f"at_{last}": _window(s.latencies, last, p.window),
            "cpu_at_10": _window(s.cpu, 10, p.window),
            f"cpu_at_{last}": _window(s.cpu, last, p.window),
        }
    fresh = _write_table(
        catalog, f"fresh_{uuid.uuid4().hex[:6]}", iter(model.chunks(rows_per_file))
    )
    return {"fresh": fresh, "maintained": on_table.refresh(), "unmaintained": off_table.refresh()}


def _local(location: str) -> str:
    return location.removeprefix("file://").removeprefix("file:")


def storage(table: Table) -> dict[str, int]:
    """Bytes under the table's location, by kind of file."""
    out = {"total": 0}
    for root, _, files in os.walk(_local(table.metadata.location)):
        for name in files:
            size = os.path.getsize(os.path.join(root, name))
            kind = _kind(name)
            out[kind] = out.get(kind, 0) + size
            out["total"] += size
    return out


_KINDS = (
    (".parquet", "data"),
    (".avro", "manifests"),
    (".metadata.json", "metadata"),
    (".pmap", "position maps"),
    (".stats", "statistics"),
)


def _kind(name: str) -> str:
    if name.endswith(".puffin"):
        return "statistics" if name.startswith("file-sketches-") else "deletes"
    return next((k for ext, k in _KINDS if name.endswith(ext)), "other")


def _duckdb_scan(con: Any, location: str) -> tuple[int, int]:
    path = _local(location).replace("'", "''")
    count, total, *_ = con.execute(
        "SELECT count(*), sum(v), sum(id), sum(score), sum(length(name)) "
        f"FROM iceberg_scan('{path}')"
    ).fetchone()
    return int(count), int(total)


def _pyiceberg_scan(location: str) -> tuple[int, int]:
    import pyarrow.compute as pc
    from pyiceberg.table import StaticTable

    arrow = StaticTable.from_metadata(location).scan().to_arrow()
    return arrow.num_rows, int(pc.sum(arrow.column("v")).as_py() or 0)


def _scan_phase(p: Params, tables: dict[str, Table], model: HotKeyModel, r: Result) -> None:
    want = model.expected()
    con = duckdb_connection()
    try:
        readers: dict[str, Callable[[str], tuple[int, int]]] = {
            "duckdb": lambda loc: _duckdb_scan(con, loc),
            "pyiceberg": _pyiceberg_scan,
        }
        for reader, scan_fn in readers.items():
            for name, t in tables.items():  # warm-up and check
                got = scan_fn(t.metadata_location)
                if got != want:
                    raise AssertionError(
                        f"{reader} reads {name} as (count, sum v) {got}, want {want}"
                    )
            samples: dict[str, list[Timed]] = {n: [] for n in tables}
            for _ in range(p.scan_repeat):  # interleaved: noise hits every table alike
                for name, t in tables.items():
                    one = Timed()
                    one.add(partial(scan_fn, t.metadata_location))
                    samples[name].append(one)
            r.scans[reader] = {
                n: min(s, key=lambda x: x.wall) if len(s) < 3 else _median(s)
                for n, s in samples.items()
            }
            log(
                f"{reader}: "
                + ", ".join(f"{n} {t.wall * 1000:.0f} ms" for n, t in r.scans[reader].items())
            )
    finally:
        con.close()


def _median(samples: list[Timed]) -> Timed:
    ordered = sorted(samples, key=lambda x: x.wall)
    return ordered[len(ordered) // 2]


def run(p: Params) -> Result:
    """Every phase, in a temporary directory deleted afterwards (the unmaintained table
    alone takes about 0.7 GB at the default size)."""
    tmp = tempfile.mkdtemp(prefix="calving-bench-maint-")
    try:
        catalog = SqlCatalog("bench", f"sqlite:///{tmp}/catalog.db", f"{tmp}/warehouse")
        catalog.create_namespace(("bench",))
        r = Result(p)
        model = HotKeyModel(p.rows)
        tables = _stream_phase(p, catalog, model, r)
        _scan_phase(p, tables, model, r)
        r.storage = {name: storage(t) for name, t in tables.items()}
        if p.concurrent_commits:
            r.concurrent = _concurrent_phase(p, catalog, r.target_file_bytes)
        return r
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _concurrent_phase(p: Params, catalog: SqlCatalog, target: int) -> ConcurrencyResult:
    model = HotKeyModel(p.rows, seed=12)
    table = _write_table(
        catalog, f"concurrent_{uuid.uuid4().hex[:6]}", iter(model.chunks(-(-p.rows // 4)))
    )
    stream = Stream.open(table)
    compactor = Table.load(catalog, table.ident)
    policy = _policy(p, target).policy.compaction
    log(f"concurrent compaction: {p.concurrent_commits} commits, a pass every {p.concurrent_every}")
    result = run_concurrent(
        compactor, stream, model, policy,
        commits=p.concurrent_commits, batch_rows=p.batch_rows, every=p.concurrent_every,
    )  # fmt: skip
    con = duckdb_connection()
    try:
        got = _duckdb_scan(con, stream.table.refresh().metadata_location)
    finally:
        con.close()
    if got != model.expected():
        raise AssertionError(f"concurrent table reads {got}, want {model.expected()}")
    return result
