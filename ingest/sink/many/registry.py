"""The writer registry: which tables hold a writer's ledger, kept in the catalog, so a
many-table pipeline's start loads its own tables and not every table of the catalog.

It is stored as namespace properties on the namespace of each registered table:

* ``calving.writer.<writer id>.table.<name>`` = ``<name>``: the table
  ``<namespace>.<name>`` may hold the writer's ledger (a name too long for a key is
  keyed by its SHA-256);
* ``calving.writer.<writer id>.registry`` = ``1``: the registry is complete.

The rule that makes it safe (a restart never reads past a table's ledger): a table is
registered before the first commit that writes the writer's ledger into it, and an
entry is only ever written together with the completeness key, by a process that knows
the registry is complete. A process knows that when it found the completeness key at
start, or when it found none, loaded every table of the catalog (the start of earlier
versions, which kept no registry) and registered each one holding the writer's ledger.
So while any namespace carries the key, every table that holds the ledger is
registered; when none does (a new writer, or the namespaces were dropped), the start
reads the whole catalog once more.

Not followed: a table renamed by another tool (its entry names the old name), and a
table written by an earlier calving version after a newer one registered (that version
does not register it). Both are listed in docs/limitations.md.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from functools import partial

from calving.commit.catalog.base import Catalog, Namespace, TableIdent
from calving.commit.io import FileIO
from calving.commit.table.ledger import read_ledger
from calving.commit.table.table import Table
from calving.ingest.sink.many.start import every_table, load_for_ledger, retried

log = logging.getLogger("calving.many")

COMPLETE = "1"
#: The property key column of Iceberg's JDBC catalog schema is VARCHAR(255).
MAX_KEY_CHARS = 255


def _prefix(writer_id: str) -> str:
    return f"calving.writer.{writer_id}."


def entry_key(writer_id: str, name: str) -> str:
    """The property naming table ``name`` (on its namespace) as the writer's; its value
    is the name. A name too long for a catalog's 255-character key column is keyed by
    its SHA-256."""
    key = f"{_prefix(writer_id)}table.{name}"
    if len(key) <= MAX_KEY_CHARS:
        return key
    return f"{_prefix(writer_id)}table-sha256.{hashlib.sha256(name.encode()).hexdigest()}"


def complete_key(writer_id: str) -> str:
    """The property saying the writer's registry is complete."""
    return f"{_prefix(writer_id)}registry"


class WriterRegistry:
    """``writer_id``'s registry in ``catalog``; ``tables`` at start, ``register`` before
    each commit."""

    def __init__(self, catalog: Catalog, writer_id: str) -> None:
        self.catalog = catalog
        self.writer_id = writer_id
        #: Registered tables, once this process knows the registry is complete.
        self._known: set[TableIdent] | None = None
        #: How the last ``tables`` call found them: "registry" or "catalog scan".
        self.found_by: str | None = None

    def registered(self) -> list[TableIdent] | None:
        """The registered tables, None if no namespace says the registry is complete."""
        entries, complete = [], False
        table_prefixes = (
            f"{_prefix(self.writer_id)}table.",
            f"{_prefix(self.writer_id)}table-sha256.",
        )
        found = retried(
            f"read writer {self.writer_id}'s registry",
            lambda: self.catalog.properties_with_prefix(_prefix(self.writer_id)),
        )
        for ns, props in found.items():
            complete = complete or props.get(complete_key(self.writer_id)) == COMPLETE
            entries += [(*ns, v) for k, v in props.items() if k.startswith(table_prefixes)]
        return sorted(entries) if complete else None

    def tables(self, io: FileIO) -> list[Table]:
        """Every table that may hold the writer's ledger, loaded: the registered ones
        (a registered table dropped since is left out), or, when the registry is not
        complete, every table of the catalog, registering those holding the ledger."""
        registered = self.registered()
        if registered is not None:
            maybe = [load_for_ledger(self.catalog, ident, io) for ident in registered]
            loaded = [t for t in maybe if t is not None]
            self._known = set(registered)
            self.found_by = "registry"
            return loaded
        loaded = list(every_table(self.catalog, io))
        holding = [t.ident for t in loaded if read_ledger(t.metadata, self.writer_id)]
        self._known = set()
        self._write(holding)
        self.found_by = "catalog scan"
        log.info(
            "writer %s: no complete registry; read all %d table(s) of the catalog and "
            "registered the %d holding its ledger",
            self.writer_id,
            len(loaded),
            len(holding),
        )
        return loaded

    def register(self, idents: Iterable[TableIdent], io: FileIO) -> None:
        """Make sure ``idents`` are registered (call before a commit that writes the
        writer's ledger into them)."""
        if self._known is None:
            self.tables(io)
        assert self._known is not None
        self._write([i for i in idents if i not in self._known])

    def _write(self, idents: Iterable[TableIdent]) -> None:
        by_namespace: dict[Namespace, list[str]] = {}
        for ident in idents:
            by_namespace.setdefault(tuple(ident[:-1]), []).append(ident[-1])
        for ns, names in sorted(by_namespace.items()):
            updates = {entry_key(self.writer_id, n): n for n in names}
            updates[complete_key(self.writer_id)] = COMPLETE
            update = partial(self.catalog.update_namespace_properties, ns, updates)
            retried(f"register {names} in namespace {'.'.join(ns)}", update, at_start=False)
            assert self._known is not None
            self._known.update((*ns, n) for n in names)
            log.info(
                "writer %s: registered %s in namespace %s", self.writer_id, names, ".".join(ns)
            )
