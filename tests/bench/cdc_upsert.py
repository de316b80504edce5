"""CDC upserts on a keyed table: calving (index + deletion vectors) vs pyiceberg ``upsert``.

Both tables start identical: the same rows (``id`` long primary key, ``v``, ``name``,
``score``) in the same number of Parquet files. Each batch updates existing keys, and
both sides get the very same batches, interleaved so machine noise hits both alike.

* calving's commit: look the keys up in the primary-key index, write the new rows'
  Parquet file (``TaskWriter``), commit a ``RowDelta`` whose deletion vectors (Puffin)
  drop the old rows, and apply the commit to the in-memory index, as the driver's
  coordinator does. Saving the index (every 20 commits there) is not included.
* pyiceberg: ``Table.upsert(batch, join_cols=["id"])``: a filtered scan, a join, then a
  copy-on-write overwrite of every data file holding a changed row. pyiceberg writes
  format v2; calving writes v3.

One unmeasured warm-up batch goes first on each side. After the timed batches both
tables are checked with DuckDB (row count = key count, ``sum(v)`` = the model's), then
calving's table receives more 1k-row batches up to ``read_after`` in all, and a DuckDB
``count(*), sum(v)`` over it is timed against a freshly written table of the same rows.

    python -m tests.bench.cdc_upsert [--rows 1000000] [--batches 100,1000,10000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from calving.commit.catalog import SqlCatalog
from calving.commit.index import PrimaryKeyIndex, build_from_table
from calving.commit.spec.partition import UNPARTITIONED
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import DOUBLE, LONG, STRING, NestedField
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.table import Table, create_table
from calving.ingest.write.parquet_writer import write_data_file
from calving.ingest.write.task_writer import TaskWriter
from tests.bench.figures import Figure, at_least
from tests.support.oracles import duckdb_connection

SCHEMA = Schema(
    (
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "v", LONG, required=True),
        NestedField(3, "name", STRING),
        NestedField(4, "score", DOUBLE),
    ),
    identifier_field_ids=(1,),
)
ARROW_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("v", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("score", pa.float64()),
    ]
)
WARM_UP_ROWS = 100
READ_BATCH_ROWS = 1_000
GOAL_SPEEDUP = 50.0
GOAL_ROWS = 1_000_000  # the goal is stated for a table of this size


def rows(ids: np.ndarray, versions: np.ndarray) -> pa.Table:
    """The row of each key at its version: ``v`` is the version, the rest derive from it."""
    id_arr = pa.array(ids, pa.int64())
    v_arr = pa.array(versions, pa.int64())
    name = pc.binary_join_element_wise(
        "user-", pc.cast(id_arr, pa.string()), pc.cast(v_arr, pa.string()), "-"
    )
    score = ((ids * 31 + versions * 17) % 1000) / 10.0
    return pa.Table.from_arrays([id_arr, v_arr, name, pa.array(score)], schema=ARROW_SCHEMA)


class Model:
    """The expected table: a version per key; batches update distinct random keys."""

    def __init__(self, n_rows: int, seed: int = 11) -> None:
        self.versions = np.zeros(n_rows, np.int64)
        self.rng = np.random.default_rng(seed)

    def batch(self, size: int) -> pa.Table:
        ids = np.sort(self.rng.choice(len(self.versions), size, replace=False))
        self.versions[ids] += 1
        return rows(ids, self.versions[ids])

    def chunks(self, rows_per_file: int) -> Iterator[pa.Table]:
        n = len(self.versions)
        for start in range(0, n, rows_per_file):
            ids = np.arange(start, min(n, start + rows_per_file), dtype=np.int64)
            yield rows(ids, self.versions[ids])


def _write_table(catalog: SqlCatalog, name: str, chunks: Iterator[pa.Table]) -> Table:
    table = create_table(catalog, ("bench", name), SCHEMA)
    files = tuple(
        write_data_file(table.io, f"{table.metadata.location}/data/base-{i:05d}.parquet", c, SCHEMA)
        for i, c in enumerate(chunks)
    )
    table.commit_or_raise(FastAppend(files))
    return table


class CalvingCdc:
    name = "calving"

    def __init__(self, catalog: SqlCatalog, model: Model, rows_per_file: int) -> None:
        self.table = _write_table(
            catalog, f"cdc_{uuid.uuid4().hex[:6]}", model.chunks(rows_per_file)
        )
        t0 = time.perf_counter()
        self.index: PrimaryKeyIndex = build_from_table(self.table.io, self.table.metadata)
        self.index_build_s = time.perf_counter() - t0
        self.batches = 0

    def upsert(self, batch: pa.Table) -> float:
        t0 = time.perf_counter()
        self.batches += 1
        deletes = self.index.lookup(batch.select(["id"])).deletes()
        writer = TaskWriter(
            self.table.io,
            self.table.metadata.location,
            SCHEMA,
            UNPARTITIONED,
            file_prefix=f"bench-{self.batches:05d}",
        )
        writer.write(batch)
        written = writer.close()
        outcome = self.table.commit_or_raise(
            RowDelta(
                tuple(w.data_file for w in written),
                deletes,
                schema_id=self.table.metadata.current_schema_id,
            ),
            from_cache=True,  # as the coordinator commits
        )
        for path, positions in deletes.items():
            self.index.delete_positions(path, positions)
        for w in written:
            assert w.keys is not None
            self.index.add_file(w.data_file.file_path, w.keys, row_count=w.data_file.record_count)
        self.index.snapshot_id = outcome.metadata.current_snapshot_id
        return time.perf_counter() - t0

    @property
    def metadata_location(self) -> str:
        return self.table.metadata_location


class PyIcebergCdc:
    name = "pyiceberg"

    def __init__(self, uri: str, warehouse: str, model: Model, rows_per_file: int) -> None:
        from pyiceberg.catalog.sql import SqlCatalog as PyCatalog

        catalog = PyCatalog("bench", uri=uri, warehouse=warehouse)
        self.table = catalog.create_table(
            f"bench.py_cdc_{uuid.uuid4().hex[:6]}", schema=ARROW_SCHEMA
        )
        with self.table.transaction() as tx:
            for chunk in model.chunks(rows_per_file):
                tx.append(chunk)

    def upsert(self, batch: pa.Table) -> float:
        t0 = time.perf_counter()
        result = self.table.upsert(batch, join_cols=["id"])
        elapsed = time.perf_counter() - t0
        if result.rows_updated != batch.num_rows or result.rows_inserted:
            raise AssertionError(f"pyiceberg upsert: {result}")
        return elapsed

    @property
    def metadata_location(self) -> str:
        return str(self.table.metadata_location)


def _scan_sql(metadata_location: str) -> str:
    path = metadata_location.removeprefix("file://").replace("'", "''")
    return f"SELECT count(*), sum(v) FROM iceberg_scan('{path}')"


def verify(con: Any, metadata_location: str, model: Model, who: str) -> None:
    """Row count = key count and sum(v) = the model's: the bench measured real upserts."""
    count, total = con.execute(_scan_sql(metadata_location)).fetchone()
    want = (len(model.versions), int(model.versions.sum()))
    if (count, total) != want:
        raise AssertionError(f"{who}: DuckDB reads (count, sum(v)) = {(count, total)}, want {want}")


def scan_ms(con: Any, metadata_location: str, repeat: int = 5) -> float:
    sql = _scan_sql(metadata_location)
    con.execute(sql).fetchall()  # warm the OS cache and the extension
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        con.execute(sql).fetchall()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1000


@dataclass
class CdcResult:
    rows: int
    files: int
    index_build_s: float
    calving_ms: dict[int, float] = field(default_factory=dict)
    pyiceberg_ms: dict[int, float] = field(default_factory=dict)
    pyiceberg_note: str = ""
    read_batches: int = 0
    read_ms: float | None = None
    fresh_read_ms: float | None = None


def _log(msg: str) -> None:
    print(f"  [cdc_upsert] {msg}", file=sys.stderr, flush=True)


def run(
    n_rows: int,
    batch_sizes: list[int],
    *,
    rows_per_file: int,
    repeat: int,
    pyiceberg: bool = True,
    pyiceberg_budget_s: float = 240.0,
    read_after: int = 0,
) -> CdcResult:
    """Upsert batches into both tables; ``read_after`` > 0 also times the read cost after
    that many calving batches. pyiceberg is skipped (with a note) when its warm-up batch
    says the timed batches would take more than ``pyiceberg_budget_s``."""
    tmp = tempfile.mkdtemp(prefix="calving-bench-cdc-")
    uri = f"sqlite:///{tmp}/catalog.db"
    catalog = SqlCatalog("bench", uri, f"{tmp}/warehouse")
    catalog.create_namespace(("bench",))
    model = Model(n_rows)
    calving = CalvingCdc(catalog, model, rows_per_file)
    result = CdcResult(n_rows, -(-n_rows // rows_per_file), calving.index_build_s)
    _log(f"{n_rows:,} rows: calving table ready, index built in {calving.index_build_s:.2f} s")
    py = PyIcebergCdc(uri, f"file://{tmp}/warehouse", model, rows_per_file) if pyiceberg else None

    warm = model.batch(WARM_UP_ROWS)
    calving.upsert(warm)
    if py is not None:
        warm_s = py.upsert(warm)
        # Copy-on-write cost grows with the batch (more rows to find and join), never
        # shrinks, so the warm-up's time is a lower bound for every timed batch.
        projected = warm_s * repeat * len(batch_sizes)
        if projected > pyiceberg_budget_s:
            result.pyiceberg_note = (
                f"pyiceberg upsert at {n_rows:,} rows not measured: its warm-up upsert of "
                f"{WARM_UP_ROWS} rows took {warm_s:.0f} s, so {repeat * len(batch_sizes)} "
                f"timed upserts would take over {projected / 60:.0f} min"
            )
            _log(result.pyiceberg_note)
            py = None
    if pyiceberg and py is None and not result.pyiceberg_note:
        result.pyiceberg_note = "pyiceberg not measured"

    for size in batch_sizes:
        c_samples, p_samples = [], []
        for _ in range(repeat):
            batch = model.batch(size)
            c_samples.append(calving.upsert(batch))
            if py is not None:
                p_samples.append(py.upsert(batch))
        result.calving_ms[size] = statistics.median(c_samples) * 1000
        if p_samples:
            result.pyiceberg_ms[size] = statistics.median(p_samples) * 1000
        _log(
            f"{size:,}-row batches: calving {result.calving_ms[size]:.1f} ms, "
            f"pyiceberg {result.pyiceberg_ms.get(size, float('nan')):.1f} ms"
        )

    con = duckdb_connection()
    try:
        verify(con, calving.metadata_location, model, "calving")
        if py is not None:
            verify(con, py.metadata_location, model, "pyiceberg")
        if read_after:
            while calving.batches < read_after:
                calving.upsert(model.batch(READ_BATCH_ROWS))
            verify(con, calving.metadata_location, model, "calving")
            fresh = _write_table(
                catalog, f"fresh_{uuid.uuid4().hex[:6]}", model.chunks(rows_per_file)
            )
            result.read_batches = calving.batches
            result.read_ms = scan_ms(con, calving.metadata_location)
            result.fresh_read_ms = scan_ms(con, fresh.metadata_location)
            _log(
                f"read after {calving.batches} batches: {result.read_ms:.1f} ms, fresh {result.fresh_read_ms:.1f} ms"
            )
    finally:
        con.close()
    return result


def _rows_label(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1_000}k"


def to_figures(r: CdcResult) -> list[Figure]:
    size = _rows_label(r.rows)
    out = []
    for batch, ms in r.calving_ms.items():
        peer_ms = r.pyiceberg_ms.get(batch)
        has_goal = r.rows == GOAL_ROWS
        ratio = peer_ms / ms if peer_ms else None
        out.append(
            Figure(
                "cdc_upsert",
                f"upsert {batch:,} rows into {size} ({r.files} files), ms",
                ms,
                "pyiceberg upsert (v2 CoW)",
                peer_ms,
                goal=f">= {GOAL_SPEEDUP:.0f}x" if has_goal else "",
                met=at_least(ratio, GOAL_SPEEDUP) if has_goal else None,
                note=r.pyiceberg_note if peer_ms is None else "",
            )
        )
    out.append(Figure("cdc_upsert", f"index build from table, {size} keys, s", r.index_build_s))
    if r.read_ms is not None:
        out.append(
            Figure(
                "cdc_upsert",
                f"DuckDB count+sum of {size} after {r.read_batches} upserts, ms",
                r.read_ms,
                "fresh table, same rows",
                r.fresh_read_ms,
                note="ratio < 1: the upserted table (DVs + small files) reads slower than a "
                "freshly written one; compaction restores it",
            )
        )
    return out


def figures(quick: bool) -> list[Figure]:
    if quick:
        r = run(100_000, [100, 1_000], rows_per_file=25_000, repeat=3, read_after=20)
        return to_figures(r)
    out = to_figures(
        run(1_000_000, [100, 1_000, 10_000], rows_per_file=250_000, repeat=5, read_after=100)
    )
    out += to_figures(
        run(
            10_000_000,
            [100, 1_000, 10_000],
            rows_per_file=250_000,
            repeat=3,
            pyiceberg_budget_s=300.0,
        )
    )
    return out


def main(argv: list[str] | None = None) -> None:
    from tests.bench.figures import render

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batches", default="100,1000,10000")
    ap.add_argument("--rows-per-file", type=int, default=250_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--read-after", type=int, default=0, help="time a read after N batches")
    ap.add_argument("--no-pyiceberg", action="store_true")
    args = ap.parse_args(argv)
    r = run(
        args.rows,
        [int(b) for b in args.batches.split(",")],
        rows_per_file=args.rows_per_file,
        repeat=args.repeat,
        pyiceberg=not args.no_pyiceberg,
        read_after=args.read_after,
    )
    print(render(to_figures(r)))


if __name__ == "__main__":
    main()
