"""Many-table configs: a template table name or a topic map routes topics to tables;
per-table keys move to [tables."..."] sections, and every misuse is one line naming
its key."""

from __future__ import annotations

from typing import Any

import pytest

from calving.ingest.config.router import Route, Skip

from .documents import error_of, parse


def routed() -> dict[str, Any]:
    return {
        "source": {"bootstrap_servers": "broker:9092", "topic_pattern": r"db1\.shop\..*"},
        "format": {"type": "debezium-json"},
        "table": {"catalog": "sqlite:///c.db", "warehouse": "wh", "name": "{schema}.{table}"},
        "tables": {"shop.audit_*": {"exclude": True}, "shop.orders": {"partition": ["day(ts)"]}},
        "sink": {"writer_id": "db", "checkpoint": "ckpt"},
    }


def test_a_template_name_builds_a_router_with_its_sections():
    config = parse(routed())
    router = config.router
    assert router is not None and config.table.routed
    source = {"schema": "shop", "table": "orders"}
    route = router.route("db1.shop.orders", source)
    assert isinstance(route, Route) and route.name == "shop.orders"
    assert [p.column for p in route.settings.partition] == ["ts"]
    skipped = router.route("db1.shop.audit_log", {"schema": "shop", "table": "audit_log"})
    assert isinstance(skipped, Skip) and skipped.reason == "excluded"
    assert isinstance(router.route("other.topic"), Skip)


def test_a_topic_map_alone_routes():
    doc = routed()
    doc["table"]["name"] = "shop.unused"
    doc["table"]["topic_map"] = {"db1.shop.orders": "sales.orders"}
    config = parse(doc)
    assert config.router is not None
    route = config.router.route("db1.shop.orders")
    assert isinstance(route, Route) and route.ident == ("sales", "orders")


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        (
            "identifier_fields",
            ["id"],
            "table.identifier_fields: is per table when the table name is routed",
        ),
        ("partition", ["id"], "table.partition: is per table"),
        ("columns", [{"name": "id", "type": "long"}], "table.columns: a routed table name"),
        ("infer_schema", True, "table.infer_schema: a routed table name"),
        ("name_case", "upper", 'table.name_case: expected "lower" or "preserve"'),
        ("invalid_characters", "drop", 'table.invalid_characters: expected "replace" or "error"'),
        (
            "topic_map",
            {"db1.shop.x": "nodots"},
            'table.topic_map."db1.shop.x": expected "namespace.table"',
        ),
    ],
)
def test_misused_table_keys_are_named(key, value, fragment):
    doc = routed()
    doc["table"][key] = value
    message = error_of(doc)
    assert fragment in message and "\n" not in message, message


def test_other_formats_and_assign_are_refused():
    doc = routed()
    doc["format"] = {"type": "json"}
    assert "format.type: a routed table name needs change events" in error_of(doc)
    doc = routed()
    doc["source"] = {"bootstrap_servers": "b:9092", "assign": '{"t": [0]}'}
    assert "source.assign: a routed pipeline reads" in error_of(doc)


def test_sections_need_a_routed_name():
    doc = routed()
    doc["table"]["name"] = "shop.orders"
    doc["table"]["identifier_fields"] = ["id"]
    doc["table"]["columns"] = [{"name": "id", "type": "long"}]
    assert '[tables."..."]: per-table settings need a routed table name' in error_of(doc)


def test_a_bad_template_names_the_key():
    doc = routed()
    doc["table"]["name"] = "{schema}.{nonsense}"
    assert error_of(doc).count("table.name") >= 1


def test_a_bare_dead_letter_table_needs_a_namespace_under_a_template():
    doc = routed()
    doc["sink"]["dead_letter_table"] = "dead_letters"
    message = error_of(doc)
    assert message.endswith(
        "sink.dead_letter_table: a bare name has no namespace when table.name is a template "
        """('{schema}.{table}'); give "namespace.dead_letters\""""
    ), message
    assert "\n" not in message
    doc["sink"]["dead_letter_table"] = "ops.dead_letters"
    assert parse(doc).sink.dead_letter_table == "ops.dead_letters"
    doc = routed()  # a topic map with a plain table.name: its namespace holds a bare name
    doc["table"]["name"] = "shop.unused"
    doc["table"]["topic_map"] = {"db1.shop.orders": "sales.orders"}
    doc["sink"]["dead_letter_table"] = "dead_letters"
    assert parse(doc).sink.dead_letter_table == "shop.dead_letters"


def test_transaction_topic_names_how_collections_map_to_topics():
    doc = routed()
    doc["sink"]["transaction_topic"] = "db1.transaction"
    assert parse(doc).sink.topic_prefix == "db1"
    doc["sink"]["transaction_topic"] = "dbz-tx"  # not <topic.prefix>.transaction
    message = error_of(doc)
    assert message.endswith(
        "sink.transaction_topic: 'dbz-tx' is not named <topic.prefix>.transaction, so END "
        "markers' data collections cannot be mapped to topics; set sink.topic_prefix to "
        "Debezium's topic.prefix"
    ), message
    doc["sink"]["topic_prefix"] = "db1"
    assert parse(doc).sink.topic_prefix == "db1"
    doc["sink"]["topic_prefix"] = "db1."
    assert "sink.topic_prefix: expected Debezium's topic.prefix" in error_of(doc)
    del doc["sink"]["transaction_topic"]
    doc["sink"]["topic_prefix"] = "db1"
    message = error_of(doc)
    assert message.endswith("sink.topic_prefix: maps transaction END markers to topics: set "
                            "transaction_topic"), message  # fmt: skip


def test_a_routed_pipeline_takes_inline_maintenance():
    doc = routed()
    doc["maintenance"] = {"inline": True, "inline_budget": "5 seconds"}
    config = parse(doc)
    assert config.maintenance.inline and config.maintenance.inline_budget_s == 5.0


@pytest.mark.parametrize(
    "values", [{"enabled": True}, {"port": 9464}, {"log_batches": False}, {"lag": False}]
)
def test_a_routed_pipeline_takes_the_metrics_settings(values):
    doc = routed()
    doc["metrics"] = values
    config = parse(doc)
    for key, value in values.items():
        assert getattr(config.metrics, key) == value
