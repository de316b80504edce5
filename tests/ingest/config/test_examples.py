"""The example configs in config/ load and say what their comments claim."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from calving.commit.errors import ConfigError
from calving.commit.spec.transforms import Transform, bucket
from calving.ingest.config import load_config

CONFIG_DIR = Path(__file__).resolve().parents[3] / "config"
POSTGRES_ENV = {
    "KAFKA_BOOTSTRAP_SERVERS": "b-1.kafka.internal:9096,b-2.kafka.internal:9096",
    "KAFKA_USERNAME": "calving-orders",
    "KAFKA_PASSWORD": "kafka-pw-7f3a9c",
    "CATALOG_DB_PASSWORD": "catalog-pw-51e0d2",
    "S3_ENDPOINT": "https://objects.internal:9000",
    "S3_ACCESS_KEY_ID": "AKIAEXAMPLE0042",
    "S3_SECRET_ACCESS_KEY": "s3-secret-9b8c7d6e",
}


def test_every_example_is_tested():
    assert sorted(p.name for p in CONFIG_DIR.glob("*.toml")) == [
        "events-append.toml",
        "orders-cdc.toml",
        "shared-postgres.toml",
    ]


def test_orders_cdc():
    config = load_config(CONFIG_DIR / "orders-cdc.toml", environ={})
    here = str(CONFIG_DIR)

    assert config.origin == str(CONFIG_DIR / "orders-cdc.toml")
    source = config.source
    assert source.bootstrap_servers == "localhost:9092"
    assert source.topics == ("dbserver1.shop.orders",)
    assert source.starting_offsets == "earliest"
    assert source.max_offsets_per_trigger == 50000
    assert source.kafka == {"client.id": "calving-orders-cdc", "isolation.level": "read_committed"}
    options = source.spark_options()
    assert options["subscribe"] == "dbserver1.shop.orders"
    assert options["kafka.isolation.level"] == "read_committed"
    assert source.source_options().read_committed

    fmt = config.format
    assert (fmt.type, fmt.envelope, fmt.key_format, fmt.keyed) == (
        "debezium-json",
        "debezium",
        "json",
        True,
    )
    assert fmt.epoch_unit == "auto"
    assert fmt.decimal_handling_mode == "precise"

    table = config.table
    assert table.name == "shop.orders"
    assert table.namespace == ("shop",)
    assert table.catalog == f"sqlite:///{here}/data/catalog.db"
    assert table.catalog_kind == "sql"
    assert table.warehouse == f"file://{here}/data/warehouse"
    assert table.identifier_fields == ("id",)
    assert [(p.column, p.transform) for p in table.partition] == [("id", bucket(16))]
    assert table.properties == {
        "write.parquet.compression-codec": "zstd",
        "commit.retry.num-retries": "8",
    }
    assert [(c.name, c.type, c.required) for c in table.columns] == [
        ("id", "long", True),  # identifier: required by default
        ("customer_id", "long", True),
        ("status", "string", False),
        ("amount", "decimal(12, 2)", False),
        ("tags", "list<string>", False),
        ("created_at", "timestamptz", False),
        ("updated_at", "timestamptz", False),
    ]
    schema = table.schema()
    assert schema.identifier_field_names == ("id",)
    spec = table.partition_spec(schema)
    assert [(f.source_id, f.transform) for f in spec.fields] == [(1, bucket(16))]
    assert not table.infer_schema

    sink = config.sink
    assert sink.writer_id == "orders-cdc"
    assert sink.checkpoint == f"{here}/data/checkpoints/orders-cdc"
    assert sink.trigger_interval == "5 seconds"
    assert sink.trigger_seconds == 5.0
    assert sink.dead_letter_table == "shop.orders_dead_letters"
    assert sink.dead_letter_topic is None
    assert sink.key_partitions == 4
    assert sink.index_save_every == 20

    assert config.spark.master == "local[2]"
    assert config.spark.app_name == "calving-orders-cdc"
    assert config.spark.conf["spark.sql.shuffle.partitions"] == "4"


def test_events_append():
    config = load_config(CONFIG_DIR / "events-append.toml", environ={})
    here = str(CONFIG_DIR)

    assert config.source.topics == ()
    assert config.source.topic_pattern == r"events\..*"
    assert config.source.spark_options()["subscribePattern"] == r"events\..*"
    assert config.source.starting_offsets == "latest"

    fmt = config.format
    assert (fmt.type, fmt.envelope, fmt.keyed, fmt.key_format) == ("json", "plain", False, None)
    assert fmt.epoch_unit == "ms"
    assert fmt.naive_timestamps_as_utc is True

    table = config.table
    assert table.name == "analytics.events"
    assert table.infer_schema is True
    assert table.infer_temporal is True
    assert table.identifier_fields == ()
    assert [(c.name, c.type, c.required) for c in table.columns] == [("ts", "timestamptz", True)]
    assert [(p.column, p.transform, p.text) for p in table.partition] == [
        ("ts", Transform("day"), "day(ts)")
    ]
    # The partition column is declared, so the spec is buildable before any sample.
    assert [f.name for f in table.partition_spec(table.schema()).fields] == ["ts_day"]
    assert table.warehouse == f"file://{here}/data/warehouse"

    sink = config.sink
    assert sink.writer_id == "events-append"
    assert sink.dead_letter_topic == "events.dead-letters"
    assert sink.dead_letter_table is None
    assert sink.trigger_seconds == 10.0
    assert sink.checkpoint == f"{here}/data/checkpoints/events-append"


def test_shared_postgres():
    config = load_config(CONFIG_DIR / "shared-postgres.toml", environ=POSTGRES_ENV)

    source = config.source
    assert source.bootstrap_servers == POSTGRES_ENV["KAFKA_BOOTSTRAP_SERVERS"]
    assert source.kafka == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "calving-orders",
        "sasl.password": "kafka-pw-7f3a9c",
        "isolation.level": "read_committed",
    }
    assert source.kafka_client_config()["bootstrap.servers"] == source.bootstrap_servers
    assert source.group_id_prefix == "calving-orders"

    assert config.format.type == "debezium-json"

    table = config.table
    assert table.catalog == (
        "postgresql+psycopg://calving:catalog-pw-51e0d2@catalog-db.internal:5432/iceberg"
    )
    assert table.catalog_kind == "sql"
    assert table.catalog_name == "shared"
    assert table.warehouse == "s3://lakehouse/warehouse"
    assert table.identifier_fields == ("id",)
    assert [(p.column, p.transform) for p in table.partition] == [("id", bucket(16))]
    assert table.io == {
        "s3.endpoint": "https://objects.internal:9000",
        "s3.region": "us-east-1",
        "s3.access-key-id": "AKIAEXAMPLE0042",
        "s3.secret-access-key": "s3-secret-9b8c7d6e",
    }
    assert config.sink.checkpoint == "s3a://lakehouse/checkpoints/orders-cdc-shared"
    assert config.sink.dead_letter_table == "shop.orders_dead_letters"

    shown = repr(config)
    for name in (
        "KAFKA_PASSWORD",
        "CATALOG_DB_PASSWORD",
        "S3_ACCESS_KEY_ID",
        "S3_SECRET_ACCESS_KEY",
    ):
        assert POSTGRES_ENV[name] not in shown, name
    assert "'sasl.password': '***'" in shown
    assert "'s3.secret-access-key': '***'" in shown


def test_shared_postgres_holds_no_literal_secret():
    text = (CONFIG_DIR / "shared-postgres.toml").read_text()
    secret_lines = [
        line
        for line in text.splitlines()
        if not line.lstrip().startswith("#")
        and re.search(r"password|secret|access-key|username", line, re.IGNORECASE)
    ]
    assert len(secret_lines) == 5  # username, password, catalog URL, two S3 keys
    for line in secret_lines:
        assert "${env:" in line, line
    catalog = next(line for line in text.splitlines() if line.startswith("catalog ="))
    assert "${env:CATALOG_DB_PASSWORD}@" in catalog


@pytest.mark.parametrize("missing", sorted(POSTGRES_ENV))
def test_shared_postgres_names_each_missing_variable(missing):
    environ = {k: v for k, v in POSTGRES_ENV.items() if k != missing}
    with pytest.raises(ConfigError, match=rf"environment variable {missing} is not set"):
        load_config(CONFIG_DIR / "shared-postgres.toml", environ=environ)
