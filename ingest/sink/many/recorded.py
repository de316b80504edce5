"""The route a table remembers: a many-table pipeline records, in the table it creates
for a topic, the ``source`` block fields its first change event was routed by
(``calving.route.source``). A restart routes a topic of the writer's tables with those
fields, as its first event would be routed (Debezium writes one source table per topic),
instead of reading the topic before the batch: the route stage of a restart into 500
existing tables then reads nothing from the broker.

A topic is routed from a record only when exactly one of the writer's tables records it
and that table's ledger holds the topic (this writer fed it from there); otherwise, and
for tables made before the property existed, its first change event is read as before.
The name template and its rules are applied to the recorded fields at each start, so a
changed ``[table] name`` routes as it would from the event.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from calving.commit.catalog.base import TableIdent
from calving.commit.table.ledger import read_ledger
from calving.commit.table.table import Table

ROUTE_SOURCE_PROPERTY = "calving.route.source"
#: Source-block fields recorded beside the template's own: what names a data
#: collection (``transactions.collection_names``) and which connector wrote it.
IDENTIFYING_FIELDS = ("connector", "name", "db", "schema", "table", "collection")


@dataclass(frozen=True)
class RecordedRoute:
    """A topic's recorded source fields, in the table that records them."""

    topic: str
    ident: TableIdent
    source: Mapping[str, Any]


def route_source_property(
    topic: str, source: Mapping[str, Any] | None, template_fields: Iterable[str]
) -> dict[str, str]:
    """The property recording ``topic``'s route (empty when its event has no source
    block): the identifying fields and the template's, as JSON."""
    if not source:
        return {}
    fields = dict.fromkeys((*IDENTIFYING_FIELDS, *template_fields))
    kept = {f: source[f] for f in fields if source.get(f) is not None}
    text = json.dumps({"topic": topic, "source": kept}, sort_keys=True, separators=(",", ":"))
    return {ROUTE_SOURCE_PROPERTY: text}


def recorded_routes(
    tables: Iterable[Table], writer_id: str, exclude: TableIdent | None = None
) -> dict[str, RecordedRoute]:
    """Topic -> its recorded route, over ``tables`` (but ``exclude``, the dead-letter
    table): a topic two tables record, or whose table's ledger does not hold it, is
    left out (its first event decides)."""
    found: dict[str, RecordedRoute] = {}
    doubled: set[str] = set()
    for table in tables:
        if table.ident == exclude:
            continue
        recorded = _recorded(table)
        if recorded is None:
            continue
        held = {topic for topic, _ in read_ledger(table.metadata, writer_id)}
        if recorded.topic not in held:
            continue
        if recorded.topic in found:
            doubled.add(recorded.topic)
        found[recorded.topic] = recorded
    return {t: r for t, r in found.items() if t not in doubled}


def _recorded(table: Table) -> RecordedRoute | None:
    text = table.metadata.properties.get(ROUTE_SOURCE_PROPERTY)
    if not text:
        return None
    try:
        doc = json.loads(text)
        topic, source = doc["topic"], doc["source"]
    except (ValueError, KeyError, TypeError):
        return None  # not ours to judge: the first event routes the topic
    if not isinstance(topic, str) or not isinstance(source, dict):
        return None
    return RecordedRoute(topic, table.ident, source)
