"""Driver memory of a many-table pipeline's primary-key indexes (issue 22 part 3).

``TABLES`` keyed tables of ``KEYS`` keys each (50M keys in all by default) in a SQLite
catalog, each with its index saved beside it, as a running pipeline leaves them. A
child process per mode then does what a many-table sink's driver does for a batch
touching a table, for every table in turn, twice (two rounds): open the table's index
at its current snapshot (``current_index``, as ``Coordinator.prepare``), look up 100
keys, then let ``IndexBudget`` drop indexes past the budget. Measured: the child's
peak RSS (``ru_maxrss``: the Python driver, without Spark's JVM) and the seconds per
round. Modes: no budget (every index stays, the design before), the default 2 GiB
budget, and 256 MiB (below what the indexes take). Peer: no budget.

    python -m tests.bench.many_tables_memory [--tables 500] [--keys 100000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa

from tests.bench.figures import Figure, at_most, render

TABLES = 500
KEYS = 100_000
GOAL_GIB = 4.0
BUDGET = 2 * 2**30
#: A budget below what 50M long keys take (about 0.8 GiB), to show it bound the driver.
SMALL_BUDGET = 256 * 2**20


def _catalog(root: Path) -> Any:
    from calving.commit.catalog.sql import SqlCatalog

    return SqlCatalog("bench", f"sqlite:///{root / 'c.db'}", str(root / "wh"))


def setup(root: Path, tables: int, keys: int) -> None:
    """``tables`` keyed tables of ``keys`` rows (one file), each index saved."""
    from calving.commit.spec.schema import Schema
    from calving.commit.spec.types import NestedField, PrimitiveType
    from calving.commit.table.actions.fast_append import FastAppend
    from calving.commit.table.table import create_table
    from calving.ingest.sink.coordinator import Coordinator
    from calving.ingest.sink.driver_index import current_index
    from calving.ingest.write.parquet_writer import write_data_file

    catalog = _catalog(root)
    catalog.create_namespace(("db",))
    schema = Schema(
        (NestedField(1, "id", PrimitiveType("long"), True),
         NestedField(2, "v", PrimitiveType("string"), False)),
        identifier_field_ids=(1,),
    )  # fmt: skip
    for i in range(tables):
        table = create_table(catalog, ("db", f"t{i}"), schema)
        ids = np.arange(i * keys, (i + 1) * keys, dtype=np.int64)
        rows = pa.table({"id": ids, "v": pa.array(["x"] * keys)})
        f = write_data_file(table.io, f"{table.metadata.location}/data/0.parquet", rows, schema)
        table.commit_or_raise(FastAppend((f,)))
        coordinator = Coordinator(table, "bench")
        coordinator.index_state = current_index(table.io, coordinator.index_state, table.metadata)
        coordinator.save_index()
    catalog.close()


def child(root: Path, tables: int, keys: int, budget: int | None) -> dict[str, float]:
    """One driver's two rounds over every table; its peak RSS and seconds per round."""
    from calving.commit.table.table import Table
    from calving.ingest.sink.coordinator import Coordinator
    from calving.ingest.sink.driver_index import current_index
    from calving.ingest.sink.many.index_budget import IndexBudget

    catalog = _catalog(root)
    handles = {}
    for i in range(tables):
        table = Table.load(catalog, ("db", f"t{i}"), catalog.io)
        handles[f"t{i}"] = SimpleNamespace(coordinator=Coordinator(table, "bench"))
    limit = IndexBudget(budget if budget is not None else 2**62)
    rounds = []
    batch = 0
    for _ in range(2):
        started = time.perf_counter()
        for i in range(tables):
            c = handles[f"t{i}"].coordinator
            c.index_state = current_index(c.table.io, c.index_state, c.table.metadata)
            probe = pa.table({"id": np.arange(i * keys, i * keys + 100, dtype=np.int64)})
            found = c.index.lookup(probe).deletes()
            assert sum(len(p) for p in found.values()) == 100, "every probed key is found"
            limit.after_batch(handles, [f"t{i}"], batch)
            batch += 1
        rounds.append(time.perf_counter() - started)
    held = sum(h.coordinator.index.nbytes for h in handles.values() if h.coordinator.index)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_gib": peak_kib / 2**20, "round1_s": rounds[0], "round2_s": rounds[1],
            "held_gib": held / 2**30, "evictions": float(limit.evictions)}  # fmt: skip


def load_seconds(keys: int, file_rows: int = 1_000_000) -> dict[str, float]:
    """One table of ``keys`` long keys in files of ``file_rows``: seconds to rebuild its
    index from the data files, to save it, and to open the saved index in a new
    coordinator (what a restart, or a table whose index was dropped, does)."""
    from calving.commit.spec.schema import Schema
    from calving.commit.spec.types import NestedField, PrimitiveType
    from calving.commit.table.actions.fast_append import FastAppend
    from calving.commit.table.table import Table, create_table
    from calving.ingest.sink.coordinator import Coordinator
    from calving.ingest.sink.driver_index import current_index
    from calving.ingest.write.parquet_writer import write_data_file

    root = Path(tempfile.mkdtemp(prefix="calving-bench-index-load-"))
    catalog = _catalog(root)
    catalog.create_namespace(("db",))
    schema = Schema((NestedField(1, "id", PrimitiveType("long"), True),), identifier_field_ids=(1,))
    table = create_table(catalog, ("db", "big"), schema)
    files = []
    for start in range(0, keys, file_rows):
        ids = pa.table({"id": np.arange(start, min(keys, start + file_rows), dtype=np.int64)})
        files.append(
            write_data_file(
                table.io, f"{table.metadata.location}/data/{start}.parquet", ids, schema
            )
        )
    table.commit_or_raise(FastAppend(tuple(files)))
    coordinator = Coordinator(table, "bench")
    started = time.perf_counter()
    coordinator.index_state = current_index(table.io, coordinator.index_state, table.metadata)
    rebuilt = time.perf_counter() - started
    coordinator.save_index()
    saved = time.perf_counter() - started - rebuilt
    coordinator.evict_index()
    fresh = Coordinator(Table.load(catalog, ("db", "big"), catalog.io), "bench")
    started = time.perf_counter()
    fresh.index_state = current_index(fresh.table.io, fresh.index_state, fresh.table.metadata)
    opened = time.perf_counter() - started
    assert fresh.index is not None and len(
        fresh.index.lookup(pa.table({"id": [0, keys - 1]})).deletes()
    )
    return {"rebuild_s": rebuilt, "save_s": saved, "open_s": opened,
            "gib": fresh.index.nbytes / 2**30}  # fmt: skip


def _run_child(root: Path, tables: int, keys: int, budget: int | None) -> dict[str, float]:
    args = [sys.executable, "-m", "tests.bench.many_tables_memory", "--child", str(root),
            "--tables", str(tables), "--keys", str(keys), "--budget", str(budget or 0)]  # fmt: skip
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure(tables: int = TABLES, keys: int = KEYS) -> dict[str, dict[str, float]]:
    root = Path(tempfile.mkdtemp(prefix="calving-bench-index-memory-"))
    started = time.perf_counter()
    setup(root, tables, keys)
    print(f"set-up {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return {
        "unbounded": _run_child(root, tables, keys, None),
        "budget": _run_child(root, tables, keys, BUDGET),
        "small": _run_child(root, tables, keys, SMALL_BUDGET),
    }


def figures(quick: bool = True, tables: int = TABLES, keys: int = KEYS) -> list[Figure]:
    if quick:
        tables, keys = 100, 100_000
    m = measure(tables, keys)
    total = tables * keys
    b, u, small = m["budget"], m["unbounded"], m["small"]
    return [
        Figure("many_tables", f"driver peak RSS, {tables} tables / {total / 1e6:.0f}M keys, GiB",
               b["peak_gib"], "every index kept (no budget)", u["peak_gib"],
               goal=f"<= {GOAL_GIB:.0f} GiB" if total >= 50_000_000 else "",
               met=at_most(b["peak_gib"], GOAL_GIB) if total >= 50_000_000 else None,
               note=f"budget 2 GiB: {b['held_gib']:.2f} GiB of indexes held at the end, "
               f"{b['evictions']:.0f} dropped; a round over every table took "
               f"{b['round1_s']:.1f} s then {b['round2_s']:.1f} s (reopening dropped "
               f"indexes) against {u['round1_s']:.1f} s then {u['round2_s']:.1f} s kept; "
               "Python driver only, without Spark's JVM"),
        Figure("many_tables", f"driver peak RSS, budget 256 MiB, {total / 1e6:.0f}M keys, GiB",
               small["peak_gib"], "every index kept (no budget)", u["peak_gib"],
               note=f"{small['held_gib']:.2f} GiB of indexes held at the end, "
               f"{small['evictions']:.0f} dropped; rounds {small['round1_s']:.1f} s then "
               f"{small['round2_s']:.1f} s"),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tables", type=int, default=TABLES)
    parser.add_argument("--keys", type=int, default=KEYS)
    parser.add_argument("--child", type=Path)
    parser.add_argument("--budget", type=int, default=0)
    parser.add_argument("--load", type=int, metavar="KEYS", help="only the index load of one table")
    args = parser.parse_args(argv)
    if args.load:
        print(json.dumps(load_seconds(args.load)))
        return
    if args.child is not None:
        print(json.dumps(child(args.child, args.tables, args.keys, args.budget or None)))
        return
    print(render(figures(False, args.tables, args.keys)))


if __name__ == "__main__":
    main()
