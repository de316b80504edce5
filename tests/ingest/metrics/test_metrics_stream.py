"""Metrics of a real streaming run: a CDC pipeline built from config with ``[metrics]``
on a free loopback port, scraped during and after the run, every figure checked
against the table, the broker and what was produced; the JSON log line per batch."""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
import urllib.request

import pytest

from calving.commit.table.ledger import read_ledger
from calving.ingest.config.loader import parse_config
from calving.ingest.kafka.producer import produce
from calving.ingest.metrics import LOG_FIELDS
from calving.ingest.pipeline import build_pipeline
from tests.ingest.metrics.promtext import parse
from tests.support.cdc import COLUMNS, cdc_events
from tests.support.oracles import pyiceberg_rows

pytestmark = pytest.mark.integration

PARTITIONS = 3


def _scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as reply:
        assert reply.status == 200
        return parse(reply.read().decode())


class _Scraper(threading.Thread):
    """Scrapes the endpoint while the stream runs; every scrape must parse."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.records_seen, self.errors = url, threading.Event(), [], []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                fam = _scrape(self.url)["calving_records_total"]
                self.records_seen.append(sum(fam.series().values()))
            except Exception as err:  # noqa: BLE001 - reported by the test
                self.errors.append(err)
            self.stop.wait(0.2)


def _poisoned_stream():
    """A CDC stream with undecodable records spliced in (each on a key's partition)."""
    stream = cdc_events(keys=150, events=1200, partitions=PARTITIONS, seed=5)
    records = list(stream.records)
    poison = 0
    for at in (10, 400, 900):
        records.insert(at, (at % PARTITIONS, b'{"id": 0}', b"{not json", None))
        poison += 1
    return stream, records, poison


def test_metrics_of_a_cdc_run_match_the_table(spark, broker, make_topic, tmp_path, caplog):
    topic = make_topic(partitions=PARTITIONS)
    stream, records, poison = _poisoned_stream()
    produced_from_ms = int(time.time() * 1000)
    ends = produce(broker.bootstrap_servers, topic, records)
    produced_to_ms = int(time.time() * 1000)
    config = parse_config(
        {
            "source": {
                "bootstrap_servers": broker.bootstrap_servers,
                "topics": [topic],
                "max_offsets_per_trigger": 400,
            },
            "format": {"type": "debezium-json"},
            "table": {
                "catalog": f"sqlite:///{tmp_path}/catalog.db",
                "warehouse": str(tmp_path / "warehouse"),
                "name": "db.cdc",
                "identifier_fields": ["id"],
                "columns": [
                    {"name": "id", "type": "long"},
                    {"name": "status", "type": "string"},
                    {"name": "version", "type": "long"},
                ],
            },
            "sink": {
                "writer_id": "cdc-metrics",
                "checkpoint": str(tmp_path / "ckpt"),
                "dead_letter_table": "cdc_dead",
            },
            "metrics": {"port": 0},
        },
        "test",
    )
    caplog.set_level(logging.INFO, logger="calving.metrics")
    pipeline = build_pipeline(config, spark)
    server = pipeline.sink.metrics.server
    assert server is not None and server.host == "127.0.0.1" and server.port > 0
    scraper = _Scraper(server.url)
    scraper.start()
    try:
        pipeline.run(available_now=True, timeout=600)
    finally:
        scraper.stop.set()
        scraper.join()
    try:
        families = _scrape(server.url)
    finally:
        pipeline.close()

    assert not scraper.errors, scraper.errors
    assert scraper.records_seen, "no scrape during the run"
    assert scraper.records_seen == sorted(scraper.records_seen)  # a counter never goes down

    # Truth: the table, its dead-letter table, the broker.
    table = pipeline.table.refresh()
    dead = pipeline.sink.coordinator.dead_letter_table.refresh()
    assert pyiceberg_rows(table.metadata_location, COLUMNS) == stream.expected
    assert read_ledger(table.metadata, "cdc-metrics") == {(topic, p): e for p, e in ends.items()}
    snapshots = {s.snapshot_id for s in table.metadata.snapshots}
    dead_rows = pyiceberg_rows(dead.metadata_location, ["offset"])

    base = {"table": "db.cdc", "writer_id": "cdc-metrics"}

    def value(name: str, sample: str | None = None, **labels: str) -> float:
        return families[name].value(sample, **base, **labels)

    assert value("calving_records_total") == len(records)
    assert value("calving_dead_letters_total") == poison == len(dead_rows)
    assert value("calving_commits_total") == len(snapshots)
    assert value("calving_batches_total", outcome="committed") == len(snapshots)
    assert value("calving_commit_retries_total") == 0  # one writer: no lost swaps
    assert value("calving_commit_conflicts_total") == 0
    assert value("calving_rows_deleted_total") > 0
    lag = families["calving_kafka_lag_records"].series()
    assert {(dict(k)["topic"], dict(k)["partition"]) for k in lag} == {
        (topic, str(p)) for p in range(PARTITIONS)
    }
    assert all(v == 0 for v in lag.values())
    assert value("calving_index_keys") == len(stream.expected)
    assert value("calving_index_bytes") > 0
    commit_count = value("calving_commit_duration_seconds", "calving_commit_duration_seconds_count")
    assert commit_count == len(snapshots)
    assert value("calving_freshness_seconds", "calving_freshness_seconds_count") == len(snapshots)
    newest, oldest = (
        value("calving_freshness_newest_seconds"),
        value("calving_freshness_oldest_seconds"),
    )
    assert 0 <= newest <= oldest

    # One JSON line per batch, consistent with the table and the endpoint.
    messages = [r.getMessage() for r in caplog.records if r.name == "calving.metrics"]
    lines = [json.loads(m) for m in messages if m.startswith("{")]
    assert all(line["event"] == "batch" for line in lines)
    assert len(lines) == sum(families["calving_batches_total"].series().values())
    assert all(set(line) == set(LOG_FIELDS) for line in lines)
    # The batches decoded and wrote through Arrow in this (the driver's) process.
    assert all(isinstance(line["arrow_bytes"], int) for line in lines)
    assert max(line["arrow_bytes"] for line in lines) > 0
    assert [line["batch_id"] for line in lines] == sorted({line["batch_id"] for line in lines})
    committed = [line for line in lines if line["outcome"] == "committed"]
    assert {line["snapshot_id"] for line in committed} == snapshots
    assert sum(line["records"] for line in lines) == len(records)
    assert sum(line["dead_letters"] for line in lines) == poison
    covered = sorted((r["partition"], r["start"], r["end"]) for ln in lines for r in ln["ranges"])
    for p in range(PARTITIONS):  # the batches' ranges tile each partition exactly
        mine = [(s, e) for q, s, e in covered if q == p]
        assert mine[0][0] == 0 and mine[-1][1] == ends[p]
        assert all(a[1] == b[0] for a, b in itertools.pairwise(mine))
    for line in committed:
        assert produced_from_ms <= line["timestamp_min_ms"] <= line["timestamp_max_ms"]
        assert line["timestamp_max_ms"] <= produced_to_ms
        age = line["committed_at"] - line["timestamp_min_ms"] / 1000
        assert line["freshness_oldest_seconds"] == pytest.approx(age)
        assert 0 <= line["freshness_newest_seconds"] <= line["freshness_oldest_seconds"]
        assert line["commit_attempts"] == 1 and line["retries"] == 0
        assert 0 < line["commit_seconds"] <= line["batch_seconds"]
        assert line["index_keys"] is not None and line["lag"] is not None
    last = committed[-1]
    assert last["lag_records"] == 0 and last["index_keys"] == len(stream.expected)
    assert sum(line["lag_records"] for line in committed[:-1]) > 0  # lag seen mid-run
