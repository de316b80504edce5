"""Where a many-table pipeline restarts: the ledger for the writer id of every table
that may hold it (the lowest offset per topic-partition wins), so a lost checkpoint
replays only what some table lacks. Those tables come from the writer registry
(``registry``), or from every table of the catalog while it has none. A table that
cannot be loaded is never skipped."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TypeVar

from calving.commit import faults
from calving.commit.catalog.base import Catalog, TableIdent
from calving.commit.errors import CalvingError, CatalogError, NoSuchTableError, Terminal, Transient
from calving.commit.io import FileIO
from calving.commit.table.ledger import TopicPartition
from calving.commit.table.table import Table

log = logging.getLogger("calving.many")

#: Seconds between tries of a catalog read that failed transiently at start.
LOAD_RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)

_R = TypeVar("_R")


class LedgerUnreadableError(Terminal):
    """A table of the catalog could not be loaded at start, so its ledger is unknown:
    the restart point could move past it (names the table and the cause)."""


def lowest(ledgers: Iterable[Mapping[TopicPartition, int]]) -> dict[TopicPartition, int]:
    """Where the source must not read below: per topic-partition, the lowest next
    offset of ``ledgers`` (the writer's, in each of its tables)."""
    out: dict[TopicPartition, int] = {}
    for ledger in ledgers:
        for tp, offset in ledger.items():
            out[tp] = min(offset, out.get(tp, offset))
    return out


def every_table(catalog: Catalog, io: FileIO) -> Iterable[Table]:
    """Every table of the catalog. One that cannot be loaded is never skipped (its
    ledger could hold the lowest offset): a transient failure is retried, then the
    start stops; only a table dropped since it was listed is left out."""
    seen = set()
    for namespace in retried("list the catalog's namespaces", catalog.all_namespaces):
        listing = partial(catalog.list_tables, namespace)
        for ident in retried(f"list the tables of {'.'.join(namespace)}", listing):
            if ident in seen:
                continue
            seen.add(ident)
            table = load_for_ledger(catalog, ident, io)
            if table is not None:
                yield table


def retried(what: str, read: Callable[[], _R], *, at_start: bool = True) -> _R:
    """``read()``, tried again after a transient catalog failure (``LOAD_RETRY_DELAYS``);
    when it keeps failing, ``LedgerUnreadableError`` at start, else the last failure.
    At start each try passes the ``catalog-read-at-start`` fault point."""
    for attempt, delay in enumerate((*LOAD_RETRY_DELAYS, None)):
        try:
            if at_start:
                faults.hit("catalog-read-at-start")
            return read()
        except Transient as err:
            if delay is None:
                if not at_start:
                    raise
                raise LedgerUnreadableError(
                    f"cannot {what} after {attempt + 1} tries: {err}; the start stops so "
                    "that no table's records are skipped"
                ) from err
            log.warning("%s failed (try %d): %s; trying again", what, attempt + 1, err)
            time.sleep(delay)
    raise AssertionError("unreachable")


def load_for_ledger(catalog: Catalog, ident: TableIdent, io: FileIO) -> Table | None:
    """``ident`` loaded (retrying transient failures), None if it was dropped since it
    was listed; ``LedgerUnreadableError`` otherwise."""
    name = ".".join(ident)
    for attempt, delay in enumerate((*LOAD_RETRY_DELAYS, None)):
        try:
            faults.hit("catalog-read-at-start")
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
