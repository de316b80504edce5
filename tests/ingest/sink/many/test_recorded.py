"""The route a table records for its topic (``recorded``): kept only where it is
unambiguous and the writer's ledger in that table holds the topic."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from calving.commit.catalog.base import TableIdent
from calving.commit.catalog.sql import SqlCatalog
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.ledger import LedgerClaim, OffsetRange
from calving.commit.table.table import Table, create_table
from calving.ingest.sink.many.recorded import (
    ROUTE_SOURCE_PROPERTY,
    recorded_routes,
    route_source_property,
)
from tests.support.tables import EVENTS, events_spec, row, write_partitioned

WRITER = "w1"
SOURCE = {"connector": "postgresql", "name": "pg", "db": "shop", "schema": "inv",
          "table": "orders", "lsn": 77, "ts_ms": 5, "txId": 9}  # fmt: skip


def _catalog(tmp_path: Any) -> SqlCatalog:
    (tmp_path / "warehouse").mkdir(exist_ok=True)
    catalog = SqlCatalog("t", f"sqlite:///{tmp_path}/catalog.db", str(tmp_path / "warehouse"))
    catalog.create_namespace_if_missing(("db",))
    return catalog


def _table(catalog: SqlCatalog, name: str, recorded_topic: str | None, fed_by: str | None) -> Table:
    """Table ``db.<name>`` recording ``recorded_topic``'s route, its ledger holding
    ``fed_by`` (for WRITER)."""
    ident: TableIdent = ("db", name)
    props = route_source_property(recorded_topic, SOURCE, ()) if recorded_topic else {}
    table = create_table(catalog, ident, EVENTS, spec=events_spec(), properties=props)
    if fed_by is not None:
        files = tuple(f for f, _ in write_partitioned(table, [row(1)]))
        claim = LedgerClaim(WRITER, {(fed_by, 0): OffsetRange(0, 1)})
        table.commit_or_raise(FastAppend(files, ledger=claim))
    return Table.load(catalog, ident)


def test_the_property_keeps_identifying_and_template_fields_only() -> None:
    props = route_source_property("pg.inv.orders", {**SOURCE, "shard": "s1"}, ("shard",))
    text = props[ROUTE_SOURCE_PROPERTY]
    assert '"lsn"' not in text and '"txId"' not in text and '"ts_ms"' not in text
    assert '"shard":"s1"' in text and '"table":"orders"' in text
    assert route_source_property("t", None, ()) == {}


def test_only_unambiguous_routes_held_by_the_ledger_are_kept(tmp_path: Any) -> None:
    catalog = _catalog(tmp_path)
    tables = [
        _table(catalog, "orders", "pg.inv.orders", "pg.inv.orders"),  # kept
        _table(catalog, "stale", "pg.inv.stale", "pg.inv.other"),  # ledger lacks its topic
        _table(catalog, "twice_a", "pg.inv.twice", "pg.inv.twice"),  # two tables record it
        _table(catalog, "twice_b", "pg.inv.twice", "pg.inv.twice"),
        _table(catalog, "plain", None, "pg.inv.plain"),  # made before the property
        _table(catalog, "dead", "pg.inv.dead", "pg.inv.dead"),  # the dead-letter table
    ]
    found = recorded_routes(tables, WRITER, exclude=("db", "dead"))
    assert list(found) == ["pg.inv.orders"]
    route = found["pg.inv.orders"]
    assert route.ident == ("db", "orders")
    assert route.source["schema"] == "inv" and "lsn" not in route.source
    assert recorded_routes(tables, "another-writer") == {}


def test_an_unreadable_record_is_not_used(tmp_path: Any) -> None:
    catalog = _catalog(tmp_path)
    table = _table(catalog, "orders", "pg.inv.orders", "pg.inv.orders")
    for bad in ("{not json", '{"topic": 3, "source": {}}', '{"source": {}}', "[]"):
        props = {**table.metadata.properties, ROUTE_SOURCE_PROPERTY: bad}
        table.metadata = replace(table.metadata, properties=props)
        assert recorded_routes([table], WRITER) == {}, bad
