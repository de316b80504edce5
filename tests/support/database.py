"""Many-table pipelines in tests: a ``SourceDatabase`` on the embedded broker, the
pipeline config that replicates it, and read-backs of every table by three readers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from calving.ingest.config.loader import CalvingConfig, parse_config
from calving.ingest.demo.database import SourceDatabase
from calving.ingest.kafka.producer import produce
from tests.support.oracles import datafusion_rows, duckdb_rows, pyiceberg_rows

WRITER = "db"


def create_topics(broker: Any, db: SourceDatabase, tables: list[str] | None = None) -> None:
    for name in tables or list(db.tables):
        broker.create_topic(db.topic(name), db.tables[name].partitions)


def produce_pending(bootstrap: str, db: SourceDatabase) -> dict[str, dict[int, int]]:
    """Produce every pending record of ``db``; end offsets by topic."""
    return {
        topic: produce(bootstrap, topic, records) for topic, records in db.take_records().items()
    }


def many_config(
    db: SourceDatabase,
    bootstrap: str,
    catalog: str,
    warehouse: Path,
    *,
    tables: dict[str, Any] | None = None,
    max_offsets: int = 400,
    trigger: str = "1 second",
    transaction_topic: str | None = None,
    transaction_timeout: str | None = None,
    dead_letter_table: str | None = "ops.dead_letters",
    topic_prefix: str | None = None,
) -> CalvingConfig:
    """The pipeline config replicating ``db`` (its Avro schemas from ``db.schema_dir``
    when it writes Avro)."""
    pattern = rf"{db.prefix}\.(shop|inventory)\..*"
    doc: dict[str, Any] = {
        "source": {
            "bootstrap_servers": bootstrap,
            "topic_pattern": pattern,
            "starting_offsets": "earliest",
            "max_offsets_per_trigger": max_offsets,
        },
        "format": (
            {"type": "debezium-avro", "key_format": "avro", "schema_dir": str(db.schema_dir)}
            if db.schema_dir is not None
            else {"type": "debezium-json"}
        ),
        "table": {
            "catalog": catalog,
            "warehouse": str(warehouse),
            "name": "{schema}.{table}",
        },
        "sink": {
            "writer_id": WRITER,
            "checkpoint": str(warehouse / "checkpoint"),
            "trigger_interval": trigger,
        },
        "spark": {"master": "local[2]"},
    }
    if dead_letter_table:
        doc["sink"]["dead_letter_table"] = dead_letter_table
    if tables:
        doc["tables"] = tables
    if transaction_topic:
        doc["sink"]["transaction_topic"] = transaction_topic
    if transaction_timeout:
        doc["sink"]["transaction_timeout"] = transaction_timeout
    if topic_prefix:
        doc["sink"]["topic_prefix"] = topic_prefix
    return parse_config(doc, "many-tables test")


def read_back(metadata_location: str, columns: tuple[str, ...]) -> dict[str, list[tuple]]:
    return {
        "pyiceberg": pyiceberg_rows(metadata_location, columns),
        "duckdb": duckdb_rows(metadata_location, columns),
        "datafusion": datafusion_rows(metadata_location, columns),
    }


def wait_until(what: str, check: Any, timeout: float = 120.0, query: Any = None) -> None:
    """Poll ``check()`` until true; fail naming ``what`` (or the query's error)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query is not None and query.exception() is not None:
            raise AssertionError(f"the stream failed: {query.exception()}")
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")
