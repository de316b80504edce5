"""Start-up of a many-table pipeline in a crowded catalog (issue 22 part 2).

A writer with ``OWN`` tables (ledgers registered as a running pipeline leaves them) in
a SQLite catalog, then the same catalog with ``FOREIGN`` more tables of other writers
spread over 50 namespaces, one of them the writer's own. Measured: a new sink's
``starting_ledger`` (what ``calving run`` does before its first batch), median of
several rounds, each with a new catalog connection. Peer: the same start in the
catalog without the foreign tables. Also shown: the start of the earlier design
(every table of the catalog loaded for its ledger) in the crowded catalog.

    python -m tests.bench.many_tables_start [--foreign 5000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from tests.bench.figures import Figure, at_most, render

OWN = 20
FOREIGN = 5_000
GOAL = 1.2
WRITER = "bench-db"


def _catalog(root: Path) -> Any:
    from calving.commit.catalog.sql import SqlCatalog

    return SqlCatalog("bench", f"sqlite:///{root / 'c.db'}", str(root / "wh"))


def _own_tables(root: Path) -> None:
    """``OWN`` tables in ``db``, each holding the writer's ledger, registered."""
    from calving.commit.spec.schema import Schema
    from calving.commit.spec.types import NestedField, PrimitiveType
    from calving.commit.table.actions.fast_append import FastAppend
    from calving.commit.table.ledger import LedgerClaim, OffsetRange
    from calving.commit.table.table import create_table
    from calving.ingest.sink.many.registry import WriterRegistry
    from calving.ingest.write.parquet_writer import write_data_file

    catalog = _catalog(root)
    schema = Schema((NestedField(1, "id", PrimitiveType("long"), True),), identifier_field_ids=(1,))
    catalog.create_namespace(("db",))
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    registry = WriterRegistry(catalog, WRITER)
    for i in range(OWN):
        table = create_table(catalog, ("db", f"t{i}"), schema)
        registry.register([table.ident], catalog.io)
        f = write_data_file(table.io, f"{table.metadata.location}/data/{i}.parquet", rows, schema)
        claim = LedgerClaim(WRITER, {(f"db.t{i}", 0): OffsetRange(0, 3 + i)})
        table.commit_or_raise(FastAppend((f,), ledger=claim))
    catalog.close()


def _foreign_tables(root: Path, count: int) -> None:
    """``count`` catalog entries of other writers in 50 namespaces (``db`` among them),
    all pointing at one real table's metadata, as bulk rows."""
    import sqlalchemy as sa

    from calving.commit.catalog.sql_database import ICEBERG_TABLES
    from calving.commit.spec.schema import Schema
    from calving.commit.spec.types import NestedField, PrimitiveType
    from calving.commit.table.table import create_table

    catalog = _catalog(root)
    catalog.create_namespace(("other0",))
    schema = Schema((NestedField(1, "id", PrimitiveType("long"), True),))
    location = create_table(catalog, ("other0", "template"), schema).metadata_location
    rows = [
        {
            "catalog_name": "bench",
            "table_namespace": "db" if i % 50 == 0 else f"other{i % 50}",
            "table_name": f"foreign{i}",
            "metadata_location": location,
            "previous_metadata_location": None,
            "iceberg_type": "TABLE",
        }
        for i in range(count - 1)
    ]
    with catalog.engine.begin() as conn:
        conn.execute(sa.insert(ICEBERG_TABLES), rows)
    catalog.close()


def _start(root: Path, scan: bool) -> float:
    """Seconds of one start: the registry's (``scan`` False) or the whole-catalog
    scan of the earlier design."""
    from calving.commit.table.ledger import read_ledger
    from calving.ingest.sink.many import start
    from calving.ingest.sink.many.registry import WriterRegistry

    catalog = _catalog(root)
    started = time.perf_counter()
    if scan:
        found = [read_ledger(t.metadata, WRITER) for t in start.every_table(catalog, catalog.io)]
    else:
        registry = WriterRegistry(catalog, WRITER)
        found = [read_ledger(t.metadata, WRITER) for t in registry.tables(catalog.io)]
    took = time.perf_counter() - started
    catalog.close()
    assert sum(1 for ledger in found if ledger) == OWN, "every own table's ledger is read"
    return took


def startup(foreign: int = FOREIGN, rounds: int = 5) -> tuple[float, float, float]:
    """Median seconds: (registry start, crowded catalog), (registry start, own tables
    only), (whole-catalog scan, crowded catalog)."""
    empty = Path(tempfile.mkdtemp(prefix="calving-bench-start-"))
    crowded = Path(tempfile.mkdtemp(prefix="calving-bench-start-crowded-"))
    for root in (empty, crowded):
        _own_tables(root)
    _foreign_tables(crowded, foreign)
    alone = statistics.median(_start(empty, scan=False) for _ in range(rounds))
    among = statistics.median(_start(crowded, scan=False) for _ in range(rounds))
    scanned = statistics.median(_start(crowded, scan=True) for _ in range(max(1, rounds // 2)))
    return among, alone, scanned


def figures(quick: bool = True, foreign: int = FOREIGN) -> list[Figure]:
    """The same size quick or full: the crowded catalog takes about 10 s."""
    among, alone, scanned = startup(foreign)
    return [
        Figure("many_tables", f"start with {foreign:,} foreign tables, ms", among * 1000,
               f"start with only its {OWN} tables", alone * 1000,
               goal=f"<= {GOAL}x", met=at_most(among / alone, GOAL),
               note=f"SQLite catalog, {OWN} registered tables; loading every table of the "
               f"crowded catalog (the earlier start) took {scanned * 1000:,.0f} ms"),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--foreign", type=int, default=FOREIGN)
    args = parser.parse_args(argv)
    print(render(figures(foreign=args.foreign)))


if __name__ == "__main__":
    main()
