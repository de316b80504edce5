"""Stage 4, evolve: after the first write, each table follows the change-event schemas
its records carried (``evolve.evolution``): its schema evolves, or it stops (an
incompatible change: its records become dead letters), or nothing changes and the
schemas are settled. The tables to write again are returned: those that evolved or
stopped, and those whose dead letters were deferred until their schemas were checked."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from calving.commit.table.actions.update_schema import UpdateSchema
from calving.ingest.config.format import FormatConfig
from calving.ingest.sink.many.evolve import evolution
from calving.ingest.sink.many.route import RoutedTable
from calving.ingest.sink.messages import DeadLettersDeferred, Message, SchemaSeen

log = logging.getLogger("calving.many")


def follow_schemas(
    messages: Mapping[str, list[Message]],
    tables: Mapping[str, RoutedTable],
    fmt: FormatConfig,
) -> set[str]:
    """Evolve (or stop) each table of ``messages`` for the schemas its events carried;
    the names of the tables to write again."""
    again: set[str] = set()
    for name, ms in messages.items():
        routed = tables[name]
        # The schema the batch's files were written with (the plan stage refreshed it).
        schema = routed.table.metadata.schema
        texts = sorted(
            {m.schema for m in ms if isinstance(m, SchemaSeen)}
            - {t for t, sid in routed.settled.items() if sid == schema.schema_id}
        )
        if any(isinstance(m, DeadLettersDeferred) for m in ms):
            again.add(name)  # judged only now that the table has followed its schemas
        if not texts or routed.stopped is not None:
            continue
        if _follow(name, routed, texts, fmt):
            again.add(name)
    return again


def _follow(name: str, routed: RoutedTable, texts: list[str], fmt: FormatConfig) -> bool:
    """``routed`` evolved, stopped or settled for ``texts``; True if it must be written
    again."""
    schema = routed.table.metadata.schema
    change = evolution(name, schema, texts, fmt.schema_source())
    if change.stopped is None and change.update is None:
        routed.settled.update(dict.fromkeys(texts, schema.schema_id))
    if change.stopped is not None:
        routed.stopped = change.stopped
        log.error("%s; its records go to the dead-letter destination", change.stopped)
        return True
    if change.update is not None:
        routed.table.commit_or_raise(change.update)
        log.info("table %s: schema evolved (%s)", name, described(change.update))
        return True
    # Columns the source dropped: metadata only, planned on the table's state first (a
    # restart's first batch sees every table's schemas again: no catalog read when the
    # table holds the record already).
    if change.record is not None:
        routed.table.commit_or_raise(change.record, from_cache=True)
    return False


def described(update: UpdateSchema) -> str:
    """A schema update in a log line's words."""
    parts = [f"add {c.name}" for c in update.add]
    parts += [f"widen {n} to {t}" for n, t in update.promote]
    parts += [f"{n} optional" for n in update.make_optional]
    return ", ".join(parts)
