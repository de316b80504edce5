"""Checks across sections (loader._check_across) and the defaults they depend on."""

from __future__ import annotations

import pytest

from .documents import cdc, edit, error_of, json_append, parse


@pytest.mark.parametrize("kind", ["debezium-json", "upsert-json"])
def test_keyed_format_needs_identifier_fields(kind):
    doc = edit(json_append(), "format.type", kind)
    message = error_of(doc)
    assert message == (
        f'pipeline.toml: table.identifier_fields: format.type "{kind}" carries updates and '
        'deletes, so the table needs a primary key (e.g. identifier_fields = ["id"])'
    )


def test_keyed_avro_format_needs_identifier_fields():
    doc = edit(json_append(), "format", {"type": "debezium-avro", "schema_dir": "schemas"})
    assert 'table.identifier_fields: format.type "debezium-avro" carries updates' in error_of(doc)


def test_empty_identifier_fields_count_as_missing():
    doc = edit(cdc(), "table.identifier_fields", [])
    assert 'table.identifier_fields: format.type "debezium-json"' in error_of(doc)


@pytest.mark.parametrize("kind", ["debezium-json", "upsert-json"])
def test_keyed_format_with_identifier_fields(kind):
    config = parse(edit(cdc(), "format.type", kind))
    assert config.format.keyed
    assert config.table.identifier_fields == ("id",)


def test_plain_json_needs_no_key_but_may_have_one():
    assert parse(json_append()).table.identifier_fields == ()
    keyed = parse(edit(json_append(), "table.identifier_fields", ["id"]))
    assert keyed.format.keyed is False
    assert keyed.table.identifier_fields == ("id",)
    assert keyed.table.columns[0].required is True


@pytest.mark.parametrize(
    ("fmt", "with_key"),
    [
        ({"type": "avro", "schema_dir": "schemas"}, False),
        ({"type": "avro", "schema_registry_url": "http://registry:8081"}, False),
        ({"type": "debezium-avro", "schema_dir": "schemas"}, True),
    ],
)
def test_infer_schema_needs_a_json_format(fmt, with_key):
    doc = edit(json_append(), "format", fmt)
    doc = edit(doc, "table.columns")
    doc = edit(doc, "table.infer_schema", True)
    if with_key:
        doc = edit(doc, "table.identifier_fields", ["id"])
    message = error_of(doc)
    assert message == (
        "pipeline.toml: table.infer_schema: only JSON formats can be inferred, "
        f'not "{fmt["type"]}"; declare [[table.columns]]'
    )


def test_avro_with_declared_columns_is_fine():
    doc = edit(json_append(), "format", {"type": "avro", "schema_dir": "schemas"})
    config = parse(doc)
    assert config.format.value_format == "avro"
    assert config.format.needs_schema_source


def test_debezium_json_with_avro_keys_needs_a_schema_source():
    doc = edit(cdc(), "format.key_format", "avro")
    assert "format.schema_registry_url: Avro needs a schema source" in error_of(doc)
    config = parse(edit(doc, "format.schema_dir", "schemas"))
    assert (config.format.value_format, config.format.key_format) == ("json", "avro")
    assert config.format.needs_schema_source


@pytest.mark.parametrize("kind", ["json", "upsert-json", "debezium-json"])
def test_infer_schema_with_json_formats(kind):
    doc = edit(cdc(), "format.type", kind)
    doc = edit(doc, "table.columns")
    doc = edit(doc, "table.infer_schema", True)
    config = parse(doc)
    assert config.table.infer_schema is True
    assert config.table.columns == ()
    # The key is not declared: it must come from the sample (checked when the table is made).
    assert config.table.identifier_fields == ("id",)


def test_partition_of_inferred_columns_waits_for_the_sample():
    doc = edit(json_append(), "table.columns")
    doc = edit(doc, "table.infer_schema", True)
    doc = edit(doc, "table.partition", ["day(event_time)", "bucket(8, user)"])
    config = parse(doc)
    assert [p.column for p in config.table.partition] == ["event_time", "user"]


def test_partition_of_declared_columns_is_checked_even_when_inferring():
    doc = edit(json_append(), "table.infer_schema", True)
    doc = edit(doc, "table.partition", ["day(note)"])
    assert "transform day cannot apply to column 'note' of type string" in error_of(doc)


def test_defaults_that_depend_on_the_format():
    plain = parse(json_append()).format
    assert (plain.epoch_unit, plain.key_format, plain.envelope) == (None, None, "plain")
    debezium = parse(cdc()).format
    assert (debezium.epoch_unit, debezium.key_format, debezium.envelope) == (
        "auto",
        "json",
        "debezium",
    )
    none = parse(edit(cdc(), "format.epoch_unit", "none")).format
    assert none.epoch_unit is None


def test_dead_letter_table_defaults_to_the_table_namespace():
    config = parse(edit(json_append(), "sink.dead_letter_table", "orders_dlq"))
    assert config.sink.dead_letter_table == "shop.orders_dlq"
    other = parse(edit(json_append(), "sink.dead_letter_table", "ops.dead_letters"))
    assert other.sink.dead_letter_table == "ops.dead_letters"


def test_defaults():
    config = parse(json_append())
    assert config.source.starting_offsets == "earliest"
    assert config.source.fail_on_data_loss is True
    assert config.source.include_headers is False
    assert config.table.catalog_name == "calving"
    assert config.table.infer_schema is False
    assert config.table.infer_temporal is True
    assert config.sink.trigger_interval == "2 seconds"
    assert config.sink.trigger_seconds == 2.0
    assert config.sink.index_save_every == 20
    assert config.sink.key_partitions is None
    assert config.sink.evolve_schema is True
    assert (config.spark.master, config.spark.app_name, config.spark.conf) == (
        "local[2]",
        "calving",
        {},
    )
    assert config.format.vectorized is True
    assert config.format.decimal_handling_mode == "precise"
