"""The issue's end-to-end acceptance sizes: 100k JSON records over 4 partitions, and a
Debezium stream of 100k events over 20k keys (>= 30% updates and deletes)."""

from __future__ import annotations

import json

import pytest

from calving.commit.table.table import create_table
from calving.ingest.decode import DebeziumDecoder, JsonValueDecoder
from calving.ingest.kafka.producer import produce
from calving.ingest.sink.foreach_batch import CalvingSink
from tests.ingest.sink.test_append_stream import COLUMNS as APPEND_COLUMNS
from tests.ingest.sink.test_append_stream import SCHEMA as APPEND_SCHEMA
from tests.support.cdc import COLUMNS, SCHEMA, cdc_events
from tests.support.oracles import duckdb_rows, pyiceberg_rows
from tests.support.streams import drain

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_append_100k_json_records(spark, broker, make_topic, sqlite_catalog, tmp_path):
    topic = make_topic(partitions=4)
    n = 100_000
    records = (
        (i % 4, None, json.dumps({"id": i, "name": f"n{i % 97}", "amount": i * 0.5}).encode(), None)
        for i in range(n)
    )
    ends = produce(broker.bootstrap_servers, topic, records)
    assert sum(ends.values()) == n
    table = create_table(sqlite_catalog, ("db", "events"), APPEND_SCHEMA)
    sink = CalvingSink(table, JsonValueDecoder, "events")
    drain(spark, broker.bootstrap_servers, topic, sink, str(tmp_path / "ckpt"),
          max_offsets_per_trigger=40_000)  # fmt: skip
    table.refresh()
    expected = sorted((i, f"n{i % 97}", i * 0.5) for i in range(n))
    assert pyiceberg_rows(table.metadata_location, APPEND_COLUMNS) == expected
    assert duckdb_rows(table.metadata_location, APPEND_COLUMNS) == expected
    assert table.ledger("events") == {(topic, p): e for p, e in ends.items()}


def test_debezium_100k_events_over_20k_keys(spark, broker, make_topic, sqlite_catalog, tmp_path):
    topic = make_topic(partitions=4)
    stream = cdc_events(keys=20_000, events=100_000, partitions=4, seed=2026)
    assert (stream.updates + stream.deletes) / 100_000 >= 0.30
    assert any(value is None for _, _, value, _ in stream.records), "tombstones included"
    produce(broker.bootstrap_servers, topic, stream.records)
    table = create_table(sqlite_catalog, ("db", "orders"), SCHEMA)
    sink = CalvingSink(table, DebeziumDecoder, "orders")
    drain(spark, broker.bootstrap_servers, topic, sink, str(tmp_path / "ckpt"),
          max_offsets_per_trigger=25_000)  # fmt: skip
    table.refresh()
    assert pyiceberg_rows(table.metadata_location, COLUMNS) == stream.expected
    assert duckdb_rows(table.metadata_location, COLUMNS) == stream.expected
    live = table.live_files()
    assert live.dvs and all(
        e.data_file.content.name == "POSITION_DELETES" for e in live.dvs.values()
    )
    assert not any(e.data_file.content.name == "EQUALITY_DELETES" for e in live.data.values())
    assert len(live.dvs) <= len(live.data)  # at most one DV per data file
