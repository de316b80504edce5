"""``calving.kafka_stream(spark, sink)``: the Kafka DataFrame of a ``calving.sink()`` with
a ``[source]``, wired as ``calving run`` wires it (the registered ``calving-kafka``
source, the records path of the config, a start from the table's ledger)."""

from __future__ import annotations

import json

import pytest

import calving
from calving.commit.errors import ConfigError
from calving.ingest.kafka.producer import produce
from tests.support.oracles import duckdb_rows, pyiceberg_rows

COLUMNS = [
    {"name": "id", "type": "long", "required": True},
    {"name": "name", "type": "string"},
]


def _drain(spark, sink, checkpoint):
    query = (
        calving.kafka_stream(spark, sink)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert not query.isActive and query.exception() is None


def _envelope(op, key, name=None):
    row = {"id": key, "name": name}
    before, after = (row, None) if op == "d" else (None, row)
    return json.dumps({"before": before, "after": after, "op": op}).encode()


def test_a_sink_without_a_source_is_a_one_line_config_error(tmp_path):
    sink = calving.sink(
        catalog=f"sqlite:///{tmp_path}/catalog.db",
        warehouse=str(tmp_path / "warehouse"),
        table="db.t",
        writer_id="w",
        columns=COLUMNS,
    )
    with pytest.raises(ConfigError, match=r"kafka_stream: the sink has no \[source\]") as e:
        calving.kafka_stream(object(), sink)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="expected a sink from calving.sink"):
        calving.kafka_stream(object(), object())


@pytest.mark.integration
@pytest.mark.parametrize("path", ["auto", "shuffle"])
def test_debezium_topic_into_a_keyed_table(path, spark, broker, make_topic, tmp_path):
    topic = make_topic(partitions=2)
    events = [(k, "c", f"n{k}") for k in range(20)]
    events += [(k, "u", f"u{k}") for k in range(0, 20, 3)] + [(k, "d", None) for k in (1, 4)]
    records = [(k % 2, json.dumps({"id": k}).encode(), _envelope(op, k, n)) for k, op, n in events]
    records += [(k % 2, json.dumps({"id": k}).encode(), None) for k in (1, 4)]  # tombstones
    produce(broker.bootstrap_servers, topic, [(*r, None) for r in records])
    config = {
        "source": {"bootstrap_servers": broker.bootstrap_servers, "topics": [topic]},
        "format": {"type": "debezium-json"},
        "table": {
            "catalog": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": str(tmp_path / "warehouse"),
            "name": "db.orders",
            "identifier_fields": ["id"],
            "columns": COLUMNS,
        },
        "sink": {"writer_id": "job", "path": path},
    }
    with calving.sink(config=config) as sink:
        assert sink.source_plan is not None
        assert sink.source_plan.path.path == ("fused" if path == "auto" else "shuffle")
        _drain(spark, sink, tmp_path / "ckpt")
    final = {k: f"n{k}" for k in range(20)}
    final.update({k: f"u{k}" for k in range(0, 20, 3)})
    for k in (1, 4):
        del final[k]
    expected = sorted(final.items())
    sink.table.refresh()
    assert pyiceberg_rows(sink.table.metadata_location, ["id", "name"]) == expected
    assert duckdb_rows(sink.table.metadata_location, ["id", "name"]) == expected
    assert sum(sink.table.ledger("job").values()) == len(records)


@pytest.mark.integration
def test_append_table_starts_from_the_ledger_with_a_new_checkpoint(
    spark, broker, make_topic, tmp_path
):
    topic = make_topic(partitions=2)
    values = [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(100)]
    produce(broker.bootstrap_servers, topic, [(i % 2, None, v, None) for i, v in enumerate(values)])
    args = {
        "catalog": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": str(tmp_path / "warehouse"),
        "table": "db.events",
        "writer_id": "job",
        "columns": COLUMNS,
        "source": {"bootstrap_servers": broker.bootstrap_servers, "topics": [topic]},
    }
    with calving.sink(**args) as sink:
        assert sink.source_plan is not None and sink.source_plan.path.path == "fused"
        _drain(spark, sink, tmp_path / "ckpt")
    expected = [(i, f"n{i}") for i in range(100)]
    sink.table.refresh()
    assert pyiceberg_rows(sink.table.metadata_location, ["id", "name"]) == expected
    snapshot = sink.table.metadata.current_snapshot_id
    # A lost checkpoint: the stream starts at the table's ledger and commits nothing new.
    with calving.sink(**args) as again:
        _drain(spark, again, tmp_path / "ckpt-new")
    again.table.refresh()
    assert again.table.metadata.current_snapshot_id == snapshot
    assert pyiceberg_rows(again.table.metadata_location, ["id", "name"]) == expected
