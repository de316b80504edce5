"""``calving demo --tables N``: a whole source database into N tables, end to end.

The embedded broker carries Debezium JSON topics of a source database (customers,
orders, order lines changed in multi-table transactions, plus N-3 plain tables) and its
transaction topic; one pipeline with source-transaction boundaries replicates them while
the generator produces. After every commit the demo reads the three shop tables back
(pyiceberg) and checks them across tables: every order line's order and every order's
customer exist, and each order's total is the sum of its lines. At the end every table is
read back by pyiceberg and DuckDB and compared with the source.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from calving.commit.errors import CalvingError
from calving.ingest.config.loader import parse_config
from calving.ingest.demo.database import (
    SHOP_TABLES,
    ShopWorkload,
    SourceDatabase,
    consistency_problems,
    plain_table,
    shop_tables,
)
from calving.ingest.demo.streaming import stream_while_producing
from calving.ingest.demo.verify import (
    ReadBack,
    compare,
    duckdb_available,
    duckdb_rows,
    rows_of,
)
from calving.ingest.kafka.broker import EmbeddedBroker
from calving.ingest.kafka.producer import produce
from calving.ingest.pipeline import build_pipeline, spark_session
from calving.ingest.sink.many.sink import ManyBatchStats, ManyTablesSink

WRITER_ID = "demo-db"


@dataclass(frozen=True)
class ManyDemoOptions:
    warehouse: Path
    tables: int = 5
    transactions: int = 3000
    partitions: int = 2
    max_offsets_per_trigger: int = 4000
    trigger_interval: str = "1 second"
    chunk: int = 100
    #: Seconds between produced chunks, so that batches (and checks) come one by one.
    pace: float = 0.2
    timeout: float = 1800.0
    seed: int = 2026


@dataclass
class ManyDemoResult:
    catalog_uri: str
    tables: list[str]
    transactions: int
    records: int
    readbacks: dict[str, list[ReadBack]] = field(default_factory=dict)
    commits_checked: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        every = [r.ok for rs in self.readbacks.values() for r in rs]
        return bool(every) and all(every) and not self.problems and self.commits_checked > 0


def many_config(opts: ManyDemoOptions, db: SourceDatabase, bootstrap: str) -> dict[str, Any]:
    warehouse = opts.warehouse.resolve()
    return {
        "source": {
            "bootstrap_servers": bootstrap,
            "topic_pattern": rf"{db.prefix}\.(shop|inventory)\..*",
            "starting_offsets": "earliest",
            "max_offsets_per_trigger": opts.max_offsets_per_trigger,
        },
        "format": {"type": "debezium-json"},
        "table": {
            "catalog": f"sqlite:///{warehouse / 'catalog.db'}",
            "warehouse": str(warehouse),
            "name": "{schema}.{table}",
        },
        "tables": {"shop.orders": {"partition": ["month(created_at)"]}},
        "sink": {
            "writer_id": WRITER_ID,
            "checkpoint": str(warehouse / "checkpoints" / db.prefix),
            "trigger_interval": opts.trigger_interval,
            "transaction_topic": db.transaction_topic,
        },
        "spark": {
            "master": "local[2]",
            "app_name": "calving-demo-tables",
            "conf": {
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.host": "127.0.0.1",
                "spark.sql.session.timeZone": "UTC",
                "spark.ui.showConsoleProgress": "false",
            },
        },
    }


def source_database(opts: ManyDemoOptions) -> tuple[SourceDatabase, ShopWorkload]:
    if opts.tables < 3:
        raise CalvingError("--tables: the demo needs at least 3 tables (customers, orders, lines)")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d_%H%M%S")
    db = SourceDatabase(prefix=f"demo{stamp}")
    for t in shop_tables(opts.partitions):
        db.add_table(t)
    plain = tuple(f"stock_{i:02d}" for i in range(1, opts.tables - 2))
    for name in plain:
        db.add_table(plain_table(name, opts.partitions))
    return db, ShopWorkload(db, seed=opts.seed, plain=plain)


class CommitChecker:
    """After every commit: the shop tables as a reader sees them, checked across tables."""

    def __init__(self) -> None:
        self.sink: ManyTablesSink | None = None
        self.checked = 0
        self.problems: list[str] = []

    def __call__(self, stats: ManyBatchStats) -> None:
        if self.sink is None or not stats.committed:
            return
        from pyiceberg.table import StaticTable

        rows = {}
        for name in SHOP_TABLES:
            routed = self.sink.tables.get(f"shop.{name}")
            if routed is None:
                return
            location = routed.table.refresh().metadata_location
            rows[name] = StaticTable.from_metadata(location).scan().to_arrow().to_pylist()
        self.checked += 1
        found = consistency_problems(rows["customers"], rows["orders"], rows["order_lines"])
        self.problems += [f"after batch {stats.batch_id}: {p}" for p in found[:5]]


def run_many_demo(opts: ManyDemoOptions, out: TextIO = sys.stdout) -> ManyDemoResult:
    started = time.monotonic()
    opts.warehouse.mkdir(parents=True, exist_ok=True)
    db, work = source_database(opts)
    with EmbeddedBroker(log_path=opts.warehouse / "tansu.log") as broker:
        for name, t in db.tables.items():
            broker.create_topic(db.topic(name), t.partitions)
        broker.create_topic(db.transaction_topic, 1)
        config = parse_config(many_config(opts, db, broker.bootstrap_servers), "calving demo")
        print(f"broker     Tansu at {broker.bootstrap_servers}: {len(db.tables)} table topics "
              f"and {db.transaction_topic}", file=out)  # fmt: skip
        checker = CommitChecker()
        spark = spark_session(config.spark, log_level="ERROR")
        pipeline = build_pipeline(config, spark, on_batch=checker)
        sink = pipeline.sink
        assert isinstance(sink, ManyTablesSink)
        checker.sink = sink
        print(f"generating {opts.transactions:,} source transactions", file=out)
        ends = _stream(pipeline, sink, broker.bootstrap_servers, db, work, opts)
        records = sum(sum(e.values()) for e in ends.values())
    result = ManyDemoResult(
        config.table.catalog,
        sorted(sink.tables),
        db.transactions,
        records,
        commits_checked=checker.checked,
        problems=checker.problems,
    )
    for name in db.tables:
        routed = sink.tables[f"{db.tables[name].schema}.{name}"]
        result.readbacks[routed.name] = _read_back(routed.table, db, name)
    result.seconds = time.monotonic() - started
    return result


def _stream(
    pipeline: Any,
    sink: ManyTablesSink,
    bootstrap: str,
    db: SourceDatabase,
    work: ShopWorkload,
    opts: ManyDemoOptions,
) -> dict[str, dict[int, int]]:
    """Produce while the stream runs; return end offsets once every table's ledger
    reached them."""
    ends: dict[str, dict[int, int]] = {}

    def producer() -> None:
        left = opts.transactions
        while left > 0:
            n = min(opts.chunk, left)
            for _ in work.steps(n):
                pass
            left -= n
            for topic, records in db.take_records().items():
                ends.setdefault(topic, {}).update(produce(bootstrap, topic, records))
            time.sleep(opts.pace)

    stream_while_producing(
        pipeline, producer, lambda: _caught_up(sink, db, ends), opts.timeout, poll=0.5
    )
    return ends


def _caught_up(sink: ManyTablesSink, db: SourceDatabase, ends: dict[str, dict[int, int]]) -> bool:
    from calving.commit.table.ledger import read_ledger

    for name, t in db.tables.items():
        routed = sink.tables.get(f"{t.schema}.{name}")
        if routed is None:
            return False
        topic = db.topic(name)
        ledger = read_ledger(routed.table.refresh().metadata, WRITER_ID)
        if any(ledger.get((topic, p), 0) < e for p, e in ends.get(topic, {}).items()):
            return False
    return True


def _read_back(table: Any, db: SourceDatabase, name: str) -> list[ReadBack]:
    from pyiceberg.table import StaticTable

    columns = db.tables[name].column_names
    expected = db.expected(name)
    scanned = StaticTable.from_metadata(table.metadata_location).scan().to_arrow()
    out = [compare("pyiceberg", rows_of(scanned, columns), expected)]
    if duckdb_available():
        out.append(compare("DuckDB", duckdb_rows(table.metadata_location, columns), expected))
    return out


def report_many(result: ManyDemoResult, out: TextIO = sys.stdout) -> None:
    print(file=out)
    print(f"produced   {result.records:,} Kafka records from {result.transactions:,} source "
          f"transactions into {len(result.tables)} tables", file=out)  # fmt: skip
    for name, readbacks in result.readbacks.items():
        verdicts = ", ".join(
            f"{r.reader} {r.rows:,} rows " + ("OK" if r.ok else f"MISMATCH ({r.missing} missing, "
                                                          f"{r.unexpected} unexpected)")
            for r in readbacks
        )  # fmt: skip
        print(f"read back  {name}: {verdicts}", file=out)
    verdict = "OK" if not result.problems else f"{len(result.problems)} PROBLEM(S)"
    print(f"consistency after each of {result.commits_checked} commits "
          f"(lines have orders, orders have customers, totals add up): {verdict}", file=out)  # fmt: skip
    for p in result.problems[:5]:
        print(f"           {p}", file=out)
    print(f"catalog    {result.catalog_uri}", file=out)
    print(f"result     {'PASS' if result.ok else 'FAIL'} in {result.seconds:.1f}s", file=out)
