"""The catalog contract: namespaces, table entries, and the atomic metadata swap.

A catalog stores, per table, the location of its current metadata file, and swaps it
atomically: a commit names the location it started from (``expected``) and succeeds
only if that is still current. It never parses metadata JSON.

Identifiers are tuples: a namespace is ``("a", "b")`` (stored dotted, ``"a.b"``, as
pyiceberg and Iceberg's JDBC catalog store it), a table is the namespace plus its
name, ``("a", "b", "events")``; ``identifiers`` holds the rule for their parts.

How a commit lands (``commit_metadata``), in both implementations:

* ``SqlCatalog``: the new metadata is written to a fresh unique file, then the catalog
  row is swapped with ``UPDATE ... WHERE metadata_location = :expected``.
* ``FilesystemCatalog``: the exclusive creation of the next version file
  ``v<N+1>.metadata.json`` *is* the swap; there is no pointer to move.

Outcomes: return = committed; ``CommitSwapLostError`` = certainly not committed
(someone else moved the table); ``CatalogUnavailableError`` = certainly not committed,
try again later; ``CommitStateUnknownError`` = may or may not have committed: read the
catalog before doing anything else, and never delete the new file.
"""

from __future__ import annotations

import abc
import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from calving.commit.catalog.identifiers import Namespace, TableIdent, check_ident, check_namespace
from calving.commit.errors import NamespaceAlreadyExistsError
from calving.commit.io import FileIO

if TYPE_CHECKING:
    from calving.commit.catalog.faults import FaultPlan
    from calving.commit.spec.metadata import TableMetadata


# Iceberg's metadata file names: Java and pyiceberg's "00001-<uuid>.metadata.json",
# the filesystem (Hadoop) catalog's "v1.metadata.json".
_SEQUENCED_NAME = re.compile(r"^(\d+)-.*\.metadata\.json$")
_VERSION_NAME = re.compile(r"^v(\d+)(?:\.gz)?\.metadata\.json$")


def namespace_to_string(namespace: Namespace) -> str:
    return ".".join(check_namespace(namespace))


def namespace_from_string(text: str) -> Namespace:
    return tuple(text.split("."))


def split_ident(ident: TableIdent) -> tuple[str, str]:
    """(dotted namespace, table name), as the SQL catalog tables store them."""
    ident = check_ident(ident)
    return ".".join(ident[:-1]), ident[-1]


def parse_ident(text: str) -> TableIdent:
    """``"a.b.events"`` -> ``("a", "b", "events")``."""
    return check_ident(tuple(text.split(".")))


def ident_name(ident: TableIdent) -> str:
    return ".".join(ident)


def parse_metadata_version(location: str) -> int:
    """The version in a metadata file name (``00042-<uuid>.metadata.json`` or
    ``v42.metadata.json``), or -1 if the name has none."""
    name = location.rsplit("/", 1)[-1]
    match = _SEQUENCED_NAME.match(name) or _VERSION_NAME.match(name)
    return int(match.group(1)) if match else -1


def table_location_of(metadata_location: str) -> str:
    """``<table>/metadata/<file>`` -> ``<table>``."""
    directory = os.path.dirname(metadata_location)
    return os.path.dirname(directory) if os.path.basename(directory) == "metadata" else directory


@dataclass(frozen=True)
class TableSwap:
    """One table's part of a multi-table commit: make ``location`` (to be written with
    ``payload``) the table's current metadata if ``expected`` still is."""

    ident: TableIdent
    expected: str
    location: str
    payload: bytes = field(repr=False)


class Catalog(abc.ABC):
    """Where each table's current metadata location lives; see the module docstring."""

    name: str
    warehouse: str | None
    io: FileIO
    fault_plan: FaultPlan | None

    # ------------------------------------------------------------ namespaces

    @abc.abstractmethod
    def create_namespace(
        self, namespace: Namespace, properties: Mapping[str, str] | None = None
    ) -> None:
        """Create a namespace (``NamespaceAlreadyExistsError`` if it exists)."""

    @abc.abstractmethod
    def list_namespaces(self, parent: Namespace = ()) -> list[Namespace]:
        """The namespaces directly below ``parent`` (top level by default), sorted."""

    @abc.abstractmethod
    def namespace_exists(self, namespace: Namespace) -> bool: ...

    @abc.abstractmethod
    def namespace_properties(self, namespace: Namespace) -> dict[str, str]:
        """Stored properties (``NoSuchNamespaceError`` if the namespace is absent)."""

    @abc.abstractmethod
    def update_namespace_properties(
        self,
        namespace: Namespace,
        updates: Mapping[str, str],
        removals: Collection[str] = (),
    ) -> None:
        """Set ``updates`` and remove ``removals`` (absent keys are ignored) as one change
        that loses no concurrent change to other keys (``NoSuchNamespaceError``)."""

    @abc.abstractmethod
    def drop_namespace(self, namespace: Namespace) -> None:
        """Drop an empty namespace (``NamespaceNotEmptyError`` if it holds tables)."""

    def all_namespaces(self) -> list[Namespace]:
        """Every namespace of the catalog, at any depth."""
        out: list[Namespace] = []
        todo = self.list_namespaces()
        while todo:
            ns = todo.pop()
            out.append(ns)
            todo.extend(n for n in self.list_namespaces(ns) if n != ns and n not in out)
        return sorted(out)

    def properties_with_prefix(self, prefix: str) -> dict[Namespace, dict[str, str]]:
        """Per namespace, its properties whose key starts with ``prefix`` (namespaces
        with none are left out). This walks every namespace; a catalog that can ask
        for the keys in one query does."""
        from calving.commit.errors import NoSuchNamespaceError

        out: dict[Namespace, dict[str, str]] = {}
        for ns in self.all_namespaces():
            try:
                props = self.namespace_properties(ns)
            except NoSuchNamespaceError:
                continue  # dropped since it was listed
            found = {k: v for k, v in props.items() if k.startswith(prefix)}
            if found:
                out[ns] = found
        return out

    def create_namespace_if_missing(
        self, namespace: Namespace, properties: Mapping[str, str] | None = None
    ) -> None:
        if self.namespace_exists(namespace):
            return
        try:
            self.create_namespace(namespace, properties)
        except NamespaceAlreadyExistsError:
            pass  # created concurrently

    # ------------------------------------------------------------ table entries

    @abc.abstractmethod
    def list_tables(self, namespace: Namespace) -> list[TableIdent]:
        """Tables directly in ``namespace``, sorted (``NoSuchNamespaceError``)."""

    @abc.abstractmethod
    def create_table_entry(self, ident: TableIdent, metadata_location: str) -> None:
        """Register a table whose metadata file is already written
        (``TableAlreadyExistsError``, ``NoSuchNamespaceError``)."""

    def register_table(self, ident: TableIdent, metadata_location: str) -> None:
        self.create_table_entry(ident, metadata_location)

    @abc.abstractmethod
    def load_metadata_location(self, ident: TableIdent) -> str:
        """The current metadata location (``NoSuchTableError``)."""

    def load_metadata_locations(self, idents: Sequence[TableIdent]) -> list[str]:
        """Each table's current metadata location, in order (``NoSuchTableError`` for
        the first missing one); a catalog that can read them together does."""
        return [self.load_metadata_location(ident) for ident in idents]

    def table_exists(self, ident: TableIdent) -> bool:
        from calving.commit.errors import NoSuchTableError

        try:
            self.load_metadata_location(ident)
        except NoSuchTableError:
            return False
        return True

    @abc.abstractmethod
    def drop_table_entry(self, ident: TableIdent) -> None:
        """Forget a table (``NoSuchTableError``); see each catalog for what happens to
        its files."""

    def drop_table(self, ident: TableIdent) -> None:
        self.drop_table_entry(ident)

    @abc.abstractmethod
    def rename_table(self, src: TableIdent, dst: TableIdent) -> None: ...

    @abc.abstractmethod
    def default_table_location(self, ident: TableIdent) -> str:
        """Where a new table's files go when the caller names no location."""

    # ------------------------------------------------------------ metadata and commits

    @abc.abstractmethod
    def create_table(self, ident: TableIdent, table_location: str, metadata: bytes) -> str:
        """Write the first metadata file (already serialized) and register the table;
        returns its location."""

    @abc.abstractmethod
    def new_metadata_location(
        self, ident: TableIdent, current: str, metadata: TableMetadata | None = None
    ) -> str:
        """The location the commit after ``current`` must write its metadata to.
        ``metadata`` (the new metadata) supplies the table location and
        ``write.metadata.path`` where a catalog honours them."""

    def metadata_codec(self, metadata: TableMetadata) -> str:
        """How the commit writing ``metadata`` encodes its file: the table's
        ``write.metadata.compression-codec`` (``none`` or ``gzip``), unless the catalog
        names its files so that one encoding must hold (it then says so)."""
        from calving.commit.spec.properties import TableProperties

        return TableProperties(metadata.properties).metadata_compression_codec

    @abc.abstractmethod
    def commit_metadata(
        self, ident: TableIdent, expected: str, new_location: str, metadata: bytes
    ) -> str | None:
        """Make ``new_location`` (from ``new_metadata_location``), holding ``metadata``,
        the table's current metadata if ``expected`` still is. Outcomes: see the module
        docstring. On a clean loss the new file is removed; after an unknown outcome it
        is kept. Returns the committed location where the catalog chose its own (a REST
        catalog writes the file itself), None when it is ``new_location``."""

    @abc.abstractmethod
    def swap_metadata_location(self, ident: TableIdent, expected: str, new: str) -> None:
        """Atomic check-and-put of an already written metadata file's location."""

    def table_io(self, ident: TableIdent, io: FileIO) -> FileIO:
        """The FileIO for ``ident``'s files: ``io``, or (a REST catalog that vends
        storage credentials) ``io`` with the table's credentials."""
        return io

    #: Whether ``commit_many`` swaps several tables in one catalog transaction.
    supports_multi_table_commit: bool = False

    def commit_many(self, swaps: Sequence[TableSwap]) -> None:
        """Write every swap's metadata file, then make all of them current in one catalog
        transaction, or none. Outcomes as ``commit_metadata``'s, for the whole set: a
        ``TableMovedError`` (a ``CommitSwapLostError``) names the first table whose
        metadata moved on (nothing committed, the new files removed); an unknown outcome
        keeps the files. Catalogs that cannot (a filesystem catalog) refuse."""
        from calving.commit.errors import UnsupportedFeatureError

        raise UnsupportedFeatureError(
            f"catalog {self.name} ({type(self).__name__}) cannot commit several tables in one "
            "transaction; commit them one by one"
        )

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Release connections; the catalog must not be used afterwards."""


__all__ = [
    "Catalog",
    "Namespace",
    "TableIdent",
    "TableSwap",
    "check_ident",
    "check_namespace",
    "ident_name",
    "namespace_from_string",
    "namespace_to_string",
    "parse_ident",
    "parse_metadata_version",
    "split_ident",
    "table_location_of",
]
