"""``calving.sink(...)`` for users' own ``foreachBatch`` jobs: Kafka-column DataFrames
from calving's source, DataFrames of decoded rows with upserts and deletes (exactly once
per Spark batch id), and one-line typed errors. The example script
(deploy/examples/foreach_batch_example.py) runs in tests/docs, as the guide prints it."""

from __future__ import annotations

import json

import pytest

import calving
from calving.commit.errors import ConfigError, SchemaError, StaleWriterError
from calving.ingest.kafka.producer import produce
from tests.support.lineage import lineage
from tests.support.oracles import duckdb_rows, pyiceberg_rows
from tests.support.streams import PATHS, kafka_stream

COLUMNS = [
    {"name": "id", "type": "long", "required": True},
    {"name": "name", "type": "string"},
    {"name": "amount", "type": "double"},
]
READ = ["id", "name", "amount"]


def _args(tmp_path, table="db.orders", writer_id="job-1", **kw):
    base = {
        "catalog": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": str(tmp_path / "warehouse"),
        "table": table,
        "writer_id": writer_id,
        "columns": COLUMNS,
    }
    return {**base, **kw}


def _frame(spark, rows, partitions=1):
    schema = "id BIGINT, name STRING, amount DOUBLE, op STRING"
    return spark.createDataFrame(rows, schema).coalesce(partitions)


@pytest.mark.integration
@pytest.mark.parametrize("path", PATHS)
def test_kafka_columns_from_calving_source(path, spark, broker, make_topic, tmp_path):
    topic = make_topic(partitions=2)
    records = [
        (i % 2, str(i).encode(), json.dumps({"id": i, "name": f"n{i}", "amount": i / 4}).encode())
        for i in range(300)
    ]
    produce(broker.bootstrap_servers, topic, [(*r, None) for r in records])
    with calving.sink(**_args(tmp_path, table="db.events", format="json")) as sink:
        query = (
            kafka_stream(spark, broker.bootstrap_servers, topic, sink=sink, path=path)
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None
    sink.table.refresh()
    expected = sorted((i, f"n{i}", i / 4) for i in range(300))
    assert pyiceberg_rows(sink.table.metadata_location, READ) == expected
    assert duckdb_rows(sink.table.metadata_location, READ) == expected
    ledger = sink.table.ledger("job-1")
    assert sum(ledger.values()) == 300 and {t for t, _ in ledger} == {topic}
    assert sink.last_batch_id() is None  # the Kafka path's ledger is per partition


@pytest.mark.integration
def test_decoded_rows_upserts_deletes_and_replayed_batch_ids(spark, tmp_path):
    sink = calving.sink(**_args(tmp_path, identifier_fields=["id"], op_column="op"))
    # Batch 0: key 1 twice in one partition: its later row wins.
    sink(
        _frame(
            spark,
            [(1, "a", 1.0, "c"), (2, "b", 2.0, "c"), (3, "c", 3.0, None), (1, "a2", 1.5, "u")],
        ),
        0,
    )
    first = lineage(sink.table.metadata_location, "id")
    # Batch 1: delete 2, update 3, insert 4 then delete it in the same batch, insert 5,
    # delete 1 and insert it again (a new row).
    batch1 = [
        (2, None, None, "d"),
        (3, "c2", 3.5, "update"),
        (4, "d", 4.0, "insert"),
        (4, None, None, "DELETE"),
        (5, "e", 5.0, "r"),
        (1, None, None, "d"),
        (1, "a3", 1.7, "c"),
    ]
    sink(_frame(spark, batch1), 1)
    expected = [(1, "a3", 1.7), (3, "c2", 3.5), (5, "e", 5.0)]
    location = sink.table.metadata_location
    assert pyiceberg_rows(location, READ) == expected
    assert duckdb_rows(location, READ) == expected
    # Row lineage: the update of 3 kept its _row_id; 1 (deleted, inserted) and 5 are new.
    ids = {k: r for k, (r, _) in lineage(location, "id").items()}
    old = {r for r, _ in first.values()}
    assert ids[3] == first[3][0] and ids[1] not in old and ids[5] not in old
    snapshot = sink.table.metadata.current_snapshot_id
    assert sink.last_batch_id() == 1

    # Spark replays its last batch after a driver restart, maybe with other content
    # (a non-deterministic source): the first committed version wins.
    sink(_frame(spark, [(1, None, None, "d"), (9, "z", 9.0, "c")]), 1)
    sink.table.refresh()
    assert sink.table.metadata.current_snapshot_id == snapshot
    assert sink.coordinator.history[-1].outcome == "skipped"
    # A fresh sink (a restarted driver) reads the ledger from the table.
    with calving.sink(**_args(tmp_path, identifier_fields=["id"], op_column="op")) as again:
        again(_frame(spark, [(1, None, None, "d")]), 1)
        # An older batch id means a lost checkpoint: refused, naming the batch ids.
        with pytest.raises(
            StaleWriterError, match="batch id 0 is below the last committed batch 1"
        ):
            again(_frame(spark, [(1, None, None, "d")]), 0)
        # An empty batch claims nothing; the next one commits.
        again(_frame(spark, []), 2)
        assert again.last_batch_id() == 1
        again(_frame(spark, [(1, None, None, "d"), (6, "f", 6.0, "c")]), 3)
    expected = [(3, "c2", 3.5), (5, "e", 5.0), (6, "f", 6.0)]
    location = again.table.metadata_location
    assert pyiceberg_rows(location, READ) == expected
    assert duckdb_rows(location, READ) == expected
    assert again.last_batch_id() == 3


@pytest.mark.integration
def test_decoded_rows_order_column_and_keys_across_partitions(spark, tmp_path):
    sink = calving.sink(
        **_args(tmp_path, identifier_fields=["id"]), op_column="op", order_column="seq"
    )
    # Key 7's events sit in different input partitions, out of order: seq decides.
    rows = [(7, "late", 3.0, "u", 30), (8, "x", 1.0, "c", 5), (7, "early", 1.0, "c", 10)]
    df = spark.createDataFrame(rows, "id BIGINT, name STRING, amount DOUBLE, op STRING, seq INT")
    sink(df.repartition(3), 0)
    assert pyiceberg_rows(sink.table.metadata_location, READ) == [(7, "late", 3.0), (8, "x", 1.0)]


@pytest.mark.integration
def test_decoded_rows_append_table_with_widened_types(spark, tmp_path):
    sink = calving.sink(**_args(tmp_path, table="db.log"))
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id INT, name STRING")  # int -> long
    sink(df, 0)
    sink(df, 0)  # replayed: still two rows
    sink(df, 1)
    assert pyiceberg_rows(sink.table.metadata_location, ["id", "name"]) == [
        (1, "a"),
        (1, "a"),
        (2, "b"),
        (2, "b"),
    ]


def _one_line(excinfo):
    text = str(excinfo.value)
    assert "\n" not in text
    return text


def test_bad_arguments_are_one_line_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"format\.type") as e:
        calving.sink(**_args(tmp_path, format="protobuf"))
    assert "protobuf" in _one_line(e)
    args = _args(tmp_path)
    del args["writer_id"]
    with pytest.raises(ConfigError, match=r"sink\.writer_id") as e:
        calving.sink(**args)
    _one_line(e)
    with pytest.raises(ConfigError, match="unknown argument 'warehous'") as e:
        calving.sink(**{**_args(tmp_path), "warehous": "x"})
    with pytest.raises(ConfigError, match="either config= or keyword arguments") as e:
        calving.sink(config="pipeline.toml", table="db.orders")
    with pytest.raises(ConfigError, match="op_column: table db.plain has no identifier") as e:
        calving.sink(**_args(tmp_path, table="db.plain"), op_column="op")
    _one_line(e)
    with pytest.raises(ConfigError, match="input: expected one of") as e:
        calving.sink(**_args(tmp_path), input="csv")


def test_config_file_is_checked_like_calving_run(tmp_path):
    path = tmp_path / "pipeline.toml"
    path.write_text(
        '[format]\ntype = "json"\n'
        f'[table]\ncatalog = "sqlite:///{tmp_path}/catalog.db"\n'
        f'warehouse = "{tmp_path}/warehouse"\nname = "db.cfg"\n'
        '[[table.columns]]\nname = "id"\ntype = "long"\n'
        '[sink]\nwriter_idd = "w"\n'
    )
    with pytest.raises(ConfigError) as e:
        calving.sink(config=path)
    text = _one_line(e)
    assert text.startswith(str(path)) and "writer_idd" in text and "writer_id" in text
    path.write_text(path.read_text().replace("writer_idd", "writer_id"))
    with calving.sink(config=path) as sink:
        assert sink.table.name.endswith("cfg") and sink.writer_id == "w"


@pytest.mark.integration
def test_wrong_column_type_names_the_column(spark, tmp_path):
    sink = calving.sink(**_args(tmp_path, identifier_fields=["id"]), op_column="op")
    df = spark.createDataFrame(
        [(1, "a", "1.5", "c")], "id BIGINT, name STRING, amount STRING, op STRING"
    )
    with pytest.raises(SchemaError, match="column 'amount': type string does not match") as e:
        sink(df, 0)
    _one_line(e)
    df = spark.createDataFrame([(1, "a", 2, "c")], "id BIGINT, name STRING, extra INT, op STRING")
    with pytest.raises(SchemaError, match="column 'extra': not a column of table") as e:
        sink(df, 0)
    df = spark.createDataFrame([("a", "c")], "name STRING, op STRING")
    with pytest.raises(SchemaError, match="column 'id': required by table") as e:
        sink(df, 0)
    df = spark.createDataFrame([(1, "a", 1.0, 5)], "id BIGINT, name STRING, amount DOUBLE, op INT")
    with pytest.raises(SchemaError, match="column 'op': the change-operation column must be") as e:
        sink(df, 0)
    df = spark.createDataFrame([(1, "a")], "id BIGINT, name STRING")
    with pytest.raises(SchemaError, match="column 'op': named as op/order column but not in"):
        sink(df, 0)
    sink.table.refresh()
    assert sink.table.metadata.current_snapshot_id is None
