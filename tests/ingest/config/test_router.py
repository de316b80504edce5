"""Table routing for whole-database CDC (``calving.ingest.config.router``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calving.commit.errors import ConfigError
from calving.commit.spec.transforms import bucket
from calving.ingest.config.loader import read_toml
from calving.ingest.config.router import NeedsSource, Route, Skip, TableRouter
from calving.ingest.config.table_names import NameRules, TableNameError, parse_template

RECORDED = Path(__file__).resolve().parents[1] / "decode" / "connect_schemas"
PATTERN = r"dbserver1\.inventory\..*"


def _source(name: str) -> dict:
    """The ``source`` block of a recorded PostgreSQL-connector event."""
    return json.loads((RECORDED / name).read_text())["value"]["payload"]["source"]


def _mysql(table: str, db: str = "shop") -> dict:
    # MySQL's source block has db and table but no schema.
    return {"connector": "mysql", "name": "mysql1", "db": db, "table": table, "file": "b.000003"}


def _route(router: TableRouter, topic: str, source: dict | None = None) -> Route:
    out = router.route(topic, source)
    assert isinstance(out, Route), out
    return out


# ---------------------------------------------------------------- templates


def test_recorded_postgres_sources_route_by_schema_and_table():
    router = TableRouter.from_config(name="{schema}.{table}", topic_pattern=PATTERN)
    orders = _route(router, "dbserver1.inventory.orders", _source("pg_orders.json"))
    customers = _route(router, "dbserver1.inventory.customers", _source("pg_customers.json"))
    assert orders.ident == ("inventory", "orders") and orders.name == "inventory.orders"
    assert customers.name == "inventory.customers"
    assert orders.settings.pattern == "" and not orders.settings.exclude


@pytest.mark.parametrize(
    ("template", "topic", "source", "expected"),
    [
        ("cdc.{db}_{table}", "mysql1.shop.orders", _mysql("orders"), ("cdc", "shop_orders")),
        (
            "{name}.{db}.{table}",
            "mysql1.shop.orders",
            _mysql("orders"),
            ("mysql1", "shop", "orders"),
        ),
        ("raw.{topic[2]}", "dbserver1.inventory.orders", None, ("raw", "orders")),
        ("raw.{topic[-1]}", "a.b.c.d", None, ("raw", "d")),
        (
            "{topic[0]}.{topic[1]}_{topic[2]}",
            "dbserver1.inventory.orders",
            None,
            ("dbserver1", "inventory_orders"),
        ),
        (
            "lake.{topic}",
            "dbserver1.inventory.orders",
            None,
            ("lake", "dbserver1_inventory_orders"),
        ),
        (
            "{connector}.{table}",
            "t",
            {"connector": "postgresql", "table": "x"},
            ("postgresql", "x"),
        ),
        ("mongo.{db}_{collection}", "m.d.c", {"db": "d", "collection": "c"}, ("mongo", "d_c")),
        ("static.events", "anything", None, ("static", "events")),
    ],
)
def test_template_placeholders(template, topic, source, expected):
    router = TableRouter.from_config(name=template, topic_pattern=".*")
    assert _route(router, topic, source).ident == expected


def test_values_are_sanitized_and_lowercased_by_default():
    router = TableRouter.from_config(name="{schema}.{table}", topic_pattern=".*")
    source = {"schema": "Sales-EU", "table": "Order Lines.2024"}
    # One value is one level: its dot is replaced like any other invalid character.
    assert _route(router, "t", source).ident == ("sales_eu", "order_lines_2024")
    preserve = TableRouter.from_config(
        name="{schema}.{table}", topic_pattern=".*", name_case="preserve"
    )
    assert _route(preserve, "t", source).ident == ("Sales_EU", "Order_Lines_2024")
    unicode = _route(router, "t", {"schema": "crm", "table": "café"})
    assert unicode.ident == ("crm", "caf_")


def test_invalid_characters_error_names_key_topic_and_characters():
    router = TableRouter.from_config(
        name="{schema}.{table}", topic_pattern=".*", invalid_characters="error"
    )
    with pytest.raises(TableNameError) as info:
        router.route("dbserver1.sales.order-lines", {"schema": "sales", "table": "order-lines"})
    err = info.value
    assert (err.key, err.topic) == ("table.name", "dbserver1.sales.order-lines")
    assert str(err) == (
        "table.name: topic 'dbserver1.sales.order-lines': {table} 'order-lines' has characters "
        "'-' that are not allowed in table names (ASCII letters, digits and _; set "
        'invalid_characters = "replace")'
    )
    assert _route(router, "t", {"schema": "sales", "table": "ok_1"}).name == "sales.ok_1"


@pytest.mark.parametrize(
    ("template", "topic", "source", "message"),
    [
        (
            "{schema}.{table}",
            "mysql1.shop.orders",
            _mysql("orders"),
            "{schema}: the event's source block has no string 'schema'",
        ),
        (
            "raw.{topic[3]}",
            "dbserver1.inventory.orders",
            None,
            "{topic[3]} needs more than 3 topic name parts",
        ),
        ("{schema}.{table}", "t", {"schema": "", "table": "x"}, "{schema} is empty"),
        ("a.{table}", "t", {"table": "x" * 256}, f"table name {'x' * 40!r}... is longer than 255"),
        (
            "{db}.{table}",
            "t",
            {"db": "d" * 300, "table": "x"},
            f"namespace {'d' * 40!r}... is longer",
        ),
    ],
)
def test_names_that_cannot_be_made_valid(template, topic, source, message):
    router = TableRouter.from_config(name=template, topic_pattern=".*")
    with pytest.raises(TableNameError) as info:
        router.route(topic, source)
    assert info.value.key == "table.name" and info.value.topic == topic
    assert message in info.value.reason


def test_records_without_a_source_block_need_the_topics_previous_route():
    router = TableRouter.from_config(name="{schema}.{table}", topic_pattern=PATTERN)
    assert router.route("dbserver1.inventory.orders") == NeedsSource(
        "dbserver1.inventory.orders", ("schema", "table")
    )
    by_topic = TableRouter.from_config(name="inventory.{topic[2]}", topic_pattern=PATTERN)
    assert _route(by_topic, "dbserver1.inventory.orders").name == "inventory.orders"


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{table}", "must name namespace and table"),
        ("{schema}..{table}", "must name namespace and table"),
        (".{table}", "must name namespace and table"),
        ("{schema}.{tables}", "unknown placeholder '{tables}'"),
        ("{table[1]}.x", "only {topic} takes an index"),
        ("cdc-{schema}.{table}", "has '-' outside a placeholder"),
        ("{schema}.{table", "has '{' outside a placeholder"),
    ],
)
def test_template_config_errors_name_the_key(template, message):
    with pytest.raises(ConfigError) as info:
        parse_template("table.name", template)
    assert str(info.value).startswith("table.name: ") and message in str(info.value)


def test_source_fields_of_a_template():
    assert parse_template("k", "{schema}.{table}_{topic[1]}").source_fields == ("schema", "table")
    assert parse_template("k", "raw.{topic}").source_fields == ()


# ---------------------------------------------------------------- subscription and static map


def test_subscription_by_list_pattern_and_reserved_topics():
    listed = TableRouter.from_config(
        name="inventory.{topic[2]}", topics=["dbserver1.inventory.orders"]
    )
    assert listed.subscribed("dbserver1.inventory.orders")
    assert listed.route("dbserver1.inventory.customers") == Skip(
        "dbserver1.inventory.customers", "unsubscribed"
    )
    router = TableRouter.from_config(
        name="inventory.{topic[-1]}",
        topic_pattern=r"dbserver1\..*",
        reserved=["dbserver1.transaction"],
    )
    assert router.route("dbserver1.transaction") == Skip("dbserver1.transaction", "reserved")
    # The pattern must match the whole topic name, as the Kafka source matches it.
    assert router.route("xdbserver1.inventory.orders").reason == "unsubscribed"
    assert _route(router, "dbserver1.inventory.orders").name == "inventory.orders"


def test_static_topic_map_wins_over_the_template():
    router = TableRouter.from_config(
        name="{schema}.{table}",
        topic_pattern=PATTERN,
        topic_map={"dbserver1.inventory.legacy_orders": "sales.Orders"},
    )
    legacy = _route(router, "dbserver1.inventory.legacy_orders", None)  # no source needed
    assert legacy.ident == ("sales", "orders")
    other = _route(router, "dbserver1.inventory.customers", _source("pg_customers.json"))
    assert other.name == "inventory.customers"
    only_map = TableRouter.from_config(name="x.{table}", topic_map={"t1": "a.b"})
    assert _route(only_map, "t1").name == "a.b" and only_map.route("t2").reason == "unsubscribed"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"topic_map": {"other.topic": "a.b"}, "topic_pattern": PATTERN},
            (
                "table.topic_map.\"other.topic\": topic 'other.topic' is not read "
                "(source.topic_pattern does not name it)"
            ),
        ),
        (
            {"topic_map": {"t": "a.b"}, "topics": ["u"]},
            "table.topic_map.t: topic 't' is not read (source.topics does not name it)",
        ),
        (
            {"topic_map": {"t": "a-b.c"}, "topics": ["t"]},
            "table.topic_map.t: table name 'a-b.c' may hold only ASCII letters, digits, _ and .",
        ),
        (
            {"topic_map": {"t": "orders"}, "topics": ["t"]},
            "table.topic_map.t: topic '(static route)': table name 'orders' has no namespace",
        ),
        ({"topic_map": {"t": 5}, "topics": ["t"]}, "table.topic_map.t: expected a table name"),
        ({"topic_pattern": "("}, "source.topic_pattern: invalid regex '('"),
        ({"topic_pattern": ".*", "topics": ["a"]}, "source.topic_pattern: give source.topics"),
        ({}, "source.topics: no topics to read"),
        ({"topics": ["a"], "name_case": "upper"}, 'table.name_case: expected "lower" or'),
        ({"topics": ["a"], "invalid_characters": "drop"}, "table.invalid_characters: expected"),
    ],
)
def test_routing_config_errors_name_the_key(kwargs, message):
    with pytest.raises(ConfigError) as info:
        TableRouter.from_config(name="{schema}.{table}", **kwargs)
    assert str(info.value).startswith(message), str(info.value)


# ---------------------------------------------------------------- per-table settings

TABLES_TOML = """
[tables."inventory.orders"]
partition = ["day(created_at)", "bucket(16, id)"]
properties = { "write.target-file-size-bytes" = 134217728, "commit.retry.num-retries" = 8 }

[tables."inventory.audit_*"]
exclude = true

[tables."inventory.order_*"]
identifier_fields = ["order_id", "line_no"]

[tables."inventory.*"]
properties = { "format-version" = "3" }

[tables."*.customers"]
partition = ["bucket(8, id)"]
"""


def _tables_router(tmp_path: Path) -> TableRouter:
    config = tmp_path / "calving.toml"
    config.write_text(TABLES_TOML)
    tables = read_toml(str(config))["tables"]  # TOML keeps the sections' order
    return TableRouter.from_config(name="{schema}.{table}", topic_pattern=".*", tables=tables)


def _settings_of(router: TableRouter, schema: str, table: str):
    return router.route(f"p.{schema}.{table}", {"schema": schema, "table": table})


def test_exact_name_wins_then_the_first_listed_glob(tmp_path):
    router = _tables_router(tmp_path)
    orders = _settings_of(router, "inventory", "orders")
    assert isinstance(orders, Route) and orders.settings.pattern == "inventory.orders"
    assert [(p.column, p.transform) for p in orders.settings.partition] == [
        ("created_at", orders.settings.partition[0].transform),
        ("id", bucket(16)),
    ]
    assert orders.settings.partition[0].transform.name == "day"
    assert orders.settings.properties == {
        "write.target-file-size-bytes": "134217728",
        "commit.retry.num-retries": "8",
    }
    lines = _settings_of(router, "inventory", "order_lines")
    assert lines.settings.pattern == "inventory.order_*"
    assert lines.settings.identifier_fields == ("order_id", "line_no")
    # inventory.customers matches both "inventory.*" and "*.customers": the first listed wins.
    customers = _settings_of(router, "inventory", "customers")
    assert customers.settings.pattern == "inventory.*" and customers.settings.partition == ()
    crm = _settings_of(router, "crm", "customers")
    assert crm.settings.pattern == "*.customers" and crm.settings.partition[0].column == "id"
    assert _settings_of(router, "crm", "leads").settings.pattern == ""


def test_excluded_tables_are_skipped_with_their_name(tmp_path):
    router = _tables_router(tmp_path)
    assert _settings_of(router, "inventory", "audit_log") == Skip(
        "p.inventory.audit_log", "excluded", "inventory.audit_log"
    )
    # Globs match the normalized name: an upper-case source table is excluded too.
    assert _settings_of(router, "Inventory", "AUDIT_2024").reason == "excluded"


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        (
            {"inventory.orders": {"exclude": True, "partition": ["id"]}},
            'tables."inventory.orders".partition: an excluded table takes no other settings',
        ),
        (
            {"inventory.orders": {"partitions": ["id"]}},
            "tables.\"inventory.orders\".partitions: unknown key; did you mean 'partition'?",
        ),
        (
            {"inventory.orders": {"partition": ["nope(id)"]}},
            'tables."inventory.orders".partition[0]: expected a transform',
        ),
        (
            {"inventory.orders": {"properties": {"calving.ledger.x": "1"}}},
            "the exactly-once ledger is written by calving only",
        ),
        ({"inventory.orders": {"identifier_fields": ["a", "a"]}}, "names a column twice"),
        ({"inventory.orders": {"exclude": "yes"}}, "expected true or false"),
        ({"Inventory.Orders": {}}, "never matches: table names are lowercased"),
        ({"Inventory.*": {}}, "never matches: table names are lowercased"),
        ({"orders": {}}, "has no namespace"),
        ({"inventory.{x}*": {}}, "a table-name glob may hold"),
        ({"inventory.orders": 3}, "expected a table with partition"),
    ],
)
def test_table_settings_errors_name_the_section(tables, message):
    with pytest.raises(ConfigError) as info:
        TableRouter.from_config(name="{schema}.{table}", topic_pattern=".*", tables=tables)
    assert message in str(info.value)
    assert str(info.value).startswith("tables.")


def test_preserved_case_accepts_upper_case_sections():
    router = TableRouter.from_config(
        name="{schema}.{table}",
        topic_pattern=".*",
        name_case="preserve",
        tables={"Inventory.Orders": {"exclude": True}},
    )
    assert _settings_of(router, "Inventory", "Orders").reason == "excluded"
    assert isinstance(_settings_of(router, "inventory", "orders"), Route)


def test_name_rules_are_plain_values():
    rules = NameRules()
    assert rules.finish("k", "t", "A.B.C") == ("a", "b", "c")
    assert NameRules(case="preserve").finish("k", "t", "A.B") == ("A", "B")
    with pytest.raises(TableNameError, match="has an empty level"):
        rules.finish("k", "t", "a..b")
