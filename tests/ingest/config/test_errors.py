"""Every wrong, unknown or missing key is a ConfigError naming the dotted key and what
was expected."""

from __future__ import annotations

import pytest

from calving.commit.errors import ConfigError
from calving.ingest.config import load_config

from .documents import _DELETE, cdc, edit, error_of, json_append, parse

D = _DELETE

# (id, base document, [(dotted key, new value or D to delete)], fragments of the message)
CASES = [
    # ------------------------------------------------------------------ top level
    ("missing-source", json_append, [("source", D)], ["source: is required (a table)"]),
    ("missing-format", json_append, [("format", D)], ["format: is required (a table)"]),
    ("missing-table", json_append, [("table", D)], ["table: is required (a table)"]),
    ("missing-sink", json_append, [("sink", D)], ["sink: is required (a table)"]),
    (
        "section-not-table",
        json_append,
        [("sink", "orders")],
        ["sink: expected a table, got a string"],
    ),
    ("unknown-section", json_append, [("sinks", {})], ["sinks: unknown key; did you mean 'sink'?"]),
    (
        "unknown-section-no-hint",
        json_append,
        [("pipeline", {})],
        [
            "pipeline: unknown key (known keys here: source, format, table, tables, sink, spark, metrics, maintenance)"
        ],
    ),
    # ------------------------------------------------------------------ [source]
    (
        "source.bootstrap_servers-missing",
        json_append,
        [("source.bootstrap_servers", D)],
        ["source.bootstrap_servers: is required", "broker1:9092"],
    ),
    (
        "source.bootstrap_servers-type",
        json_append,
        [("source.bootstrap_servers", 9092)],
        ["source.bootstrap_servers: expected a string", "got an integer 9092"],
    ),
    (
        "source.topics-missing",
        json_append,
        [("source.topics", D)],
        ["source: exactly one of topics, topic_pattern, assign must be set (found: none)"],
    ),
    (
        "source.topics-and-pattern",
        json_append,
        [("source.topic_pattern", "orders.*")],
        ["found: source.topics, source.topic_pattern"],
    ),
    (
        "source.topics-string",
        json_append,
        [("source.topics", "orders")],
        ['source.topics: expected a list of topic names such as ["orders"], got a string'],
    ),
    (
        "source.topics-empty",
        json_append,
        [("source.topics", [])],
        ["source.topics: names no topic"],
    ),
    (
        "source.topics-item",
        json_append,
        [("source.topics", ["orders", 7])],
        ["source.topics[1]: expected a non-empty string", "got an integer 7"],
    ),
    (
        "source.topic_pattern-regex",
        json_append,
        [("source.topics", D), ("source.topic_pattern", "orders(")],
        ["source.topic_pattern: invalid regular expression"],
    ),
    (
        "source.assign-json",
        json_append,
        [("source.topics", D), ("source.assign", "{not json")],
        ["source.assign:"],
    ),
    (
        "source.starting_offsets-json",
        json_append,
        [("source.starting_offsets", "earlyest")],
        ["source.starting_offsets:"],
    ),
    (
        "source.starting_offsets-type",
        json_append,
        [("source.starting_offsets", 0)],
        ['source.starting_offsets: expected "earliest", "latest" or offsets JSON', "an integer 0"],
    ),
    (
        "source.max_offsets_per_trigger-minimum",
        json_append,
        [("source.max_offsets_per_trigger", 0)],
        ["source.max_offsets_per_trigger: must be at least 1, got 0"],
    ),
    (
        "source.max_offsets_per_trigger-type",
        json_append,
        [("source.max_offsets_per_trigger", "1000")],
        ["source.max_offsets_per_trigger: expected an integer, got a string '1000'"],
    ),
    (
        "source.fail_on_data_loss-type",
        json_append,
        [("source.fail_on_data_loss", "yes")],
        ["source.fail_on_data_loss: expected true or false, got a string 'yes'"],
    ),
    (
        "source.include_headers-type",
        json_append,
        [("source.include_headers", 1)],
        ["source.include_headers: expected true or false, got an integer 1"],
    ),
    (
        "source.min_partitions-bool",
        json_append,
        [("source.min_partitions", True)],
        ["source.min_partitions: expected an integer, got a boolean True"],
    ),
    (
        "source.task_records-minimum",
        json_append,
        [("source.task_records", 0)],
        ["source.task_records: must be at least 1, got 0"],
    ),
    (
        "source.fetch_offset_retries-minimum",
        json_append,
        [("source.fetch_offset_retries", -1)],
        ["source.fetch_offset_retries: must be at least 0, got -1"],
    ),
    (
        "source.kafka-type",
        json_append,
        [("source.kafka", "security.protocol=SSL")],
        ["source.kafka: expected a table of settings, got a string"],
    ),
    (
        "source.kafka-bootstrap",
        json_append,
        [("source.kafka", {"bootstrap.servers": "x:9092"})],
        ['source.kafka."bootstrap.servers": set source.bootstrap_servers instead'],
    ),
    (
        "source.kafka-forbidden",
        json_append,
        [("source.kafka", {"enable.auto.commit": True})],
        ['source.kafka."enable.auto.commit":', "is not allowed"],
    ),
    (
        "source.kafka-value-type",
        json_append,
        [("source.kafka", {"client.id": ["a"]})],
        ['source.kafka."client.id": expected a string, number or boolean, got a list'],
    ),
    (
        "source-unknown-key",
        json_append,
        [("source.topic", ["orders"])],
        ["source.topic: unknown key; did you mean 'topics'?"],
    ),
    (
        "source-unknown-spark-name",
        json_append,
        [("source.startingOffsets", "latest")],
        ["source.startingOffsets: unknown key; did you mean 'starting_offsets'?"],
    ),
    # ------------------------------------------------------------------ [format]
    (
        "format.type-missing",
        json_append,
        [("format.type", D)],
        ['format.type: is required ("json"'],
    ),
    (
        "format.type-typo",
        json_append,
        [("format.type", "jsn")],
        ['format.type: expected one of "json", "avro"', "got 'jsn'; did you mean 'json'?"],
    ),
    (
        "format.type-upsert-avro-without-schemas",
        json_append,
        [("format.type", "upsert-avro")],
        ["format.schema_registry_url: Avro needs a schema source"],
    ),
    (
        "format.key_format-not-debezium",
        json_append,
        [("format.key_format", "json")],
        ['format.key_format: only applies to debezium-* and upsert-* formats, not "json"'],
    ),
    (
        "format.key_format-choice",
        cdc,
        [("format.key_format", "protobuf")],
        ['format.key_format: expected one of "json", "avro", got \'protobuf\''],
    ),
    (
        "format.decimal_handling_mode-not-debezium",
        json_append,
        [("format.decimal_handling_mode", "string")],
        ['format.decimal_handling_mode: only applies to debezium-* formats, not "json"'],
    ),
    (
        "format.vectorized-not-json",
        cdc,
        [("format.type", "upsert-json"), ("format.vectorized", False)],
        ['format.vectorized: does not apply to the "upsert-json" format'],
    ),
    (
        "format.epoch_unit-choice",
        json_append,
        [("format.epoch_unit", "sec")],
        ['format.epoch_unit: expected one of "ms", "us", "ns", "auto", "none", got \'sec\''],
    ),
    (
        "format.case_insensitive-type",
        json_append,
        [("format.case_insensitive", "true")],
        ["format.case_insensitive: expected true or false, got a string 'true'"],
    ),
    (
        "format.schema_registry_url-json",
        json_append,
        [("format.schema_registry_url", "http://registry:8081")],
        ['format.schema_registry_url: is only used by Avro formats, not "json"'],
    ),
    (
        "format.schema_registry_url-avro-missing",
        json_append,
        [("format.type", "avro")],
        ["format.schema_registry_url: Avro needs a schema source"],
    ),
    (
        "format.schema_dir-and-registry",
        json_append,
        [
            ("format.type", "avro"),
            ("format.schema_dir", "schemas"),
            ("format.schema_registry_url", "http://registry:8081"),
        ],
        ["format: set only one of schema_registry_url and schema_dir"],
    ),
    (
        "format-unknown-key",
        json_append,
        [("format.epoch_units", "ms")],
        ["format.epoch_units: unknown key; did you mean 'epoch_unit'?"],
    ),
    # ------------------------------------------------------------------ [table]
    (
        "table.catalog-missing",
        json_append,
        [("table.catalog", D)],
        ['table.catalog: is required ("sqlite:////path/catalog.db"'],
    ),
    (
        "table.catalog-not-uri",
        json_append,
        [("table.catalog", "catalog.db")],
        ["table.catalog: expected a URI such as", "got 'catalog.db'"],
    ),
    (
        "table.catalog-backend",
        json_append,
        [("table.catalog", "mysql://u@db/cat")],
        ["table.catalog: catalog backend 'mysql' is not supported"],
    ),
    (
        "table.catalog-sqlite-memory",
        json_append,
        [("table.catalog", "sqlite://")],
        ["table.catalog: an SQLite catalog needs a database file path"],
    ),
    (
        "table.warehouse-missing",
        json_append,
        [("table.warehouse", D)],
        ["table.warehouse: is required with a SQL catalog"],
    ),
    (
        "table.warehouse-differs-from-filesystem",
        json_append,
        [("table.catalog", "file:///data/lake"), ("table.warehouse", "/data/other")],
        ["table.warehouse: differs from the filesystem catalog's path"],
    ),
    (
        "table.name-missing",
        json_append,
        [("table.name", D)],
        ['table.name: is required ("namespace.table")'],
    ),
    (
        "table.name-no-namespace",
        json_append,
        [("table.name", "orders")],
        ["table.name: expected \"namespace.table\", got 'orders'"],
    ),
    (
        "table.columns-none",
        json_append,
        [("table.columns", D)],
        ["table.columns: no columns declared; add [[table.columns]] entries or set infer_schema"],
    ),
    (
        "table.columns-type",
        json_append,
        [("table.columns", {"name": "id"})],
        ["table.columns: expected an array of tables ([[table.columns]] entries), got a table"],
    ),
    (
        "table.columns-name-missing",
        json_append,
        [("table.columns.1.name", D)],
        ["table.columns[1].name: is required (a column name)"],
    ),
    (
        "table.columns-type-typo",
        json_append,
        [("table.columns.0.type", "lng")],
        ["table.columns[0].type: expected a type such as", "unknown type 'lng'", "'long'"],
    ),
    (
        "table.columns-type-unclosed",
        json_append,
        [("table.columns.2.type", "list<string")],
        ["table.columns[2].type: expected a type such as", "missing '>'"],
    ),
    (
        "table.columns-required-type",
        json_append,
        [("table.columns.0.required", "yes")],
        ["table.columns[0].required: expected true or false, got a string 'yes'"],
    ),
    (
        "table.columns-duplicate",
        json_append,
        [("table.columns.2.name", "id")],
        ["table.columns[2].name: column 'id' is declared twice"],
    ),
    (
        "table.columns-unknown-key",
        json_append,
        [("table.columns.1.nullable", True)],
        ["table.columns[1].nullable: unknown key (known keys here: name, type, required, doc)"],
    ),
    (
        "table.identifier_fields-string",
        cdc,
        [("table.identifier_fields", "id")],
        ["table.identifier_fields: expected a list of strings, got a string 'id'"],
    ),
    (
        "table.identifier_fields-undeclared",
        cdc,
        [("table.identifier_fields", ["id", "order_id"])],
        ["table.identifier_fields[1]: 'order_id' is not a declared column"],
    ),
    (
        "table.identifier_fields-optional",
        cdc,
        [("table.columns.0.required", False)],
        ["table.identifier_fields[0]: 'id' is declared with required = false"],
    ),
    (
        "table.identifier_fields-twice",
        cdc,
        [("table.identifier_fields", ["id", "id"])],
        ["table.identifier_fields: names a column twice"],
    ),
    (
        "table.partition-string",
        json_append,
        [("table.partition", "day(ts)")],
        ["table.partition: expected a list of transforms", "got a string 'day(ts)'"],
    ),
    (
        "table.partition-bad-transform",
        json_append,
        [("table.partition", ["day(ts)", "bucket(id)"])],
        ['table.partition[1]: expected a transform such as "bucket(16, id)"', "got 'bucket(id)'"],
    ),
    (
        "table.partition-unknown-column",
        json_append,
        [("table.partition", ["day(created)"])],
        ["table.partition[0]: 'day(created)':"],
    ),
    (
        "table.partition-transform-type",
        json_append,
        [("table.partition", ["day(note)"])],
        ["table.partition: ", "transform day cannot apply to column 'note' of type string"],
    ),
    (
        "table.partition-item-type",
        json_append,
        [("table.partition", [16])],
        ["table.partition[0]: expected a transform such as", "got an integer 16"],
    ),
    (
        "table.properties-ledger",
        json_append,
        [("table.properties", {"calving.ledger.orders": "{}"})],
        ['table.properties."calving.ledger.orders": the exactly-once ledger is written by calving'],
    ),
    (
        "table.infer_schema-type",
        json_append,
        [("table.infer_schema", "true")],
        ["table.infer_schema: expected true or false, got a string 'true'"],
    ),
    (
        "table.io-type",
        json_append,
        [("table.io", ["s3.region"])],
        ["table.io: expected a table of settings, got a list"],
    ),
    (
        "table-unknown-key",
        json_append,
        [("table.colums", [{"name": "x", "type": "long"}])],
        ["table.colums: unknown key; did you mean 'columns'?"],
    ),
    (
        "table-unknown-key-no-hint",
        json_append,
        [("table.primary_key", ["id"])],
        ["table.primary_key: unknown key (known keys here: catalog, catalog_name, warehouse"],
    ),
    # ------------------------------------------------------------------ [sink]
    (
        "sink.writer_id-missing",
        json_append,
        [("sink.writer_id", D)],
        ["sink.writer_id: is required (a stable name for this pipeline)"],
    ),
    (
        "sink.writer_id-empty",
        json_append,
        [("sink.writer_id", "  ")],
        ["sink.writer_id: must not be empty"],
    ),
    (
        "sink.writer_id-spaces",
        json_append,
        [("sink.writer_id", "orders v2")],
        ["sink.writer_id: must not contain spaces, got 'orders v2'"],
    ),
    (
        "sink.writer_id-type",
        json_append,
        [("sink.writer_id", 7)],
        ["sink.writer_id: expected a stable name for this pipeline, got an integer 7"],
    ),
    (
        "sink.checkpoint-missing",
        json_append,
        [("sink.checkpoint", D)],
        ["sink.checkpoint: is required (a directory or URI for Spark's checkpoint)"],
    ),
    (
        "sink.trigger_interval-format",
        json_append,
        [("sink.trigger_interval", "soon")],
        ['sink.trigger_interval: expected a duration such as "500 milliseconds"', "got 'soon'"],
    ),
    (
        "sink.trigger_interval-type",
        json_append,
        [("sink.trigger_interval", 5)],
        ['sink.trigger_interval: expected a duration such as "5 seconds", got an integer 5'],
    ),
    (
        "sink.dead_letter_table-same",
        json_append,
        [("sink.dead_letter_table", "orders")],
        ["sink.dead_letter_table: must differ from table.name"],
    ),
    (
        "sink.dead_letter_table-empty-part",
        json_append,
        [("sink.dead_letter_table", "shop.")],
        ["sink.dead_letter_table: expected \"namespace.table\", got 'shop.'"],
    ),
    (
        "sink.key_partitions-minimum",
        cdc,
        [("sink.key_partitions", 0)],
        ["sink.key_partitions: must be at least 1, got 0"],
    ),
    (
        "sink.index_save_every-type",
        cdc,
        [("sink.index_save_every", 2.5)],
        ["sink.index_save_every: expected an integer, got a float 2.5"],
    ),
    (
        "sink.evolve_schema-type",
        json_append,
        [("sink.evolve_schema", "no")],
        ["sink.evolve_schema: expected true or false, got a string 'no'"],
    ),
    (
        "sink-unknown-key",
        json_append,
        [("sink.writer_idd", "x")],
        ["sink.writer_idd: unknown key; did you mean 'writer_id'?"],
    ),
    # ------------------------------------------------------------------ [spark]
    (
        "spark.master-type",
        json_append,
        [("spark", {"master": 2})],
        ["spark.master: expected a Spark master URL, got an integer 2"],
    ),
    (
        "spark.conf-master",
        json_append,
        [("spark", {"conf": {"spark.master": "local[4]"}})],
        ["spark.conf: set spark.master / spark.app_name instead of the conf keys"],
    ),
    (
        "spark.conf-type",
        json_append,
        [("spark", {"conf": "spark.ui.enabled=false"})],
        ["spark.conf: expected a table of settings, got a string"],
    ),
    (
        "spark-unknown-key",
        json_append,
        [("spark", {"appname": "x"})],
        ["spark.appname: unknown key; did you mean 'app_name'?"],
    ),
]


@pytest.mark.parametrize(
    ("base", "edits", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_error_names_the_key(base, edits, fragments):
    doc = base()
    parse(doc)  # the unedited document is valid: the edit alone causes the error
    for key, value in edits:
        doc = edit(doc, key, value)
    message = error_of(doc)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_case_ids_are_unique():
    assert len({c[0] for c in CASES}) == len(CASES)


def test_file_errors_name_the_file_and_the_key(tmp_path):
    path = tmp_path / "pipeline.toml"
    path.write_text(
        """
[source]
bootstrap_servers = "broker:9092"
topics = ["orders"]

[format]
type = "json"

[table]
catalog = "sqlite:///catalog.db"
warehouse = "warehouse"
name = "shop.orders"

[[table.colums]]
name = "id"
type = "long"

[sink]
writer_id = "orders"
checkpoint = "checkpoints"
"""
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: table.colums: unknown key; did you mean 'columns'?"


MISSPELT = [
    ("sink.writer_id", "sink.writer_idd", "orders", "did you mean 'writer_id'?"),
    ("sink.checkpoint", "sink.checkpiont", "ckpt", "did you mean 'checkpoint'?"),
    ("source.topics", "source.topic", ["orders"], "did you mean 'topics'?"),
    ("source.bootstrap_servers", "source.brokers", "k:9092", "known keys here: bootstrap_servers"),
    ("format.type", "format.typ", "json", "did you mean 'type'?"),
    ("table.name", "table.nmae", "shop.orders", "did you mean 'name'?"),
    ("table.catalog", "table.catalogue", "sqlite:///c.db", "did you mean 'catalog'?"),
    ("table.columns", "table.column", [{"name": "id", "type": "long"}], "did you mean 'columns'?"),
    ("table.columns.0.type", "table.columns.0.typ", "long", "did you mean 'type'?"),
]


@pytest.mark.parametrize(
    ("right", "wrong", "value", "hint"), MISSPELT, ids=[m[1] for m in MISSPELT]
)
def test_a_misspelt_required_key_is_reported_as_the_typo(right, wrong, value, hint):
    message = error_of(edit(edit(json_append(), right), wrong, value))
    assert f"{wrong.replace('.0.', '[0].')}: unknown key" in message
    assert hint in message


def test_unknown_key_is_reported_even_when_its_section_is_otherwise_valid(tmp_path):
    path = tmp_path / "pipeline.toml"
    path.write_text(
        """
[source]
bootstrap_servers = "broker:9092"
topics = ["orders"]

[format]
type = "json"

[table]
catalog = "sqlite:///catalog.db"
warehouse = "warehouse"
name = "shop.orders"
infer_schema = true
infer_temporals = false

[sink]
writer_id = "orders"
checkpoint = "checkpoints"
"""
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        f"{path}: table.infer_temporals: unknown key; did you mean 'infer_temporal'?"
    )


def test_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(path)


def test_invalid_toml_names_the_file(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text('[source]\nbootstrap_servers = "broker:9092\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: not valid TOML: ")


def test_a_config_directory_is_not_a_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert str(info.value).startswith(f"{tmp_path}: cannot read the config file")
