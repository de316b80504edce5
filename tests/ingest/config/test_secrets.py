"""``${env:NAME}`` references: resolution, errors naming key and variable, and values
from the environment kept out of ``repr`` and error messages."""

from __future__ import annotations

import pytest

from calving.ingest.config import parse_config

from .documents import BASE_DIR, cdc, edit, error_of, json_append, parse

SECRET = "s3cr3t-Value-4711"


# ---------------------------------------------------------------- resolution


def test_whole_and_embedded_references_are_resolved():
    doc = cdc()
    doc = edit(doc, "source.bootstrap_servers", "${env:BROKERS}")
    doc = edit(doc, "source.kafka", {"sasl.username": "${env:USER}", "sasl.password": "${env:PW}"})
    doc = edit(doc, "table.catalog", "postgresql+psycopg://${env:USER}:${env:PW}@db:5432/cat")
    doc = edit(doc, "table.io", {"s3.secret-access-key": "${env:PW}", "s3.region": "eu-west-1"})
    doc = edit(doc, "sink.checkpoint", "s3a://bucket/${env:ENVIRONMENT}/checkpoints")
    env = {"BROKERS": "k1:9092,k2:9092", "USER": "calving", "PW": SECRET, "ENVIRONMENT": "prod"}

    config = parse(doc, env)

    assert config.source.bootstrap_servers == "k1:9092,k2:9092"
    assert config.source.kafka == {"sasl.username": "calving", "sasl.password": SECRET}
    assert config.source.spark_options()["kafka.sasl.password"] == SECRET
    assert config.table.catalog == f"postgresql+psycopg://calving:{SECRET}@db:5432/cat"
    assert config.table.io == {"s3.secret-access-key": SECRET, "s3.region": "eu-west-1"}
    assert config.sink.checkpoint == "s3a://bucket/prod/checkpoints"


def test_environment_strings_for_booleans_and_integers():
    doc = json_append()
    doc = edit(doc, "source.fail_on_data_loss", "${env:STRICT}")
    doc = edit(doc, "source.max_offsets_per_trigger", "${env:MAX}")
    doc = edit(doc, "sink.evolve_schema", "${env:EVOLVE}")
    config = parse(doc, {"STRICT": "False", "MAX": " 2500 ", "EVOLVE": "true"})
    assert config.source.fail_on_data_loss is False
    assert config.source.max_offsets_per_trigger == 2500
    assert config.sink.evolve_schema is True


def test_the_process_environment_is_the_default(monkeypatch):
    monkeypatch.setenv("CALVING_TEST_BROKERS", "envbroker:9092")
    doc = edit(json_append(), "source.bootstrap_servers", "${env:CALVING_TEST_BROKERS}")
    config = parse_config(doc, base_dir=BASE_DIR)
    assert config.source.bootstrap_servers == "envbroker:9092"


def test_an_explicit_environ_replaces_the_process_environment(monkeypatch):
    monkeypatch.setenv("CALVING_TEST_BROKERS", "envbroker:9092")
    doc = edit(json_append(), "source.bootstrap_servers", "${env:CALVING_TEST_BROKERS}")
    message = error_of(doc, {"OTHER": "x"})
    assert "environment variable CALVING_TEST_BROKERS is not set" in message


def test_text_without_a_reference_is_unchanged():
    doc = edit(json_append(), "table.columns.2.doc", "costs $5 {net}, not ${env}")
    assert parse(doc).table.columns[2].doc == "costs $5 {net}, not ${env}"


# ---------------------------------------------------------------- unset / invalid variables

MISSING = [
    ("source.bootstrap_servers", "${env:BROKERS}", "source.bootstrap_servers", "BROKERS"),
    ("source.topics", ["orders", "${env:TOPIC}"], "source.topics[1]", "TOPIC"),
    (
        "source.kafka",
        {"sasl.password": "${env:KAFKA_PASSWORD}"},
        'source.kafka."sasl.password"',
        "KAFKA_PASSWORD",
    ),
    ("format.type", "${env:FORMAT}", "format.type", "FORMAT"),
    (
        "table.catalog",
        "postgresql+psycopg://calving:${env:PGPASSWORD}@db/cat",
        "table.catalog",
        "PGPASSWORD",
    ),
    (
        "table.io",
        {"s3.secret-access-key": "${env:S3_SECRET}"},
        'table.io."s3.secret-access-key"',
        "S3_SECRET",
    ),
    ("table.columns.1.doc", "${env:DOC}", "table.columns[1].doc", "DOC"),
    ("sink.writer_id", "orders-${env:STAGE}", "sink.writer_id", "STAGE"),
    (
        "spark",
        {"conf": {"spark.ui.port": "${env:UI_PORT}"}},
        'spark.conf."spark.ui.port"',
        "UI_PORT",
    ),
]


@pytest.mark.parametrize(
    ("key", "value", "shown_key", "variable"), MISSING, ids=[m[0] for m in MISSING]
)
def test_unset_variable_names_key_and_variable(key, value, shown_key, variable):
    message = error_of(edit(json_append(), key, value), {"UNRELATED": SECRET})
    assert message == (
        f"pipeline.toml: {shown_key}: environment variable {variable} is not set "
        f"(referenced as ${{env:{variable}}})"
    )


def test_only_the_first_unset_variable_of_a_string_is_needed():
    doc = edit(json_append(), "table.catalog", "postgresql+psycopg://${env:U}:${env:P}@db/cat")
    message = error_of(doc, {"U": "calving"})
    assert "table.catalog: environment variable P is not set" in message


@pytest.mark.parametrize("reference", ["${env:}", "${env:1ST}", "${env:MY-VAR}", "${env:A B}"])
def test_invalid_reference(reference):
    message = error_of(edit(json_append(), "sink.checkpoint", f"/ckpt/{reference}"), {})
    assert f"sink.checkpoint: {reference} is not a valid environment variable reference" in message


# ---------------------------------------------------------------- never echoed in errors


ECHO = [
    ("format.type", "not-a-format", "format.type: expected one of"),
    ("table.catalog", "not a uri", "table.catalog: expected a URI such as"),
    (
        "source.max_offsets_per_trigger",
        "many",
        "source.max_offsets_per_trigger: expected an integer",
    ),
    ("source.fail_on_data_loss", "maybe", "source.fail_on_data_loss: expected true or false"),
    ("sink.trigger_interval", "whenever", "sink.trigger_interval: expected a duration"),
    ("sink.writer_id", "has spaces", "sink.writer_id: must not contain spaces"),
    ("table.name", "no-namespace", 'table.name: expected "namespace.table"'),
    ("sink.dead_letter_table", "ops.", 'sink.dead_letter_table: expected "namespace.table"'),
    ("table.warehouse", "s3://[bucket", "table.warehouse: expected a directory or a valid URI"),
    ("source.max_offsets_per_trigger", "-3", "source.max_offsets_per_trigger: must be at least 1"),
]


@pytest.mark.parametrize(("key", "bad", "fragment"), ECHO, ids=[e[0] + "=" + e[1] for e in ECHO])
def test_errors_show_where_an_env_value_came_from_not_the_value(key, bad, fragment):
    message = error_of(edit(json_append(), key, "${env:BAD_VALUE}"), {"BAD_VALUE": bad})
    assert fragment in message
    assert "<from ${env:BAD_VALUE}>" in message
    assert bad not in message


def test_the_same_errors_show_literal_values():
    message = error_of(edit(json_append(), "sink.trigger_interval", "whenever"))
    assert "got 'whenever'" in message


# ---------------------------------------------------------------- masked repr


def _secret_doc():
    doc = cdc()
    doc = edit(doc, "source.bootstrap_servers", "${env:BROKERS}")
    doc = edit(doc, "source.topics", ["${env:TOPIC}"])
    doc = edit(doc, "source.kafka", {"sasl.username": "${env:USER}", "sasl.password": "${env:PW}"})
    doc = edit(doc, "format.type", "debezium-avro")
    doc = edit(doc, "format.schema_registry_url", "${env:REGISTRY}")
    doc = edit(doc, "table.catalog", "postgresql+psycopg://calving:${env:PW}@db:5432/cat")
    doc = edit(doc, "table.warehouse", "s3://${env:BUCKET}/warehouse")
    doc = edit(doc, "table.io", {"s3.access-key-id": "${env:KEY_ID}", "s3.region": "eu-west-1"})
    doc = edit(doc, "table.properties", {"owner": "${env:OWNER}"})
    doc = edit(doc, "sink.checkpoint", "s3a://${env:BUCKET}/checkpoints")
    doc = edit(doc, "sink.dead_letter_topic", "${env:DLQ}")
    doc = edit(doc, "spark", {"master": "${env:MASTER}", "conf": {"spark.x": "${env:SPARKX}"}})
    return doc


SECRETS = {
    "BROKERS": "brokers-secret-01:9092",
    "TOPIC": "topic-secret-02",
    "USER": "user-secret-03",
    "PW": "password-secret-04",
    "BUCKET": "bucket-secret-05",
    "KEY_ID": "keyid-secret-06",
    "OWNER": "owner-secret-07",
    "DLQ": "dlq-secret-08",
    "MASTER": "spark://master-secret-09:7077",
    "SPARKX": "sparkx-secret-10",
    "REGISTRY": "https://registry-secret-11.internal:8081",
}


def test_values_from_the_environment_are_resolved_for_use():
    config = parse(_secret_doc(), SECRETS)
    assert config.source.topics == ("topic-secret-02",)
    assert config.source.kafka["sasl.password"] == "password-secret-04"
    assert config.format.schema_registry_url == "https://registry-secret-11.internal:8081"
    assert config.table.warehouse == "s3://bucket-secret-05/warehouse"
    assert config.table.properties == {"owner": "owner-secret-07"}
    assert config.sink.checkpoint == "s3a://bucket-secret-05/checkpoints"
    assert config.sink.dead_letter_topic == "dlq-secret-08"
    assert config.spark.master == "spark://master-secret-09:7077"
    assert config.spark.conf == {"spark.x": "sparkx-secret-10"}


@pytest.mark.parametrize("section", ["source", "format", "table", "sink", "spark", None])
def test_repr_holds_no_value_from_the_environment(section):
    config = parse(_secret_doc(), SECRETS)
    shown = repr(config if section is None else getattr(config, section))
    for name, value in SECRETS.items():
        assert value not in shown, f"{name} leaks into repr: {shown}"
    assert "***" in shown


def test_repr_keeps_literal_values_and_masks_each_env_value_in_place():
    config = parse(_secret_doc(), SECRETS)
    source = repr(config.source)
    assert "bootstrap_servers='***'" in source
    assert "topics=('***',)" in source
    assert "'sasl.username': '***', 'sasl.password': '***'" in source
    table = repr(config.table)
    assert "catalog='***'" in table
    assert "name='shop.orders'" in table
    assert "'s3.access-key-id': '***', 's3.region': 'eu-west-1'" in table
    assert "identifier_fields=('id',)" in table
    sink = repr(config.sink)
    assert "writer_id='orders'" in sink
    assert "checkpoint='***'" in sink
    assert "dead_letter_topic='***'" in sink
    assert "conf={'spark.x': '***'}" in repr(config.spark)


def test_literal_secrets_are_masked_by_key_name_and_in_urls():
    doc = edit(json_append(), "source.kafka", {"sasl.jaas.config": "user=x password=literal-pw"})
    doc = edit(doc, "table.catalog", "postgresql+psycopg://calving:literal-url-pw@db/cat")
    doc = edit(doc, "table.io", {"s3.secret-access-key": "literal-s3", "s3.session-token": "tok"})
    config = parse(doc)
    shown = repr(config)
    for value in ("literal-pw", "literal-url-pw", "literal-s3", "'tok'"):
        assert value not in shown
    assert "catalog='postgresql+psycopg://calving:***@db/cat'" in shown
    assert config.table.catalog == "postgresql+psycopg://calving:literal-url-pw@db/cat"
