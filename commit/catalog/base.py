"""The catalog contract the commit loop relies on."""

from __future__ import annotations

import abc
import uuid
from typing import Mapping

from commit.spec.metadata import TableMetadata

TableIdent = tuple[str, ...]  # namespace parts + table name


def split_ident(ident: TableIdent) -> tuple[str, str]:
    if len(ident) < 2:
        raise ValueError(f"table identifier needs a namespace and a name, got {ident!r}")
    return ".".join(ident[:-1]), ident[-1]


def parse_ident(text: str) -> TableIdent:
    return tuple(text.split("."))


class Catalog(abc.ABC):
    name: str
    warehouse: str

    # ------------------------------------------------------------ namespaces
    @abc.abstractmethod
    def create_namespace(self, namespace: tuple[str, ...],
                         properties: Mapping[str, str] | None = None) -> None: ...

    @abc.abstractmethod
    def list_namespaces(self) -> list[tuple[str, ...]]: ...

    @abc.abstractmethod
    def drop_namespace(self, namespace: tuple[str, ...]) -> None: ...

    def create_namespace_if_missing(self, namespace: tuple[str, ...]) -> None:
        if namespace not in self.list_namespaces():
            from commit.errors import NamespaceAlreadyExistsError

            try:
                self.create_namespace(namespace)
            except NamespaceAlreadyExistsError:
                pass  # created concurrently

    # ------------------------------------------------------------ tables
    @abc.abstractmethod
    def list_tables(self, namespace: tuple[str, ...]) -> list[TableIdent]: ...

    @abc.abstractmethod
    def load_metadata_location(self, ident: TableIdent) -> str: ...

    @abc.abstractmethod
    def create_table(self, ident: TableIdent, table_location: str, metadata: bytes) -> str:
        """Write the first metadata file and register the table; its location."""

    @abc.abstractmethod
    def drop_table(self, ident: TableIdent) -> None: ...

    @abc.abstractmethod
    def rename_table(self, src: TableIdent, dst: TableIdent) -> None: ...

    def default_table_location(self, ident: TableIdent) -> str:
        return "/".join([self.warehouse.rstrip("/"), *ident[:-1], ident[-1]])

    # ------------------------------------------------------------ commits
    def new_metadata_location(self, ident: TableIdent, current: str,
                              metadata: TableMetadata) -> str:
        """A fresh, never-used location for the next metadata file."""
        version = metadata.last_sequence_number
        return (f"{metadata.location}/metadata/{len(metadata.metadata_log):05d}-"
                f"{uuid.uuid4()}.metadata.json") if version >= 0 else ""

    @abc.abstractmethod
    def commit_metadata(self, ident: TableIdent, expected: str, new_location: str,
                        metadata: bytes) -> None:
        """Atomically make ``new_location`` (holding ``metadata``) current if ``expected``
        still is. Raises ``CommitSwapLostError`` when it is not (nothing changed) and
        ``CommitStateUnknownError`` when the outcome cannot be known."""
