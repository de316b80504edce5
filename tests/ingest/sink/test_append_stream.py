"""Append streams end to end: embedded Kafka -> calving-kafka source -> Spark ->
CalvingSink -> Iceberg v3 table, read back by pyiceberg and DuckDB."""

from __future__ import annotations

import json

import pytest

from calving.commit.spec.schema import Schema
from calving.commit.spec.types import NestedField, PrimitiveType
from calving.commit.table.ledger import read_ledger
from calving.commit.table.table import Table, create_table
from calving.ingest.decode import JsonValueDecoder
from calving.ingest.kafka.producer import produce
from calving.ingest.sink.foreach_batch import CalvingSink
from tests.support.oracles import duckdb_rows, pyiceberg_rows
from tests.support.streams import PATHS, drain

pytestmark = pytest.mark.integration

SCHEMA = Schema(
    (
        NestedField(1, "id", PrimitiveType("long"), True),
        NestedField(2, "name", PrimitiveType("string"), False),
        NestedField(3, "amount", PrimitiveType("double"), False),
        NestedField(4, "src_partition", PrimitiveType("int"), False),
        NestedField(5, "src_offset", PrimitiveType("long"), False),
    )
)
COLUMNS = ["id", "name", "amount"]


def _records(n: int, partitions: int):
    for i in range(n):
        value = {"id": i, "name": f"n{i % 97}", "amount": i * 0.5}
        yield (i % partitions, str(i).encode(), json.dumps(value).encode(), None)


def _expected(n: int):
    return sorted((i, f"n{i % 97}", i * 0.5) for i in range(n))


def _sink(table: Table, writer: str = "w1", **kw) -> CalvingSink:
    return CalvingSink(table, lambda schema: JsonValueDecoder(schema), writer, **kw)


@pytest.mark.parametrize("path", PATHS)
def test_append_json_exactly_the_produced_records(
    path, spark, broker, make_topic, sqlite_catalog, tmp_path
):
    topic = make_topic(partitions=4)
    n = 5000
    ends = produce(broker.bootstrap_servers, topic, _records(n, 4))
    table = create_table(sqlite_catalog, ("db", "events"), SCHEMA)
    sink = _sink(table)
    drain(
        spark,
        broker.bootstrap_servers,
        topic,
        sink,
        str(tmp_path / "ckpt"),
        max_offsets_per_trigger=2000,
        path=path,
    )
    table.refresh()
    assert read_ledger(table.metadata, "w1") == {(topic, p): e for p, e in ends.items()}
    assert len(sink.coordinator.history) >= 3  # admission control split the backlog
    expected = _expected(n)
    assert pyiceberg_rows(table.metadata_location, COLUMNS) == expected
    assert duckdb_rows(table.metadata_location, COLUMNS) == expected


def test_replay_without_checkpoint_changes_nothing(
    spark, broker, make_topic, sqlite_catalog, tmp_path
):
    topic = make_topic(partitions=2)
    produce(broker.bootstrap_servers, topic, _records(1000, 2))
    table = create_table(sqlite_catalog, ("db", "replay"), SCHEMA)
    drain(spark, broker.bootstrap_servers, topic, _sink(table), str(tmp_path / "c1"))
    table.refresh()
    before = table.metadata.current_snapshot_id
    # A new checkpoint and a source told to start from the beginning: the ledger filter
    # in the executors drops every record, so no snapshot is made.
    sink = _sink(table)
    from tests.support.streams import kafka_stream

    df = kafka_stream(spark, broker.bootstrap_servers, topic)
    q = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "c2"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    assert q.exception() is None
    table.refresh()
    assert table.metadata.current_snapshot_id == before
    assert all(s.outcome in ("empty", "skipped") for s in sink.coordinator.history)
    assert pyiceberg_rows(table.metadata_location, COLUMNS) == _expected(1000)
