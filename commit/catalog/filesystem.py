"""Filesystem catalog: no database, tables found by directory.

A table lives at ``<warehouse>/<namespace parts>/<name>/``. Its versions are
``metadata/v<N>.metadata.json``; the current one is the highest N. A commit IS the
exclusive creation of ``v<N+1>.metadata.json`` (O_CREAT|O_EXCL): of two writers
racing from ``v<N>``, exactly one creates it, the other gets ``CommitSwapLostError``.
Nothing is ever renamed over an existing file. ``version-hint.text`` is written
afterwards for readers that want it, and never trusted by calving.
Local filesystems only: object stores lack an exclusive create here.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Mapping

from commit.catalog.base import Catalog, TableIdent
from commit.errors import (
    CommitSwapLostError,
    FileAlreadyExistsError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
    UnsupportedFeatureError,
)
from commit.io import FileIO, normalize, to_uri
from commit.spec.metadata import TableMetadata

_VERSION = re.compile(r"^v(\d+)\.metadata\.json$")


class FilesystemCatalog(Catalog):
    def __init__(self, warehouse: str, name: str = "fs", io: FileIO | None = None) -> None:
        self.name = name
        self.warehouse = normalize(warehouse).rstrip("/")
        if "://" in self.warehouse:
            raise UnsupportedFeatureError("the filesystem catalog needs a local warehouse path")
        self.io = io or FileIO()
        os.makedirs(self.warehouse, exist_ok=True)

    def _ns_dir(self, namespace: tuple[str, ...]) -> str:
        return os.path.join(self.warehouse, *namespace)

    def _table_dir(self, ident: TableIdent) -> str:
        return os.path.join(self.warehouse, *ident)

    def _is_table(self, path: str) -> bool:
        return os.path.isdir(os.path.join(path, "metadata")) and any(
            _VERSION.match(f) for f in os.listdir(os.path.join(path, "metadata")))

    def _versions(self, ident: TableIdent) -> list[int]:
        meta = os.path.join(self._table_dir(ident), "metadata")
        if not os.path.isdir(meta):
            return []
        return sorted(int(m.group(1)) for f in os.listdir(meta) if (m := _VERSION.match(f)))

    def _version_location(self, ident: TableIdent, version: int) -> str:
        return to_uri(os.path.join(self._table_dir(ident), "metadata", f"v{version}.metadata.json"))

    # ------------------------------------------------------------ namespaces
    def create_namespace(self, namespace: tuple[str, ...],
                         properties: Mapping[str, str] | None = None) -> None:
        path = self._ns_dir(namespace)
        if os.path.isdir(path):
            raise NamespaceAlreadyExistsError(f"namespace {'.'.join(namespace)} already exists")
        os.makedirs(path)

    def list_namespaces(self) -> list[tuple[str, ...]]:
        out = []
        for root, dirs, _ in os.walk(self.warehouse):
            rel = os.path.relpath(root, self.warehouse)
            if rel == ".":
                continue
            if self._is_table(root):
                dirs[:] = []
                continue
            if os.path.basename(root) in ("metadata", "data"):
                continue
            out.append(tuple(rel.split(os.sep)))
        return sorted(out)

    def drop_namespace(self, namespace: tuple[str, ...]) -> None:
        path = self._ns_dir(namespace)
        if not os.path.isdir(path):
            raise NoSuchNamespaceError(f"namespace {'.'.join(namespace)} does not exist")
        if os.listdir(path):
            raise NamespaceNotEmptyError(f"namespace {'.'.join(namespace)} is not empty")
        os.rmdir(path)

    # ------------------------------------------------------------ tables
    def list_tables(self, namespace: tuple[str, ...]) -> list[TableIdent]:
        path = self._ns_dir(namespace)
        if not os.path.isdir(path):
            raise NoSuchNamespaceError(f"namespace {'.'.join(namespace)} does not exist")
        return sorted((*namespace, d) for d in os.listdir(path)
                      if self._is_table(os.path.join(path, d)))

    def load_metadata_location(self, ident: TableIdent) -> str:
        versions = self._versions(ident)
        if not versions:
            raise NoSuchTableError(f"table {'.'.join(ident)} does not exist under "
                                   f"{self.warehouse}")
        return self._version_location(ident, versions[-1])

    def default_table_location(self, ident: TableIdent) -> str:
        return to_uri(self._table_dir(ident))

    def create_table(self, ident: TableIdent, table_location: str, metadata: bytes) -> str:
        if not os.path.isdir(self._ns_dir(ident[:-1])):
            raise NoSuchNamespaceError(f"namespace {'.'.join(ident[:-1])} does not exist")
        if os.path.normpath(normalize(table_location)) != os.path.normpath(self._table_dir(ident)):
            raise UnsupportedFeatureError("filesystem catalog tables live at "
                                          f"{self._table_dir(ident)}")
        location = self._version_location(ident, 1)
        try:
            self.io.create_exclusive(location, metadata)
        except FileAlreadyExistsError:
            raise TableAlreadyExistsError(f"table {'.'.join(ident)} already exists") from None
        self._write_hint(ident, 1)
        return location

    def drop_table(self, ident: TableIdent) -> None:
        if not self._versions(ident):
            raise NoSuchTableError(f"table {'.'.join(ident)} does not exist")
        shutil.rmtree(self._table_dir(ident))

    def rename_table(self, src: TableIdent, dst: TableIdent) -> None:
        raise UnsupportedFeatureError(
            "the filesystem catalog cannot rename tables: metadata holds absolute paths")

    # ------------------------------------------------------------ commit
    def new_metadata_location(self, ident: TableIdent, current: str,
                              metadata: TableMetadata) -> str:
        m = _VERSION.match(os.path.basename(current))
        if m is None:
            raise UnsupportedFeatureError(f"{current} is not a v<N>.metadata.json version file")
        return self._version_location(ident, int(m.group(1)) + 1)

    def commit_metadata(self, ident: TableIdent, expected: str, new_location: str,
                        metadata: bytes) -> None:
        from commit import faults

        versions = self._versions(ident)
        if not versions or self._version_location(ident, versions[-1]) != expected:
            raise CommitSwapLostError(f"{'.'.join(ident)}: {expected} is no longer current")
        faults.hit("after-metadata-file")
        try:
            self.io.create_exclusive(new_location, metadata)
        except FileAlreadyExistsError:
            raise CommitSwapLostError(
                f"{'.'.join(ident)}: {new_location} was created by another writer") from None
        m = _VERSION.match(os.path.basename(new_location))
        if m:
            self._write_hint(ident, int(m.group(1)))

    def _write_hint(self, ident: TableIdent, version: int) -> None:
        hint = os.path.join(self._table_dir(ident), "metadata", "version-hint.text")
        tmp = f"{hint}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(str(version))
        os.replace(tmp, hint)  # advisory only; replacing the hint is harmless
