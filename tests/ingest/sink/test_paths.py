"""The fused path (one task per Kafka range reads, decodes, collapses and writes) and
the shuffle path, chosen by ``[sink] path``: both read back exactly, ``auto`` takes the
shuffle path where a key may span Kafka partitions, and a fused batch that finds a key
in two tasks is redone on the shuffle path."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from calving.ingest.config.format import FormatConfig
from calving.ingest.config.loader import parse_config
from calving.ingest.config.source import SourceConfig
from calving.ingest.kafka.producer import produce
from calving.ingest.pipeline import Pipeline, build_pipeline
from calving.ingest.sink.path_choice import choose_path
from tests.support.cdc import COLUMNS, cdc_events
from tests.support.lineage import identity_changes, lineage
from tests.support.oracles import datafusion_rows, duckdb_rows, pyiceberg_rows


def _source(**kw: Any) -> SourceConfig:
    return SourceConfig(bootstrap_servers="127.0.0.1:9092", **kw)


@pytest.mark.parametrize(
    ("configured", "source", "fmt", "keyed", "path"),
    [
        ("auto", _source(topics=("a",)), "json", False, "fused"),
        ("auto", _source(topic_pattern="a.*"), "json", False, "fused"),
        ("auto", _source(topics=("a",)), "debezium-json", True, "fused"),
        ("auto", _source(topics=("a",)), "upsert-json", True, "fused"),
        ("auto", _source(assign='{"a": [0, 1]}'), "debezium-json", True, "fused"),
        ("auto", _source(topics=("a", "b")), "debezium-json", True, "shuffle"),
        ("auto", _source(topic_pattern="db\\..*"), "debezium-json", True, "shuffle"),
        ("auto", _source(assign='{"a": [0], "b": [0]}'), "debezium-json", True, "shuffle"),
        ("auto", _source(topics=("a",)), "json", True, "shuffle"),  # key from the value
        ("shuffle", _source(topics=("a",)), "debezium-json", True, "shuffle"),
        ("fused", _source(topics=("a", "b")), "debezium-json", True, "fused"),
    ],
)
def test_choose_path(configured, source, fmt, keyed, path):
    choice = choose_path(configured, source, FormatConfig(type=fmt), keyed)
    assert choice.path == path, choice.reason
    options = choice.source_options
    if path == "shuffle":
        assert options == {}
    else:
        assert options["calving.emit"] == "ranges"
        # A keyed table's partition stays in one task; an append table may be split.
        assert ("calving.splitRanges" in options) == keyed


def _config(
    tmp_path, broker, topics: list[str], name: str, path: str, tasks_asked: bool = True
) -> Any:
    source: dict[str, Any] = {
        "bootstrap_servers": broker.bootstrap_servers,
        "topics": topics,
        "max_offsets_per_trigger": 700,
    }
    if tasks_asked:  # would split ranges (a keyed fused path must not); keeps a task per
        source["min_partitions"] = 6  # range: without it, small ranges share a task
    return parse_config(
        {
            "source": source,
            "format": {"type": "debezium-json"},
            "table": {
                "catalog": f"sqlite:///{tmp_path}/catalog.db",
                "warehouse": str(tmp_path / "warehouse"),
                "name": f"shop.{name}",
                "identifier_fields": ["id"],
                "columns": [
                    {"name": "id", "type": "long"},
                    {"name": "status", "type": "string"},
                    {"name": "version", "type": "long"},
                ],
            },
            "sink": {"writer_id": name, "checkpoint": str(tmp_path / f"ckpt-{name}"), "path": path},
            "spark": {"conf": {"spark.sql.shuffle.partitions": "3"}},
        },
        "test",
    )


def _run(pipeline: Pipeline) -> dict[str, int]:
    """Run to the end; how many batches each path's write took."""
    sink, calls = pipeline.sink, {"ranges": 0, "records": 0}
    write = sink._write

    def counting_write(df, batch_id, already_sent=frozenset()):
        calls["ranges" if df.columns == ["topic", "partition", "start", "end"] else "records"] += 1
        return write(df, batch_id, already_sent)

    sink._write = counting_write  # type: ignore[method-assign]  # counts the sink's writes by replacing its write step
    pipeline.run(available_now=True, timeout=300)
    return calls


def _read_back(pipeline: Pipeline) -> list[tuple[Any, ...]]:
    location = pipeline.table.refresh().metadata_location
    rows = pyiceberg_rows(location, COLUMNS)
    assert duckdb_rows(location, COLUMNS) == rows
    assert datafusion_rows(location, COLUMNS) == rows
    return rows


@pytest.mark.integration
@pytest.mark.parametrize("path", ["auto", "auto-grouped", "shuffle"])
def test_cdc_stream_reads_back_exactly_on_either_path(path, spark, broker, make_topic, tmp_path):
    topic = make_topic(partitions=3)
    stream = cdc_events(keys=300, events=2400, partitions=3)
    ends = produce(broker.bootstrap_servers, topic, stream.records)
    name = f"cdc_{path.replace('-', '_')}"
    config = _config(tmp_path, broker, [topic], name, path.split("-")[0], path != "auto-grouped")
    pipeline = build_pipeline(config, spark)
    assert pipeline.path.path == ("shuffle" if path == "shuffle" else "fused")
    calls = _run(pipeline)
    if path != "shuffle":  # record bytes never entered Spark: the frames held ranges only
        assert calls["ranges"] >= 3 and calls["records"] == 0
        assert pipeline.sink.keyed_path == "fused"
        # an unpartitioned table: a file per task, and the three partitions' ranges of
        # each 700-record batch share one task unless minPartitions asks for tasks
        most = 1 if path == "auto-grouped" else 3
        assert max(_files_added(pipeline)) == most
    else:
        assert calls["records"] >= 3 and calls["ranges"] == 0
    assert _read_back(pipeline) == stream.expected
    assert pipeline.table.ledger(name) == {(topic, p): e for p, e in ends.items()}
    assert stream.deletes > 0 and pipeline.table.live_files().dvs
    _check_lineage(pipeline.table.metadata_location)


def _files_added(pipeline: Pipeline) -> list[int]:
    """The data files each of the table's snapshots added."""
    return [int(s.summary.get("added-data-files", "0")) for s in pipeline.table.metadata.snapshots]


def _check_lineage(location: str) -> None:
    """Row lineage as the spec derives it (``tests.support.lineage``): ids unique, DuckDB
    shows the same ones, and rows updated by later batches kept their ``_row_id``."""
    want = lineage(location, "id")
    ids = {r for r, _ in want.values()}
    assert len(ids) == len(want) and None not in ids
    shown = duckdb_rows(location, ("id", "_row_id", "_last_updated_sequence_number"))
    assert {k: (r, s) for k, r, s in shown} == want
    kept, _ = identity_changes(location, "id")
    assert kept > 0


@pytest.mark.integration
def test_two_topics_into_one_keyed_table_take_the_shuffle_path(spark, broker, make_topic, tmp_path):
    topics = [make_topic(partitions=2), make_topic(partitions=2)]
    streams = [cdc_events(keys=150, events=900, partitions=2, seed=s) for s in (1, 2)]
    expected = []
    for i, (topic, stream) in enumerate(zip(topics, streams, strict=True)):
        # Disjoint keys per topic (k -> 2k + i): each topic owns its rows.
        records = [_shift(r, i) for r in stream.records]
        produce(broker.bootstrap_servers, topic, records)
        expected += [(2 * k + i, s, v) for k, s, v in stream.expected]
    pipeline = build_pipeline(_config(tmp_path, broker, topics, "two_topics", "auto"), spark)
    assert pipeline.path.path == "shuffle" and "2 topics" in pipeline.path.reason
    calls = _run(pipeline)
    assert calls["records"] >= 1 and calls["ranges"] == 0
    assert _read_back(pipeline) == sorted(expected)
    _check_lineage(pipeline.table.refresh().metadata_location)


def _shift(record: tuple[Any, ...], i: int) -> tuple[Any, ...]:
    part, key, value, headers = record
    k = json.loads(key)["id"]
    new_key = json.dumps({"id": 2 * k + i}).encode()
    if value is None:
        return (part, new_key, None, headers)
    event = json.loads(value)
    for image in ("before", "after"):
        if event[image] is not None:
            event[image]["id"] = 2 * k + i
    return (part, new_key, json.dumps(event).encode(), headers)


@pytest.mark.integration
@pytest.mark.parametrize("tasks_asked", [True, False], ids=["task-per-range", "grouped"])
def test_a_key_in_two_partitions_sends_the_batch_to_the_shuffle_path(
    tasks_asked, spark, broker, make_topic, tmp_path, caplog
):
    """``path = "fused"`` on a topic whose producer put one key on two partitions: the
    first batch finds the key written by two tasks, is redone on the shuffle path, and
    the stream stays there; the table equals a shuffle-path run of the same records.
    Also when both partitions' ranges share one task: it writes them apart."""
    topic = make_topic(partitions=2)
    stream = cdc_events(keys=100, events=600, partitions=2, seed=3)
    # Key 7's events alternate partitions (a producer that keys by something else).
    records, n7 = [], 0
    for part, key, value, headers in stream.records:
        if json.loads(key)["id"] == 7:
            part, n7 = n7 % 2, n7 + (value is not None)
        records.append((part, key, value, headers))
    assert n7 >= 2
    produce(broker.bootstrap_servers, topic, records)
    with caplog.at_level(logging.WARNING, logger="calving.sink"):
        config = _config(tmp_path, broker, [topic], "forced", "fused", tasks_asked)
        forced = build_pipeline(config, spark)
        _run(forced)
    assert forced.sink.keyed_path == "shuffle"
    assert any("written by two tasks" in r.getMessage() for r in caplog.records)
    reference = build_pipeline(_config(tmp_path, broker, [topic], "reference", "shuffle"), spark)
    _run(reference)
    assert _read_back(forced) == _read_back(reference)
    assert len(forced.table.metadata.snapshots) == len(reference.table.metadata.snapshots)
