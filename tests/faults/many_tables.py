"""Many-table fault scenarios: one Spark driver (``tests.faults.many_driver``) replicating
a source database's Debezium topics into routed tables, every batch's tables swapped in
one catalog transaction.

* ``many-crash/<point>/<catalog>``: the driver SIGKILLs itself at a commit fault point
  after its first committed batch. Right after the kill, and again after a restart
  drained the topics, the checker requires that every batch's commit shows in all of
  its tables or in none (each snapshot names its batch commit and the tables it
  carries), and at the end every table equals the source (pyiceberg and DuckDB), its
  ledger equal to its topic's end offsets: 0 lost, 0 duplicated.
* ``many-snapshot-crash/<point>/<catalog>``: every table's topic starts with
  Debezium's initial snapshot (op r; 2,000 rows in each plain table, the shop tables as
  500 workload steps left them), then the stream, which updates and deletes snapshot
  rows; batches of 1,000 offsets, so the snapshot spans several batches, and the driver
  is killed at ``point`` in the second one: the scenario requires that some table then
  holds fewer rows than its snapshot (the kill fell in the snapshot phase).
* ``many-catalog-fails-at-start/<catalog>``: killed after its first committed batch,
  the driver restarts against a catalog whose first read during the start (the writer
  registry) fails once with a transient error (``catalog-read-at-start=once-transient``
  through ``CALVING_FAULTS``): the start must retry and go on (the restart's output
  must say the fault fired).
* ``broken/many-per-table-swaps``: a build that swaps each table on its own (outside
  the catalog transaction), killed after the first swap of a batch: the all-or-none
  invariant must catch the half-committed batch.

CI runs both new cases inside the quick chains rather than as more driver runs: the
SQLite chain's source starts with a snapshot (40 rows per plain table), so its first
kill falls in the snapshot phase, and the PostgreSQL chain's draining restart meets the
catalog that fails once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calving.commit.catalog.base import Catalog
from calving.commit.table.ledger import read_ledger
from calving.commit.table.table import Table
from tests.faults.catalogs import CatalogSpec, make_spec
from tests.faults.invariants import Violation
from tests.faults.many_driver import ManyDriverConfig
from tests.faults.scenarios import Context, Scenario, ScenarioResult, register

REPO_ROOT = Path(__file__).resolve().parents[2]
NEEDS = frozenset({"kafka", "spark"})
WRITER = "db"
DRIVER_TIMEOUT_S = 400.0
POINTS = (
    "after-data-files",
    "after-manifest-list",
    "after-metadata-file",
    "before-swap",
    "after-swap",
    "after-swap-before-checkpoint",
)
PLAIN = ("t1", "t2", "t3")
#: The catalog fault a restart may meet: its first catalog read at start fails once.
CATALOG_FAILS_ONCE = "catalog-read-at-start=once-transient"


@dataclass(frozen=True)
class Variant:
    """What a crash scenario adds to the plain chain."""

    #: Rows in each plain table's initial snapshot (0: no snapshot); the shop tables
    #: start with what ``snapshot // 4`` workload steps made.
    snapshot: int = 0
    #: ``max_offsets_per_trigger`` of every run (0: 150 shared out over the kills).
    max_offsets: int = 0
    #: ``CALVING_FAULTS`` of the draining restart.
    restart_faults: str = ""


@dataclass(frozen=True)
class InitialSnapshot:
    """A table's initial snapshot: its rows, and where it ends in each partition of the
    table's topic (the topics start empty)."""

    rows: int
    ends: dict[int, int]


def _source(snapshot: int = 0) -> tuple[Any, dict[str, InitialSnapshot]]:
    """The source database with its events pending, and each table's initial snapshot
    (empty without one). After a snapshot, the stream updates and
    deletes snapshot rows: the shop workload changes and cancels snapshot orders and
    charges snapshot customers, and ``snapshot // 10`` transactions per plain table
    change or delete a random row."""
    import random
    import uuid

    from calving.ingest.demo.database import (
        SHOP_TABLES,
        ShopWorkload,
        SourceDatabase,
        plain_table,
        shop_tables,
    )

    db = SourceDatabase(prefix=f"mf{uuid.uuid4().hex[:8]}", transaction_metadata=False)
    for t in shop_tables(partitions=2):
        db.add_table(t)
    for name in PLAIN:
        db.add_table(plain_table(name))
    work = ShopWorkload(db, seed=21, plain=PLAIN)
    sizes: dict[str, InitialSnapshot] = {}
    if snapshot:
        before = SourceDatabase(prefix=db.prefix, transaction_metadata=False)
        for t in shop_tables(partitions=2):
            before.add_table(t)
        earlier = ShopWorkload(before, seed=5)
        for _ in earlier.steps(snapshot // 4):
            pass
        work.next_id = dict(earlier.next_id)
        rows = {name: list(before.tables[name].rows.values()) for name in SHOP_TABLES}
        rows |= {n: [work.plain_row(n, k) for k in range(1, snapshot + 1)] for n in PLAIN}
        db.snapshot(rows)
        for name, table_rows in rows.items():
            ends = Counter(part for part, *_ in db.pending.get(db.topic(name), []))
            sizes[name] = InitialSnapshot(len(table_rows), dict(ends))
    for _ in work.steps(220):
        pass
    rng = random.Random(22)
    for name in PLAIN if snapshot else ():
        for _ in range(snapshot // 10):
            txn = db.begin()
            key = rng.choice(sorted(db.tables[name].rows))
            if rng.random() < 0.3:
                txn.delete(name, key)
            else:
                txn.upsert(name, work.plain_row(name, key[0]))
            db.commit(txn)
    return db, sizes


def _document(
    db: Any, spec: CatalogSpec, bootstrap: str, workdir: Path, max_offsets: int = 150
) -> dict[str, Any]:
    return {
        "source": {
            "bootstrap_servers": bootstrap,
            "topic_pattern": rf"{db.prefix}\..*",
            "starting_offsets": "earliest",
            "max_offsets_per_trigger": max_offsets,
        },
        "format": {"type": "debezium-json"},
        "table": {
            "catalog": spec.uri,
            "catalog_name": spec.name,
            "warehouse": spec.warehouse,
            "name": "{schema}.{table}",
        },
        "sink": {"writer_id": WRITER, "checkpoint": str(workdir / "checkpoint")},
    }


def _run(cfg: ManyDriverConfig, log: Path, faults: str = "") -> tuple[int | None, list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "CALVING_FAULTS"}
    if faults:
        env["CALVING_FAULTS"] = faults
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYSPARK_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.many_driver", cfg.to_json()],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=DRIVER_TIMEOUT_S)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            out, code = "", None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the JVM and workers with it
            except ProcessLookupError:
                pass
            proc.wait()
    return code, out.splitlines()


def _tables(catalog: Catalog, db: Any) -> dict[str, Table]:
    out = {}
    for name, t in db.tables.items():
        ident = (t.schema, name)
        if catalog.table_exists(ident):
            out[name] = Table.load(catalog, ident)
    return out


def check_all_or_none(tables: dict[str, Table], when: str) -> list[Violation]:
    """Every batch commit seen in any table is in every table it names."""
    from calving.ingest.sink.many.sink import BATCH_COMMIT, BATCH_TABLES

    declared: dict[str, set[str]] = {}
    found: dict[str, set[str]] = {}
    for table in tables.values():
        full = table.name
        for snapshot in table.metadata.snapshots:
            token = snapshot.summary.get(BATCH_COMMIT)
            if token is None:
                continue
            declared[token] = set(snapshot.summary.get(BATCH_TABLES, "").split(","))
            found.setdefault(token, set()).add(full)
    out = []
    for token, names in declared.items():
        if found.get(token, set()) != names:
            missing = sorted(names - found.get(token, set()))
            out.append(
                Violation(
                    "all-or-none",
                    f"{when}: batch commit {token[:8]} shows in {sorted(found.get(token, ()))} "
                    f"but not in {missing}",
                )
            )
    return out


def check_final(
    tables: dict[str, Table], db: Any, ends: dict[str, dict[int, int]]
) -> tuple[list[Violation], int, int]:
    """Rows of every table against the source (two readers), and the ledgers."""
    from tests.support.oracles import duckdb_rows, pyiceberg_rows

    violations: list[Violation] = []
    lost = duplicated = 0
    for name in db.tables:
        table = tables.get(name)
        if table is None:
            violations.append(Violation("rows", f"table {name} was never created"))
            continue
        columns = db.tables[name].column_names
        expected = Counter(db.expected(name))
        for reader, read in (("pyiceberg", pyiceberg_rows), ("duckdb", duckdb_rows)):
            got = Counter(read(table.metadata_location, columns))
            if got != expected:
                lost += sum((expected - got).values())
                duplicated += sum((got - expected).values())
                violations.append(
                    Violation("rows", f"{table.name} read by {reader} differs from the source")
                )
        topic = db.topic(name)
        ledger = {p: o for (t, p), o in read_ledger(table.metadata, WRITER).items() if t == topic}
        if ledger != ends.get(topic, {}):
            violations.append(
                Violation("ledger", f"{table.name}: ledger {ledger} != produced {ends.get(topic)}")
            )
    return violations, lost, duplicated


def crash_scenario(
    points: tuple[str, ...], kind: str, mutation: str = "", variant: Variant = Variant()
) -> Any:
    """Armed at ``points[0]``, the driver dies after its first committed batch; with more
    points the next driver is armed at the next one (a chain: one broker and one source
    for all of them); the last restart drains. All-or-none is checked after every kill.
    With a snapshot, the first kill must fall in the snapshot phase; with restart
    faults, the draining restart must report that they fired."""

    def run(ctx: Context) -> ScenarioResult:
        from calving.ingest.kafka.broker import EmbeddedBroker
        from tests.support.database import create_topics, produce_pending

        result = ScenarioResult("")
        spec = make_spec(kind, ctx.workdir, ctx.pg_url)
        db, snapshot = _source(variant.snapshot)
        with EmbeddedBroker(log_path=ctx.workdir / "tansu.log") as broker:
            create_topics(broker, db)
            ends = produce_pending(broker.bootstrap_servers, db)
            result.produced = sum(sum(e.values()) for e in ends.values())
            # Each kill uses up to two batches (one committed, one cut); the rest drain.
            per_batch = variant.max_offsets or 150 // len(points)
            doc = _document(db, spec, broker.bootstrap_servers, ctx.workdir, per_batch)
            for k, point in enumerate(points):
                armed = ManyDriverConfig(doc, faults=f"{point}=kill", mutation=mutation)
                label = "armed" if len(points) == 1 else f"armed-{k}"
                if not _killed_at(point, armed, ctx.workdir / f"{label}.log", spec, db, result):
                    return result
                if k == 0 and snapshot:
                    result.violations += _in_snapshot_phase(spec, db, snapshot, point)
            code, lines = _run(
                ManyDriverConfig(doc), ctx.workdir / "restart.log", variant.restart_faults
            )
            result.runs += 1
            if code != 0 or "drained" not in lines:
                result.violations.append(
                    Violation("writer", f"restart exited {code}: {lines[-3:]}")
                )
                return result
            for item in filter(None, variant.restart_faults.split(",")):
                point = item.partition("=")[0]
                if f"fired {point}" not in lines:
                    result.violations.append(
                        Violation("harness", f"the restart's fault at {point} never fired")
                    )
                else:
                    result.faults += 1
        catalog = spec.open()
        try:
            tables = _tables(catalog, db)
            result.violations += check_all_or_none(tables, "after the restart")
            found, result.lost, result.duplicated = check_final(tables, db, ends)
            result.violations += found
        finally:
            catalog.close()
        return result

    return run


def _in_snapshot_phase(
    spec: CatalogSpec, db: Any, snapshot: dict[str, InitialSnapshot], point: str
) -> list[Violation]:
    """A harness violation unless some table was still in its initial snapshot when the
    driver was killed at ``point``: it holds fewer rows than its snapshot (a table not
    created yet holds none) and its ledger is short of the snapshot's end offsets, so
    no stream event (no delete) of it was committed yet. Rows are counted from the
    current snapshot's summary (records less deletes): no data file is read."""
    held: dict[str, int] = {}
    catalog = spec.open()
    try:
        tables = _tables(catalog, db)
        for name, snap in snapshot.items():
            table = tables.get(name)
            if table is None:
                held[name] = 0
                continue
            topic = db.topic(name)
            ledger = {
                p: o for (t, p), o in read_ledger(table.metadata, WRITER).items() if t == topic
            }
            if all(ledger.get(p, 0) >= end for p, end in snap.ends.items()):
                continue  # the snapshot is committed
            current = table.metadata.current_snapshot
            summary = current.summary if current is not None else {}
            held[name] = int(summary.get("total-records", 0)) - sum(
                int(summary.get(k, 0)) for k in ("total-position-deletes", "total-equality-deletes")
            )
    finally:
        catalog.close()
    if any(n < snapshot[name].rows for name, n in held.items()):
        return []
    return [
        Violation(
            "harness",
            f"killed at {point} after every table's initial snapshot was committed "
            f"(rows of the tables still in it: {held})",
        )
    ]


def _killed_at(
    point: str, armed: ManyDriverConfig, log: Path, spec: CatalogSpec, db: Any, result: Any
) -> bool:
    """Run ``armed`` until it kills itself at ``point``, then check all-or-none; False
    (with a harness violation) when it exited any other way."""
    code, lines = _run(armed, log)
    result.runs += 1
    if code != -signal.SIGKILL:
        result.violations.append(
            Violation("harness", f"armed driver exited {code}, not at {point}: {lines[-3:]}")
        )
        return False
    result.faults += 1
    catalog = spec.open()
    try:
        result.violations += check_all_or_none(_tables(catalog, db), f"killed at {point}")
    finally:
        catalog.close()
    return True


#: The crash points CI kills a many-table driver at, chained per catalog (one broker
#: and one source database per chain); --full also runs every point on its own.
QUICK_CHAINS = {
    "sqlite": ("after-data-files", "before-swap", "after-swap"),
    "postgres": ("after-metadata-file", "after-swap-before-checkpoint"),
}
#: What the quick chains fold in: the SQLite source starts with an initial snapshot
#: (its first kill falls in the snapshot phase), the PostgreSQL chain's draining
#: restart meets a catalog that fails once during the start.
QUICK_VARIANTS = {
    "sqlite": Variant(snapshot=40),
    "postgres": Variant(restart_faults=CATALOG_FAILS_ONCE),
}
#: The full snapshot scenario: a few thousand rows per table, batches of 1,000 offsets.
SNAPSHOT = Variant(snapshot=2000, max_offsets=1000)
for _kind in ("sqlite", "postgres"):
    _needs = NEEDS | ({"postgres"} if _kind == "postgres" else set())
    for _point in POINTS:
        register(
            Scenario(
                f"many-crash/{_point}/{_kind}",
                "many-crash",
                crash_scenario((_point,), _kind),
                needs=_needs,
            )
        )
    register(
        Scenario(
            f"many-crash/{'+'.join(QUICK_CHAINS[_kind])}/{_kind}",
            "many-crash",
            crash_scenario(QUICK_CHAINS[_kind], _kind, variant=QUICK_VARIANTS[_kind]),
            quick=True,
            needs=_needs,
        )
    )
    for _point in POINTS:
        register(
            Scenario(
                f"many-snapshot-crash/{_point}/{_kind}",
                "many-snapshot",
                crash_scenario((_point,), _kind, variant=SNAPSHOT),
                needs=_needs,
            )
        )
    register(
        Scenario(
            f"many-catalog-fails-at-start/{_kind}",
            "many-start-fault",
            crash_scenario(
                ("after-swap",), _kind, variant=Variant(restart_faults=CATALOG_FAILS_ONCE)
            ),
            needs=_needs,
        )
    )
register(
    Scenario(
        "broken/many-per-table-swaps",
        "broken",
        crash_scenario(("after-swap",), "sqlite", mutation="per-table-swaps"),
        quick=True,
        needs=NEEDS,
        expect_violations=True,
    )
)
