"""``calving demo``: broker, generator, stream, progress, read-back check.

Every run creates a new table (``demo.orders_<time>``) because the embedded broker keeps
topics in memory: a new broker starts its offsets at 0 again, and the table's ledger of
an earlier run would (rightly) treat those offsets as already committed.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from calving.commit.errors import CalvingError
from calving.ingest.config.loader import parse_config
from calving.ingest.demo.generator import COLUMN_NAMES, COLUMNS, CdcGenerator, ChangeStream
from calving.ingest.demo.progress import Progress
from calving.ingest.demo.streaming import stream_while_producing
from calving.ingest.demo.verify import (
    ReadBack,
    compare,
    duckdb_available,
    duckdb_rows,
    pyiceberg_rows,
)
from calving.ingest.kafka.broker import EmbeddedBroker
from calving.ingest.kafka.producer import produce
from calving.ingest.pipeline import Pipeline, build_pipeline, spark_session
from calving.ingest.sink.foreach_batch import CalvingSink

log = logging.getLogger("calving.demo")

CATALOG_NAME = "calving"
WRITER_ID = "demo"


@dataclass(frozen=True)
class DemoOptions:
    warehouse: Path
    events: int = 100_000
    keys: int | None = None  # default: events / 5
    partitions: int = 4
    poison: int = 5
    max_offsets_per_trigger: int = 20_000
    trigger_interval: str = "1 second"
    chunk: int = 5_000
    timeout: float = 1800.0
    progress: bool = True
    seed: int = 2026


@dataclass
class DemoResult:
    catalog_uri: str
    table: str
    dead_letter_table: str
    stream: ChangeStream
    readbacks: list[ReadBack]
    dead_letters: int
    dv_files: int
    equality_delete_files: int
    seconds: float
    #: Row updates the table's change feed shows, by whether the row kept its
    #: ``_row_id`` (UPDATE_BEFORE/UPDATE_AFTER) or got a new one (DELETE + INSERT of the
    #: same key in one snapshot).
    updates_kept_identity: int = 0
    updates_new_identity: int = 0

    @property
    def ok(self) -> bool:
        return (
            all(r.ok for r in self.readbacks)
            and self.dead_letters == self.stream.poison
            and self.equality_delete_files == 0
        )


def demo_config(opts: DemoOptions, bootstrap: str, topic: str, table: str) -> dict[str, Any]:
    """The pipeline config the demo runs (the same shape as ``config/orders-cdc.toml``)."""
    warehouse = opts.warehouse.resolve()
    return {
        "source": {
            "bootstrap_servers": bootstrap,
            "topics": [topic],
            "starting_offsets": "earliest",
            "max_offsets_per_trigger": opts.max_offsets_per_trigger,
        },
        "format": {"type": "debezium-json"},
        "table": {
            "catalog": f"sqlite:///{warehouse / 'catalog.db'}",
            "catalog_name": CATALOG_NAME,
            "warehouse": str(warehouse),
            "name": f"demo.{table}",
            "identifier_fields": ["id"],
            "partition": ["bucket(4, id)"],
            "columns": [dict(c) for c in COLUMNS],
        },
        "sink": {
            "writer_id": WRITER_ID,
            "checkpoint": str(warehouse / "checkpoints" / table),
            "trigger_interval": opts.trigger_interval,
            "dead_letter_table": f"{table}_dead_letters",
        },
        "spark": {
            "master": "local[2]",
            "app_name": "calving-demo",
            "conf": {
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.host": "127.0.0.1",
                "spark.sql.session.timeZone": "UTC",
                "spark.ui.showConsoleProgress": "false",
            },
        },
    }


def run_demo(opts: DemoOptions, out: TextIO = sys.stdout) -> DemoResult:
    started = time.monotonic()
    opts.warehouse.mkdir(parents=True, exist_ok=True)
    table_name = "orders_" + dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d_%H%M%S")
    generator = CdcGenerator(
        opts.events, opts.keys or max(1, opts.events // 5), opts.partitions,
        poison=opts.poison, seed=opts.seed,
    )  # fmt: skip
    broker_log = opts.warehouse / "tansu.log"
    with EmbeddedBroker(log_path=broker_log) as broker:
        topic = "shop.orders"
        broker.create_topic(topic, opts.partitions)
        print(f"broker     Tansu at {broker.bootstrap_servers} (topic {topic}, "
              f"{opts.partitions} partitions)", file=out)  # fmt: skip
        config = parse_config(
            demo_config(opts, broker.bootstrap_servers, topic, table_name), "calving demo"
        )
        progress = Progress(out, enabled=opts.progress)
        spark = spark_session(config.spark, log_level="ERROR")
        pipeline = build_pipeline(config, spark, on_batch=progress.on_batch)
        print(f"table      {pipeline.one_table.name} in {config.table.catalog}", file=out)
        print(f"generating {opts.events:,} change events over {generator.keys:,} keys "
              f"({opts.poison} poison records)", file=out)  # fmt: skip
        ends = _stream(pipeline, broker.bootstrap_servers, topic, generator, opts, progress)
        progress.finish()
        pipeline.one_table.refresh()
        ledger = pipeline.one_table.ledger(WRITER_ID)
        if ledger != {(topic, p): e for p, e in ends.items()}:
            raise CalvingError(f"the ledger {ledger} does not cover what was produced {ends}")
    return _check(config, pipeline, generator.stream, progress, time.monotonic() - started)


def _stream(
    pipeline: Pipeline,
    bootstrap: str,
    topic: str,
    generator: CdcGenerator,
    opts: DemoOptions,
    progress: Progress,
) -> dict[int, int]:
    """Produce in a background thread while the stream runs; return the end offsets once
    the table's ledger has reached them."""
    ends: dict[int, int] = {}

    def producer() -> None:
        for chunk in generator.chunks(opts.chunk):
            ends.update(produce(bootstrap, topic, chunk))
            progress.produced(len(chunk))

    def caught_up() -> bool:
        target = {(topic, p): e for p, e in ends.items()}
        return pipeline.one_table.refresh().ledger(WRITER_ID) == target

    stream_while_producing(pipeline, producer, caught_up, opts.timeout, progress.draw)
    return dict(ends)


def _check(
    config: Any, pipeline: Pipeline, stream: ChangeStream, progress: Progress, seconds: float
) -> DemoResult:
    table = pipeline.one_table
    expected = stream.expected_rows()
    readbacks = [
        compare(
            "pyiceberg (its own SqlCatalog)",
            pyiceberg_rows(
                config.table.catalog,
                CATALOG_NAME,
                config.table.warehouse,
                table.name,
                COLUMN_NAMES,
            ),
            expected,
        )
    ]
    if duckdb_available():
        readbacks.append(
            compare(
                "DuckDB iceberg_scan", duckdb_rows(table.metadata_location, COLUMN_NAMES), expected
            )
        )
    live = table.live_files()
    equality = _non_dv_delete_files(table, live.manifests)
    assert isinstance(pipeline.sink, CalvingSink)
    dead = pipeline.sink.coordinator.dead_letter_table
    dead_rows = 0
    if dead is not None:
        dead.refresh()
        dead_rows = sum(e.data_file.record_count for e in dead.live_files().data.values())
    kept, new = update_identities(table)
    return DemoResult(
        catalog_uri=config.table.catalog,
        table=table.name,
        dead_letter_table=dead.name if dead is not None else "-",
        stream=stream,
        readbacks=readbacks,
        dead_letters=dead_rows,
        dv_files=len(live.dvs),
        equality_delete_files=equality,
        seconds=seconds,
        updates_kept_identity=kept,
        updates_new_identity=new,
    )


def update_identities(table: Any, key: str = "id") -> tuple[int, int]:
    """The table's row updates over its whole history, from its change feed: how many
    kept their ``_row_id`` and how many were written as a new row (a DELETE and an
    INSERT of the same ``key`` in one snapshot)."""
    import pyarrow.compute as pc

    from calving.commit.changelog import read_changes

    changes = read_changes(table.io, table.metadata, None)
    kinds = changes.column("_change_type")
    kept = pc.sum(pc.equal(kinds, "UPDATE_AFTER")).as_py() or 0

    def keyed(kind: str) -> Any:
        rows = changes.filter(pc.equal(kinds, kind))
        return rows.select(["_change_ordinal", key])

    both = keyed("DELETE").join(keyed("INSERT"), ["_change_ordinal", key], join_type="inner")
    return int(kept), both.num_rows


def _non_dv_delete_files(table: Any, manifests: Any) -> int:
    """Live delete files that are not deletion vectors (equality deletes, v2 position
    delete files): calving must never write any."""
    from calving.commit.spec.data_file import EntryStatus, FileContent, ManifestContent
    from calving.commit.table.scan import manifest_entries

    return sum(
        1
        for mf in manifests
        if mf.content == ManifestContent.DELETES
        for e in manifest_entries(table.io, table.metadata, mf)
        if e.status != EntryStatus.DELETED
        and (
            e.data_file.content == FileContent.EQUALITY_DELETES
            or not e.data_file.referenced_data_file
        )
    )


def report(result: DemoResult, out: TextIO = sys.stdout) -> None:
    s = result.stream
    print(file=out)
    print(f"produced   {s.records:,} Kafka records: {s.creates:,} creates, {s.updates:,} updates, "
          f"{s.deletes:,} deletes, {s.tombstones:,} tombstones, {s.poison} poison", file=out)  # fmt: skip
    print(f"expected   {len(s.final):,} live orders", file=out)
    for r in result.readbacks:
        verdict = "OK" if r.ok else f"MISMATCH ({r.missing} missing, {r.unexpected} unexpected)"
        print(f"read back  {r.reader}: {r.rows:,} rows  {verdict}", file=out)
        for example in r.examples:
            print(f"           {example}", file=out)
    dl_ok = "OK" if result.dead_letters == s.poison else "MISMATCH"
    print(f"dead letters {result.dead_letters} in {result.dead_letter_table} "
          f"(expected {s.poison}) {dl_ok}", file=out)  # fmt: skip
    print(f"deletes    as {result.dv_files} deletion vectors, "
          f"{result.equality_delete_files} equality-delete files", file=out)  # fmt: skip
    print(f"lineage    {result.updates_kept_identity:,} row updates kept their _row_id; "
          f"{result.updates_new_identity:,} keys were deleted and inserted in one snapshot "
          "(a new _row_id) (calving changes)", file=out)  # fmt: skip
    print(f"catalog    {result.catalog_uri}", file=out)
    print(f"table      {result.table}", file=out)
    print(f"took       {result.seconds:.1f}s", file=out)
    print("RESULT     " + ("PASS" if result.ok else "FAIL"), file=out)
