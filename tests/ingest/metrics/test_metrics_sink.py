"""Sink metrics under commit races (a rival writer really commits between our attempt's
load and swap), and the record timestamps the executors report for freshness."""

from __future__ import annotations

import datetime as dt
import json
import logging

import pyarrow as pa
import pytest

from calving.commit.catalog.sql import SqlCatalog
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.table import Table, create_table
from calving.ingest.kafka.producer import produce
from calving.ingest.metrics import SinkMetrics
from calving.ingest.sink.coordinator import parse_messages
from calving.ingest.sink.messages import message_batch, range_messages
from calving.ingest.write.parquet_writer import write_data_file
from tests.ingest.sink.test_append_stream import SCHEMA, _records, _sink
from tests.support.streams import drain


def _kafka_rows(partition: int, offsets: list[int], stamps: list, unit: str) -> pa.Table:
    return pa.table(
        {
            "topic": pa.array(["t"] * len(offsets)),
            "partition": pa.array([partition] * len(offsets), pa.int32()),
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array(stamps, pa.timestamp(unit, tz="UTC")),
        }
    )


def test_range_messages_carry_the_batchs_oldest_and_newest_record_timestamps():
    t0 = dt.datetime(2026, 5, 1, 12, 0, 0, 123000, tzinfo=dt.timezone.utc)
    ms = int(t0.timestamp() * 1000)
    first = _kafka_rows(0, [5, 6, 7], [t0 + dt.timedelta(seconds=3), t0, None], "us")
    second = _kafka_rows(1, [0, 1], [t0 + dt.timedelta(seconds=9), t0], "ms")
    messages = range_messages(first) + range_messages(second)
    parsed = parse_messages(pa.Table.from_batches([message_batch(messages)]))
    assert (parsed.timestamp_min_ms, parsed.timestamp_max_ms) == (ms, ms + 9000)
    assert {tp: (r.start, r.end) for tp, r in parsed.ranges.items()} == {
        ("t", 0): (5, 8),
        ("t", 1): (0, 2),
    }
    # Older messages without timestamps still parse (and leave the bounds unset).
    old = {"kind": "range", "payload": json.dumps(["t", 0, 0, 3]), "keys": None, "count": 3}
    parsed = parse_messages(pa.Table.from_batches([message_batch([old])]))
    assert parsed.records == 3 and parsed.timestamp_min_ms is None


@pytest.mark.integration
def test_lost_swaps_count_as_retries_and_a_failed_batch_as_a_conflict(
    spark, broker, make_topic, tmp_path, caplog
):
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    uri = f"sqlite:///{tmp_path}/catalog.db"
    catalog = SqlCatalog("test", uri, str(warehouse))
    catalog.create_namespace(("db",))
    table = create_table(catalog, ("db", "raced"), SCHEMA)
    rival = Table.load(SqlCatalog("test", uri, str(warehouse)), ("db", "raced"))
    races = {"left": 0, "done": 0}

    def rival_commits_first(stage: str, ident: tuple[str, ...]) -> None:
        # The rival is a writer that adds data: its wins count against the retries (a
        # maintenance-like rival's would not: see tests/commit/table/test_stream_priority).
        if stage == "before" and races["left"] > 0:
            races["left"] -= 1
            races["done"] += 1
            rival.refresh()
            location = f"{rival.metadata.location}/data/rival-{races['done']}.parquet"
            rows = pa.table(
                {
                    "id": pa.array([-races["done"]], pa.int64()),
                    "name": ["rival"],
                    "amount": [0.0],
                    "src_partition": pa.array([0], pa.int32()),
                    "src_offset": pa.array([0], pa.int64()),
                }
            )
            added = write_data_file(rival.io, location, rows, SCHEMA)
            rival.commit_or_raise(FastAppend((added,)))

    catalog.swap_hook = rival_commits_first
    metrics = SinkMetrics("db.raced", "w1")
    sink = _sink(table, metrics=metrics)
    caplog.set_level(logging.INFO, logger="calving.metrics")
    topic = make_topic(partitions=2)

    produce(broker.bootstrap_servers, topic, _records(100, 2))
    races["left"] = 1  # the first attempt loses, the retry lands
    drain(spark, broker.bootstrap_servers, topic, sink, str(tmp_path / "ckpt"))
    assert races == {"left": 0, "done": 1}

    rival.refresh()
    rival.commit_or_raise(UpdateProperties({"commit.retry.num-retries": "0"}))
    produce(broker.bootstrap_servers, topic, _records(10, 2))
    # Now a lost swap is fatal, once the commit has read the catalog: the batch's first
    # try, on the sink's cached table state (stale: the rival changed a property), loses
    # and is retried at once on a fresh read; the rival wins again and that loss is fatal.
    races["left"] = 2
    with pytest.raises(Exception, match="lost the swap"):
        drain(spark, broker.bootstrap_servers, topic, sink, str(tmp_path / "ckpt"))

    table.refresh()
    labels = {"table": "db.raced", "writer_id": "w1"}
    f = metrics.families
    assert len(table.metadata.snapshots) == 4  # batch 0 and the rival's three appends
    assert f["calving_commits_total"].value(**labels) == 1
    assert f["calving_commit_retries_total"].value(**labels) == 1
    assert f["calving_commit_conflicts_total"].value(**labels) == 2  # one lost swap + 1 fatal
    assert f["calving_batches_total"].value(outcome="failed", **labels) == 1
    assert f["calving_batches_total"].value(outcome="committed", **labels) == 1
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "calving.metrics"]
    assert [(x["outcome"], x["commit_attempts"], x["retries"], x["conflicts"]) for x in lines] == [
        ("committed", 2, 1, 1),
        ("failed", 0, 0, 1),
    ]
    assert lines[1]["error"].startswith("RetriesExhaustedError: ")
    assert (
        lines[0]["records"] == 100
        and table.metadata.snapshot_by_id(lines[0]["snapshot_id"]).summary["added-records"] == "100"
    )
