"""Where a many-table pipeline restarts: every table of the catalog's ledger for the
writer id (the lowest offset per topic-partition wins), so a lost checkpoint replays
only what some table lacks. A table that cannot be loaded is never skipped."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from calving.commit.catalog.base import Catalog, TableIdent
from calving.commit.errors import CalvingError, CatalogError, NoSuchTableError, Terminal, Transient
from calving.commit.io import FileIO
from calving.commit.table.ledger import TopicPartition, read_ledger
from calving.commit.table.table import Table

log = logging.getLogger("calving.many")

#: Seconds between tries of a table load that failed transiently at start.
LOAD_RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)


class LedgerUnreadableError(Terminal):
    """A table of the catalog could not be loaded at start, so its ledger is unknown:
    the restart point could move past it (names the table and the cause)."""


def starting_ledger(catalog: Catalog, io: FileIO, writer_id: str) -> dict[TopicPartition, int]:
    """Where the source must not read below: per topic-partition, the lowest next
    offset any of ``writer_id``'s tables (and the dead-letter table) holds."""
    out: dict[TopicPartition, int] = {}
    for ledger in ledgers(catalog, io, writer_id):
        for tp, offset in ledger.items():
            out[tp] = min(offset, out.get(tp, offset))
    return out


def ledgers(catalog: Catalog, io: FileIO, writer_id: str) -> list[dict[TopicPartition, int]]:
    """``writer_id``'s ledger in every table of the catalog."""
    return [read_ledger(t.metadata, writer_id) for t in writer_tables(catalog, io)]


def writer_tables(catalog: Catalog, io: FileIO) -> Iterable[Table]:
    """Every table of the catalog. One that cannot be loaded is never skipped (its
    ledger could hold the lowest offset): a transient failure is retried, then the
    start stops; only a table dropped since it was listed is left out."""
    seen = set()
    for namespace in _all_namespaces(catalog):
        for ident in catalog.list_tables(namespace):
            if ident in seen:
                continue
            seen.add(ident)
            table = _load_for_ledger(catalog, ident, io)
            if table is not None:
                yield table


def _load_for_ledger(catalog: Catalog, ident: TableIdent, io: FileIO) -> Table | None:
    """``ident`` loaded (retrying transient failures), None if it was dropped since it
    was listed; ``LedgerUnreadableError`` otherwise."""
    name = ".".join(ident)
    for attempt, delay in enumerate((*LOAD_RETRY_DELAYS, None)):
        try:
            return Table.load(catalog, ident, io)
        except NoSuchTableError:
            if not catalog.table_exists(ident):
                log.info("table %s was dropped since it was listed; no ledger to read", name)
                return None
            err: CalvingError = CatalogError(f"table {name} is listed but does not load")
        except Transient as transient:
            err = transient
        except CalvingError as other:
            raise LedgerUnreadableError(
                f"cannot load table {name} to read its ledger: {other}"
            ) from other
        if delay is None:
            break
        log.warning("loading table %s failed (try %d): %s; trying again", name, attempt + 1, err)
        time.sleep(delay)
    raise LedgerUnreadableError(
        f"cannot load table {name} to read its ledger after {len(LOAD_RETRY_DELAYS) + 1} "
        f"tries: {err}; the start stops so that no table's records are skipped"
    )


def _all_namespaces(catalog: Catalog) -> list[tuple[str, ...]]:
    out = []
    todo = catalog.list_namespaces()
    while todo:
        ns = todo.pop()
        out.append(ns)
        todo.extend(n for n in catalog.list_namespaces(ns) if n != ns and n not in out)
    return out
