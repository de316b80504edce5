"""Poison records end to end: each lands in the dead-letter table with its coordinates,
the stream keeps going, and good rows + dead letters = produced."""

from __future__ import annotations

import json

import pytest

from calving.commit.errors import CorruptRecordError
from calving.commit.table.table import create_table
from calving.ingest.decode import JsonValueDecoder
from calving.ingest.kafka.producer import produce
from calving.ingest.sink.dead_letters import DEAD_LETTER_TABLE_SCHEMA
from calving.ingest.sink.foreach_batch import CalvingSink
from tests.ingest.sink.test_append_stream import COLUMNS, SCHEMA
from tests.support.oracles import duckdb_rows, pyiceberg_rows
from tests.support.streams import drain

pytestmark = pytest.mark.integration

POISON = {
    5: b"{not json",
    17: json.dumps({"id": "seventeen", "name": "x", "amount": 1.0}).encode(),  # wrong type
    29: b"\xff\xfe invalid utf-8",
    41: json.dumps([1, 2, 3]).encode(),  # not an object
    53: json.dumps({"id": 53, "name": "x", "amount": "NaN?"}).encode(),
}


def _records(n: int):
    for i in range(n):
        value = POISON.get(i) or json.dumps({"id": i, "name": f"n{i}", "amount": 1.5}).encode()
        yield (i % 2, str(i).encode(), value, None)


def test_poison_records_go_to_the_dead_letter_table(
    spark, broker, make_topic, sqlite_catalog, tmp_path
):
    topic = make_topic(partitions=2)
    n = 400
    produce(broker.bootstrap_servers, topic, _records(n))
    table = create_table(sqlite_catalog, ("db", "good"), SCHEMA)
    dlq = create_table(sqlite_catalog, ("db", "good_dead_letters"), DEAD_LETTER_TABLE_SCHEMA)
    sink = CalvingSink(table, lambda s: JsonValueDecoder(s), "w", dead_letter_table=dlq)
    drain(spark, broker.bootstrap_servers, topic, sink, str(tmp_path / "ckpt"))
    table.refresh()
    dlq.refresh()
    good = pyiceberg_rows(table.metadata_location, COLUMNS)
    dead = pyiceberg_rows(dlq.metadata_location, ["topic", "partition", "offset", "error_type"])
    assert duckdb_rows(dlq.metadata_location, ["topic", "partition", "offset"]) == [
        d[:3] for d in dead
    ]
    assert len(good) + len(dead) == n
    assert sorted(r[0] for r in good) == [i for i in range(n) if i not in POISON]
    # Coordinates: record i went to partition i % 2 at offset i // 2.
    assert sorted((d[1], d[2]) for d in dead) == sorted((i % 2, i // 2) for i in POISON)
    assert {d[0] for d in dead} == {topic}
    assert all(d[3] for d in dead)
    # Both tables carry the batch's ledger claim: a replay skips both.
    assert table.ledger("w") == dlq.ledger("w")


def test_without_a_dead_letter_destination_the_stream_stops_naming_the_record(
    spark, broker, make_topic, sqlite_catalog, tmp_path
):
    topic = make_topic(partitions=1)
    produce(broker.bootstrap_servers, topic, [(0, None, b'{"id": 1}', None), (0, None, b"{", None)])
    table = create_table(sqlite_catalog, ("db", "strict"), SCHEMA)
    sink = CalvingSink(table, lambda s: JsonValueDecoder(s), "w")
    with pytest.raises(RuntimeError) as failure:
        drain(spark, broker.bootstrap_servers, topic, sink, str(tmp_path / "ckpt"))
    assert f"{topic}/0@1" in str(failure.value)
    assert CorruptRecordError.__name__ in str(failure.value) or "dead-letter" in str(failure.value)
    table.refresh()
    assert table.metadata.current_snapshot_id is None  # nothing committed, nothing lost
