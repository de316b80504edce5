"""CDC streams end to end: Debezium JSON on the embedded broker -> keyed Iceberg table
whose deletes and updates are deletion vectors, read back by pyiceberg and DuckDB."""

from __future__ import annotations

import pytest

from calving.commit.table.table import Table, create_table
from calving.ingest.decode import DebeziumDecoder
from calving.ingest.kafka.producer import produce
from calving.ingest.sink.foreach_batch import CalvingSink
from tests.support.cdc import COLUMNS, SCHEMA, cdc_events
from tests.support.oracles import duckdb_rows, pyiceberg_rows
from tests.support.streams import PATHS, drain

pytestmark = pytest.mark.integration


def _sink(table: Table, **kw) -> CalvingSink:
    return CalvingSink(table, lambda schema: DebeziumDecoder(schema), "cdc", **kw)


@pytest.mark.parametrize("path", PATHS)
def test_debezium_updates_and_deletes_become_deletion_vectors(
    path, spark, broker, make_topic, sqlite_catalog, tmp_path
):
    topic = make_topic(partitions=3)
    stream = cdc_events(keys=300, events=3000, partitions=3)
    expected = stream.expected
    produce(broker.bootstrap_servers, topic, stream.records)
    table = create_table(sqlite_catalog, ("db", "cdc"), SCHEMA)
    sink = _sink(table, index_save_every=2)
    drain(
        spark,
        broker.bootstrap_servers,
        topic,
        sink,
        str(tmp_path / "ckpt"),
        max_offsets_per_trigger=700,
        path=path,
    )
    table.refresh()
    assert pyiceberg_rows(table.metadata_location, COLUMNS) == expected
    assert duckdb_rows(table.metadata_location, COLUMNS) == expected
    live = table.live_files()
    assert live.dvs, "deletes must be deletion vectors"
    assert all(e.data_file.content.name == "POSITION_DELETES" for e in live.dvs.values())
    assert sum(s.deleted_rows for s in sink.coordinator.history) > 0
    # The index is saved with the table and matches it.
    from calving.commit.index import INDEX_LOCATION_PROPERTY, load_current

    assert INDEX_LOCATION_PROPERTY in table.metadata.properties
    index = load_current(table.io, table.metadata)
    assert index is not None and len(index) == len(expected)


@pytest.mark.parametrize("path", PATHS)
def test_restart_catches_the_index_up_and_stays_exact(
    path, spark, broker, make_topic, sqlite_catalog, tmp_path
):
    topic = make_topic(partitions=2)
    stream = cdc_events(keys=200, events=1500, partitions=2, seed=11)
    first, second = stream.records[:800], stream.records[800:]
    produce(broker.bootstrap_servers, topic, first)
    table = create_table(sqlite_catalog, ("db", "cdc2"), SCHEMA)
    ckpt = str(tmp_path / "ckpt")
    drain(spark, broker.bootstrap_servers, topic, _sink(table), ckpt, path=path)
    produce(broker.bootstrap_servers, topic, second)
    # A new sink (as after a driver restart): loads the saved index, catches it up.
    drain(spark, broker.bootstrap_servers, topic, _sink(table), ckpt, path=path)
    table.refresh()
    expected = stream.expected
    assert pyiceberg_rows(table.metadata_location, COLUMNS) == expected
    assert duckdb_rows(table.metadata_location, COLUMNS) == expected
