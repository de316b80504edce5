"""Stage 1, route: each topic a batch reads for the first time is routed
(``calving.ingest.config.router``) and its table loaded or created from its first
change event (``discover``), or, when its table recorded the source fields it was
routed by (``recorded``, a restart's case), from those without reading it. What the
batches so far routed is kept in ``Routing``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from calving.commit.catalog.base import Catalog, TableIdent
from calving.commit.index.sharded import ShardedIndex
from calving.commit.index.store import Rebuild
from calving.commit.io import FileIO
from calving.commit.table.table import Table
from calving.ingest.config.format import FormatConfig
from calving.ingest.config.router import NeedsSource, Route, Skip, TableRouter
from calving.ingest.config.table import TableConfig
from calving.ingest.config.table_names import TableNameError
from calving.ingest.decode.batch import Decoder
from calving.ingest.kafka.offsets import OffsetRange
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.sink.coordinator import Coordinator
from calving.ingest.sink.many.discover import (
    FirstEvent,
    first_events,
    load_routed_table,
    open_routed_table,
)
from calving.ingest.sink.many.recorded import RecordedRoute
from calving.ingest.sink.many.runner import RangeRow
from calving.ingest.sink.many.transactions import collection_names

log = logging.getLogger("calving.many")


@dataclass
class RoutedTable:
    table: Table
    coordinator: Coordinator
    #: Why the table is stopped (an incompatible source schema change), if it is.
    stopped: str | None = None
    decoder: tuple[int, Decoder] | None = None
    #: Value schemas (``SchemaSeen`` texts) that need no change, with the table schema id
    #: they were checked against: a steady stream reports the same ones every batch.
    settled: dict[str, int] = field(default_factory=dict)
    #: The table's metadata JSON for task plans, with the location it was written from
    #: (serialized again only when the table changed).
    serialized: tuple[str, bytes] | None = None

    @property
    def name(self) -> str:
        return self.table.name


@dataclass
class Routing:
    """What the batches so far routed."""

    routes: dict[str, Route | Skip] = field(default_factory=dict)
    #: Data-collection names (as END markers give them) -> topic, from the source
    #: blocks of each routed topic's first event.
    collections: dict[str, str] = field(default_factory=dict)
    #: Table name -> its table and coordinator.
    tables: dict[str, RoutedTable] = field(default_factory=dict)
    #: Namespaces known to exist: checked in the catalog once, not per table.
    namespaces: set[tuple[str, ...]] = field(default_factory=set)

    def table_of(self, topic: str) -> RoutedTable | None:
        """The table ``topic`` feeds, None if it is not routed (yet) or skipped."""
        route = self.routes.get(topic)
        return self.tables.get(route.name) if isinstance(route, Route) else None


@dataclass(frozen=True)
class Discovery:
    """What routing a new topic needs: the router, the source, and how tables are made."""

    catalog: Catalog
    io: FileIO
    router: TableRouter
    template: TableConfig
    format: FormatConfig
    source_options: KafkaSourceOptions
    writer_id: str
    index_save_every: int
    #: The coordinators' full index rebuild (None: on the driver).
    rebuild: Rebuild | None = None
    #: A table's sharded-mode state when its ``calving.index.mode`` picks sharded
    #: (None: every table's index in the driver).
    sharded: Callable[[Table], ShardedIndex | None] | None = None
    #: The routes the writer's tables recorded (``recorded``) and those tables as the
    #: start loaded them, read once when a batch first routes (None: none are used).
    recorded: (
        Callable[[], tuple[Mapping[str, RecordedRoute], Mapping[TableIdent, Table]]] | None
    ) = None
    #: Whether every routed topic's data-collection names are needed (source-transaction
    #: boundaries match END markers to topics by them): a topic routed by name to a
    #: table that records no source fields then has its first event read.
    collections_needed: bool = False


def ranges_by_topic(rows: Iterable[RangeRow]) -> dict[str, list[OffsetRange]]:
    """The batch's range rows as offset ranges per topic, in order."""
    out: dict[str, list[OffsetRange]] = {}
    for topic, partition, start, end in rows:
        out.setdefault(topic, []).append(OffsetRange(topic, partition, start, end))
    return out


def route(spans: Mapping[str, list[OffsetRange]], routing: Routing, d: Discovery) -> None:
    """Route every topic of ``spans`` not routed yet (into ``routing``); a topic with no
    change event yet, or none to route by, waits for a later batch. A topic whose table
    recorded its route, or routed by name alone to a table that exists, is routed
    without reading it (``_without_events``: a restart's case); the other new topics'
    first change events are read together (``first_events``)."""
    new = {t: d.router.route(t) for t in spans if t not in routing.routes}
    for topic in _without_events(new, routing, d):
        del new[topic]
    wanted = {t: spans[t] for t, o in new.items() if isinstance(o, NeedsSource | Route)}
    events = first_events(d.source_options, wanted, d.format.schema_source()) if wanted else {}
    for topic, first in new.items():
        found = _outcome(topic, first, events.get(topic), d)
        if found is None:
            continue
        outcome, event = found
        routing.routes[topic] = outcome
        if isinstance(outcome, Skip):
            log.info("topic %s: skipped (%s)", topic, outcome.reason)
            continue
        assert isinstance(outcome, Route) and event is not None
        for collection in collection_names(event.source):
            routing.collections.setdefault(collection, topic)
        if outcome.name not in routing.tables:
            routing.tables[outcome.name] = _open(outcome, event, d, routing.namespaces)
        log.info("topic %s -> table %s", topic, outcome.name)


def _without_events(
    new: Mapping[str, Route | Skip | NeedsSource], routing: Routing, d: Discovery
) -> list[str]:
    """The topics of ``new`` routed (into ``routing``, their tables opened) without their
    first change event: from the source fields their table recorded, or by name alone
    to a table that is open or exists (unless its data-collection names are needed and
    unrecorded). A catalog error other than a missing table stops the batch."""
    if not new:
        return []
    recorded, loaded = d.recorded() if d.recorded is not None else ({}, {})
    done = []
    for topic, outcome in new.items():
        record = recorded.get(topic)
        if isinstance(outcome, NeedsSource) and record is not None:
            try:
                outcome = d.router.route(topic, record.source)
            except TableNameError:
                continue  # the recorded fields no longer render: the event decides
        if isinstance(outcome, Skip) and record is not None:
            routing.routes[topic] = outcome
            log.info("topic %s: skipped (%s)", topic, outcome.reason)
            done.append(topic)
            continue
        if not isinstance(outcome, Route):
            continue
        source = record.source if record is not None else None
        if source is None and d.collections_needed:
            continue
        if outcome.name not in routing.tables:
            table = loaded.get(outcome.ident) or load_routed_table(d.catalog, d.io, outcome)
            if table is None:
                continue
            routing.tables[outcome.name] = _opened(table, d)
        for collection in collection_names(source):
            routing.collections.setdefault(collection, topic)
        routing.routes[topic] = outcome
        log.info("topic %s -> table %s", topic, outcome.name)
        done.append(topic)
    return done


def _outcome(
    topic: str, outcome: Route | Skip | NeedsSource, event: FirstEvent | None, d: Discovery
) -> tuple[Route | Skip, FirstEvent | None] | None:
    """The route of ``topic`` (``outcome`` as first routed, by name alone) with its first
    change event, None when it must wait."""
    if isinstance(outcome, NeedsSource | Route) and event is None:
        log.info("topic %s: no change event yet (only tombstones); waiting", topic)
        return None
    if isinstance(outcome, NeedsSource):
        outcome = d.router.route(topic, event.source if event else None)
        if isinstance(outcome, NeedsSource):
            log.warning("topic %s: its first event has no source block to route by", topic)
            return None
    return outcome, event


def _open(
    outcome: Route, event: FirstEvent, d: Discovery, namespaces: set[tuple[str, ...]]
) -> RoutedTable:
    table = open_routed_table(
        d.catalog,
        d.io,
        outcome,
        event,
        d.template,
        d.format,
        namespaces,
        d.router.template.source_fields,
    )
    return _opened(table, d)


def _opened(table: Table, d: Discovery) -> RoutedTable:
    coordinator = Coordinator(
        table, d.writer_id, index_save_every=d.index_save_every, save_with_next_commit=True
    )
    coordinator.rebuild = d.rebuild
    if d.sharded is not None:
        coordinator.sharded = d.sharded(table)
    return RoutedTable(table, coordinator)
