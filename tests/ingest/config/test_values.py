"""What valid keys turn into: normalised values, Spark options, passthrough settings."""

from __future__ import annotations

import json

import pytest

from calving.commit.spec.transforms import IDENTITY, Transform, bucket, truncate
from calving.ingest.config import interval_seconds

from .documents import cdc, edit, json_append, parse


def test_bootstrap_servers_as_a_list():
    config = parse(edit(json_append(), "source.bootstrap_servers", ["k1:9092", "k2:9092"]))
    assert config.source.bootstrap_servers == "k1:9092,k2:9092"


def test_spark_options_use_sparks_names():
    doc = edit(json_append(), "source.topics", ["orders", "refunds"])
    doc = edit(doc, "source.max_offsets_per_trigger", 1000)
    doc = edit(doc, "source.include_headers", True)
    doc = edit(doc, "source.min_partitions", 4)
    doc = edit(doc, "source.task_records", 2000)
    doc = edit(doc, "source.group_id_prefix", "calving-orders")
    doc = edit(doc, "source.poll_timeout_ms", 30000)
    doc = edit(doc, "source.fetch_offset_retries", 5)
    doc = edit(doc, "source.fetch_offset_retry_interval_ms", 50)
    doc = edit(doc, "source.kafka", {"security.protocol": "SSL", "fetch.max.bytes": 1048576})
    assert parse(doc).source.spark_options() == {
        "kafka.bootstrap.servers": "broker:9092",
        "subscribe": "orders,refunds",
        "startingOffsets": "earliest",
        "failOnDataLoss": "true",
        "includeHeaders": "true",
        "maxOffsetsPerTrigger": "1000",
        "minPartitions": "4",
        "calving.taskRecords": "2000",
        "groupIdPrefix": "calving-orders",
        "kafkaConsumer.pollTimeoutMs": "30000",
        "fetchOffset.numRetries": "5",
        "fetchOffset.retryIntervalMs": "50",
        "kafka.security.protocol": "SSL",
        "kafka.fetch.max.bytes": "1048576",
    }


def test_unquoted_dotted_passthrough_keys_are_flattened():
    # TOML reads sasl.mechanism = "PLAIN" as {"sasl": {"mechanism": "PLAIN"}}.
    doc = edit(
        json_append(),
        "source.kafka",
        {"sasl": {"mechanism": "PLAIN"}, "enable": {"idempotence": False}, "client.id": "x"},
    )
    assert parse(doc).source.kafka == {
        "sasl.mechanism": "PLAIN",
        "enable.idempotence": "false",
        "client.id": "x",
    }


def test_assign_and_starting_offsets_as_tables_become_json():
    doc = edit(json_append(), "source.topics")
    doc = edit(doc, "source.assign", {"orders": [0, 2]})
    doc = edit(doc, "source.starting_offsets", {"orders": {"0": 42, "2": -2}})
    source = parse(doc).source
    assert json.loads(source.assign) == {"orders": [0, 2]}
    assert json.loads(source.starting_offsets) == {"orders": {"0": 42, "2": -2}}
    assert source.spark_options()["assign"] == source.assign


@pytest.mark.parametrize("word", ["EARLIEST", " latest "])
def test_starting_offsets_words_are_normalised(word):
    assert parse(edit(json_append(), "source.starting_offsets", word)).source.starting_offsets == (
        word.strip().lower()
    )


def test_column_types_are_normalised():
    doc = edit(json_append(), "table.columns.0.type", "decimal( 12 ,2 )")
    doc = edit(doc, "table.columns.2.type", "struct<a:long,b : list< map<string,double> >>")
    columns = parse(doc).table.columns
    assert columns[0].type == "decimal(12, 2)"
    assert columns[2].type == "struct<a: long, b: list<map<string, double>>>"


def test_declared_schema_numbers_fields_and_keeps_identifiers():
    doc = edit(cdc(), "table.columns.2.type", "struct<a: long, b: string>")
    doc = edit(doc, "table.columns.2.doc", "free text")
    schema = parse(doc).table.schema()
    assert [(f.field_id, f.name, f.required, f.doc) for f in schema.fields] == [
        (1, "id", True, None),
        (2, "ts", False, None),
        (3, "note", False, "free text"),
    ]
    assert [f.field_id for f in schema.fields[2].field_type.fields] == [4, 5]
    assert schema.identifier_field_ids == (1,)


def test_explicit_required_on_an_identifier_is_kept():
    doc = edit(cdc(), "table.columns.0.required", True)
    assert parse(doc).table.columns[0].required is True


@pytest.mark.parametrize(
    ("text", "column", "transform"),
    [
        ("id", "id", IDENTITY),
        ("identity(id)", "id", IDENTITY),
        ("bucket(16, id)", "id", bucket(16)),
        ("BUCKET( 4 ,id )", "id", bucket(4)),
        ("truncate(10, note)", "note", truncate(10)),
        ("year(ts)", "ts", Transform("year")),
        ("month(ts)", "ts", Transform("month")),
        ("day(ts)", "ts", Transform("day")),
        ("hour(ts)", "ts", Transform("hour")),
        ("void(note)", "note", Transform("void")),
    ],
)
def test_partition_transforms(text, column, transform):
    table = parse(edit(json_append(), "table.partition", [text])).table
    assert [(p.column, p.transform, p.text) for p in table.partition] == [(column, transform, text)]
    spec = table.partition_spec(table.schema())
    assert [f.transform for f in spec.fields] == [transform]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500 milliseconds", 0.5),
        ("250ms", 0.25),
        ("5 seconds", 5.0),
        ("1 second", 1.0),
        ("2s", 2.0),
        ("1.5 minutes", 90.0),
        ("1 min", 60.0),
        ("1 hour", 3600.0),
    ],
)
def test_trigger_intervals(text, seconds):
    sink = parse(edit(json_append(), "sink.trigger_interval", text)).sink
    assert sink.trigger_seconds == seconds
    assert interval_seconds(text) == seconds


def test_spark_section():
    doc = edit(
        json_append(),
        "spark",
        {
            "master": "local[4]",
            "app_name": "orders",
            "conf": {"spark.sql.shuffle.partitions": 8, "spark.ui.enabled": False},
        },
    )
    spark = parse(doc).spark
    assert (spark.master, spark.app_name) == ("local[4]", "orders")
    assert spark.conf == {"spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "false"}


def test_table_io_and_properties_are_strings():
    doc = edit(
        json_append(), "table.io", {"s3.endpoint": "http://minio:9000", "s3.path-style": True}
    )
    doc = edit(doc, "table.properties", {"commit.retry.num-retries": 8})
    table = parse(doc).table
    assert table.io == {"s3.endpoint": "http://minio:9000", "s3.path-style": "true"}
    assert table.properties == {"commit.retry.num-retries": "8"}


def test_multi_level_namespace():
    table = parse(edit(json_append(), "table.name", "prod.shop.orders")).table
    assert table.ident == ("prod", "shop", "orders")
    assert table.namespace == ("prod", "shop")


def test_dead_letter_max_bytes_reaches_the_sink_config() -> None:
    from calving.commit.errors import ConfigError
    from calving.ingest.sink.dead_letters import DEFAULT_TOPIC_MAX_BYTES

    assert parse(cdc()).sink.dead_letter_max_bytes == DEFAULT_TOPIC_MAX_BYTES == 900_000
    assert parse(edit(cdc(), "sink.dead_letter_max_bytes", 4096)).sink.dead_letter_max_bytes == 4096
    with pytest.raises(ConfigError, match="sink.dead_letter_max_bytes"):
        parse(edit(cdc(), "sink.dead_letter_max_bytes", 100))
