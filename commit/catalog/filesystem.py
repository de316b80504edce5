"""Filesystem catalog: no database; the table directories are the catalog.

Layout (Iceberg's Hadoop-catalog layout, which DuckDB and Java read):

* a namespace ``("a", "b")`` is the directory ``<warehouse>/a/b``; its properties are
  kept in ``.namespace-properties.json`` inside it;
* a table ``("a", "b", "events")`` is ``<warehouse>/a/b/events/``, and its metadata
  versions are ``metadata/v1.metadata.json``, ``v2``, ...;
* the current metadata is the highest ``v<N>`` present. ``metadata/version-hint.text``
  (the highest N, as text) is rewritten after each commit for readers that look for it;
  calving never trusts it.

How a commit (swap) works here: there is no pointer to move. A commit from ``v<N>``
writes its new metadata as ``v<N+1>.metadata.json`` with an exclusive create
(``FileIO.create_exclusive``: a hard link from a complete temporary file, which fails
if the name exists and never replaces a file). Of several writers racing from ``v<N>``
exactly one creates ``v<N+1>``; the others get ``CommitSwapLostError``. So the caller's
metadata write IS the swap: ``commit_metadata`` does both, and
``swap_metadata_location`` (moving a pointer to an already written file) is not
available here.

Local filesystems only (object stores have no exclusive create here: use a SQL
catalog). The filesystem must make ``link`` atomic, as local POSIX filesystems do.
Version files must not be deleted while writers run: a writer whose check saw ``v<N>``
could otherwise re-create a deleted ``v<N+1>`` below a newer version.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from calving.commit import faults as global_faults
from calving.commit.catalog.base import (
    Catalog,
    Namespace,
    TableIdent,
    check_ident,
    check_namespace,
    ident_name,
)
from calving.commit.catalog.faults import FaultPlan, SwapHook, guarded_swap
from calving.commit.errors import (
    CalvingError,
    CatalogUnavailableError,
    CommitStateUnknownError,
    CommitSwapLostError,
    FileAlreadyExistsError,
    FileIOError,
    InvalidIdentifierError,
    InvalidLocationError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
    UnsupportedFeatureError,
)
from calving.commit.io import LOCAL_SCHEME, FileIO, local_path, scheme_of, to_uri

if TYPE_CHECKING:
    from calving.commit.spec.metadata import TableMetadata

log = logging.getLogger(__name__)

METADATA_DIR = "metadata"
VERSION_HINT = "version-hint.text"
NAMESPACE_PROPERTIES_FILE = ".namespace-properties.json"
_VERSION_FILE = re.compile(r"^v([1-9][0-9]*)\.metadata\.json$")


class FilesystemCatalog(Catalog):
    """``FilesystemCatalog("/data/warehouse")`` (or ``file:///data/warehouse``)."""

    def __init__(
        self,
        warehouse: str,
        *,
        name: str = "filesystem",
        io: FileIO | None = None,
        fault_plan: FaultPlan | None = None,
    ) -> None:
        if scheme_of(to_uri(warehouse)) != LOCAL_SCHEME:
            raise UnsupportedFeatureError(
                f"{warehouse}: the filesystem catalog needs a local warehouse (it commits by "
                "exclusive file creation); tables on object stores need a SQL catalog"
            )
        self.name = name
        self.warehouse = to_uri(warehouse).rstrip("/")
        self.io = io or FileIO()
        self.fault_plan = fault_plan
        self.swap_hook: SwapHook | None = None
        self._root = local_path(self.warehouse)
        os.makedirs(self._root, exist_ok=True)

    def __repr__(self) -> str:
        return f"FilesystemCatalog({self.warehouse!r})"

    # ------------------------------------------------------------ layout

    def _dir(self, parts: tuple[str, ...]) -> str:
        for part in parts:
            if part.startswith(".") or "/" in part or "\0" in part:
                raise InvalidIdentifierError(
                    f"{part!r} in {parts!r}: not usable as a directory name here"
                )
        return os.path.join(self._root, *parts)

    def _metadata_dir(self, ident: TableIdent) -> str:
        return os.path.join(self._dir(check_ident(ident)), METADATA_DIR)

    def _version_uri(self, ident: TableIdent, version: int) -> str:
        return to_uri(os.path.join(self._metadata_dir(ident), f"v{version}.metadata.json"))

    def _versions(self, ident: TableIdent) -> list[int]:
        try:
            names = os.listdir(self._metadata_dir(ident))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(int(m.group(1)) for n in names if (m := _VERSION_FILE.match(n)))

    def _is_table_dir(self, path: str) -> bool:
        try:
            names = os.listdir(os.path.join(path, METADATA_DIR))
        except (FileNotFoundError, NotADirectoryError):
            return False
        return any(_VERSION_FILE.match(n) for n in names)

    def _is_namespace_dir(self, path: str) -> bool:
        return os.path.isdir(path) and not self._is_table_dir(path)

    def _version_of(self, ident: TableIdent, location: str) -> int:
        """N of this table's ``v<N>.metadata.json`` location, else InvalidLocationError."""
        try:
            path = local_path(location)
        except InvalidLocationError:
            path = ""
        match = _VERSION_FILE.match(os.path.basename(path))
        if match is None or os.path.dirname(path) != self._metadata_dir(ident):
            raise InvalidLocationError(
                f"{location}: not a version file of {ident_name(ident)} "
                f"(expected {self._metadata_dir(ident)}/v<N>.metadata.json)"
            )
        return int(match.group(1))

    # ------------------------------------------------------------ namespaces

    def namespace_exists(self, namespace: Namespace) -> bool:
        return self._is_namespace_dir(self._dir(check_namespace(namespace)))

    def create_namespace(
        self, namespace: Namespace, properties: Mapping[str, str] | None = None
    ) -> None:
        path = self._dir(check_namespace(namespace))
        for depth in range(1, len(namespace)):
            if self._is_table_dir(self._dir(namespace[:depth])):
                raise InvalidIdentifierError(
                    f"namespace {'.'.join(namespace)} would be inside table "
                    f"{'.'.join(namespace[:depth])}"
                )
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            os.mkdir(path)
        except FileExistsError:
            what = "a table" if self._is_table_dir(path) else "a namespace"
            raise NamespaceAlreadyExistsError(
                f"namespace {'.'.join(namespace)}: {what} already exists there"
            ) from None
        props = {"exists": "true", **dict(properties or {})}
        self.io.write(
            to_uri(os.path.join(path, NAMESPACE_PROPERTIES_FILE)),
            json.dumps(props, sort_keys=True).encode(),
        )

    def list_namespaces(self, parent: Namespace = ()) -> list[Namespace]:
        path = self._dir(check_namespace(parent)) if parent else self._root
        if not self._is_namespace_dir(path):
            raise NoSuchNamespaceError(f"namespace {'.'.join(parent)} does not exist")
        return sorted(
            (*parent, entry)
            for entry in os.listdir(path)
            if not entry.startswith(".") and self._is_namespace_dir(os.path.join(path, entry))
        )

    def namespace_properties(self, namespace: Namespace) -> dict[str, str]:
        path = self._dir(check_namespace(namespace))
        if not self._is_namespace_dir(path):
            raise NoSuchNamespaceError(f"namespace {'.'.join(namespace)} does not exist")
        try:
            with open(os.path.join(path, NAMESPACE_PROPERTIES_FILE), "rb") as f:
                stored = json.loads(f.read())
        except FileNotFoundError:
            return {}  # a directory made by hand is a namespace without properties
        return {str(k): str(v) for k, v in stored.items()}

    def update_namespace_properties(
        self,
        namespace: Namespace,
        updates: Mapping[str, str],
        removals: Collection[str] = (),
    ) -> None:
        """Read, change and replace the properties file while holding an exclusive
        ``flock`` on the namespace directory, so concurrent updates never lose a key."""
        path = self._dir(check_namespace(namespace))
        if not self._is_namespace_dir(path):
            raise NoSuchNamespaceError(f"namespace {'.'.join(namespace)} does not exist")
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            props = self.namespace_properties(namespace)
            for key in removals:
                props.pop(key, None)
            props.update(updates)
            target = os.path.join(path, NAMESPACE_PROPERTIES_FILE)
            temporary = f"{target}.{uuid.uuid4().hex}.tmp"
            with open(temporary, "wb") as f:
                f.write(json.dumps(props, sort_keys=True).encode())
            os.replace(temporary, target)
        finally:
            os.close(fd)  # releases the lock

    def drop_namespace(self, namespace: Namespace) -> None:
        path = self._dir(check_namespace(namespace))
        if not self._is_namespace_dir(path):
            raise NoSuchNamespaceError(f"namespace {'.'.join(namespace)} does not exist")
        others = [e for e in os.listdir(path) if e != NAMESPACE_PROPERTIES_FILE]
        if others:
            raise NamespaceNotEmptyError(
                f"namespace {'.'.join(namespace)} is not empty: {sorted(others)[:5]}"
            )
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(path, NAMESPACE_PROPERTIES_FILE))
        try:
            os.rmdir(path)
        except OSError as err:
            raise NamespaceNotEmptyError(f"namespace {'.'.join(namespace)}: {err}") from None

    # ------------------------------------------------------------ tables

    def list_tables(self, namespace: Namespace) -> list[TableIdent]:
        path = self._dir(check_namespace(namespace))
        if not self._is_namespace_dir(path):
            raise NoSuchNamespaceError(f"namespace {'.'.join(namespace)} does not exist")
        return sorted(
            (*namespace, entry)
            for entry in os.listdir(path)
            if not entry.startswith(".") and self._is_table_dir(os.path.join(path, entry))
        )

    def load_metadata_location(self, ident: TableIdent) -> str:
        versions = self._versions(ident)
        if not versions:
            raise NoSuchTableError(f"table {ident_name(ident)} does not exist in {self.warehouse}")
        return self._version_uri(ident, versions[-1])

    def default_table_location(self, ident: TableIdent) -> str:
        return to_uri(self._dir(check_ident(ident)))

    def create_table(self, ident: TableIdent, table_location: str, metadata: bytes) -> str:
        """Create ``v1.metadata.json`` exclusively; ``table_location`` must be the
        table's directory (the layout is the catalog)."""
        if to_uri(table_location).rstrip("/") != self.default_table_location(ident):
            raise InvalidLocationError(
                f"{table_location}: tables of this catalog live at "
                f"{self.default_table_location(ident)}"
            )
        if not self.namespace_exists(tuple(ident[:-1])):
            raise NoSuchNamespaceError(f"namespace {'.'.join(ident[:-1])} does not exist")
        table_dir = self._dir(ident)
        if self._versions(ident):
            raise TableAlreadyExistsError(f"table {ident_name(ident)} already exists")
        if os.path.exists(os.path.join(table_dir, NAMESPACE_PROPERTIES_FILE)):
            raise TableAlreadyExistsError(f"{ident_name(ident)} is a namespace")
        location = self._version_uri(ident, 1)
        try:
            self.io.create_exclusive(location, metadata)
        except FileAlreadyExistsError:
            raise TableAlreadyExistsError(f"table {ident_name(ident)} already exists") from None
        self._write_version_hint(ident)
        return location

    def create_table_entry(self, ident: TableIdent, metadata_location: str) -> None:
        raise UnsupportedFeatureError(
            "the filesystem catalog cannot register a metadata file written elsewhere: a "
            "table here is its directory; use create_table with the metadata bytes"
        )

    def drop_table_entry(self, ident: TableIdent) -> None:
        """The directory is the entry: dropping deletes the table's directory, files
        included (as Iceberg's Hadoop catalog does)."""
        if not self._versions(ident):
            raise NoSuchTableError(f"table {ident_name(ident)} does not exist")
        shutil.rmtree(self._dir(ident))

    def rename_table(self, src: TableIdent, dst: TableIdent) -> None:
        raise UnsupportedFeatureError(
            "the filesystem catalog cannot rename tables: a table is its directory and its "
            "metadata holds absolute file locations"
        )

    # ------------------------------------------------------------ commits

    def metadata_codec(self, metadata: TableMetadata) -> str:
        """Always ``none``: a commit is the exclusive create of ``v<N+1>.metadata.json``,
        one name per version, so a table's files are never ``.gz.metadata.json`` here
        (``write.metadata.compression-codec`` is not followed)."""
        return "none"

    def new_metadata_location(
        self, ident: TableIdent, current: str, metadata: TableMetadata | None = None
    ) -> str:
        """``v<N+1>.metadata.json`` for ``current`` = ``v<N>.metadata.json``."""
        return self._version_uri(ident, self._version_of(ident, current) + 1)

    def commit_metadata(
        self, ident: TableIdent, expected: str, new_location: str, metadata: bytes
    ) -> None:
        """Create ``new_location`` = ``v<N+1>`` exclusively, if ``expected`` = ``v<N>``
        is still the highest version. Writing the file is the commit."""
        version = self._version_of(ident, expected)
        if to_uri(new_location) != self._version_uri(ident, version + 1):
            raise InvalidLocationError(
                f"{new_location}: the commit after {expected} must create "
                f"{self._version_uri(ident, version + 1)}"
            )
        versions = self._versions(ident)
        if not versions:
            raise NoSuchTableError(f"table {ident_name(ident)} does not exist")
        if versions[-1] != version:
            raise CommitSwapLostError(
                f"{ident_name(ident)}: current metadata is v{versions[-1]}, not v{version}"
            )
        global_faults.hit("after-metadata-file")
        guarded_swap(
            self.fault_plan,
            ident,
            expected,
            new_location,
            lambda: self._create_version(ident, new_location, metadata),
            self.swap_hook,
        )
        self._write_version_hint(ident)

    def swap_metadata_location(self, ident: TableIdent, expected: str, new: str) -> None:
        raise UnsupportedFeatureError(
            "the filesystem catalog has no pointer to swap: the exclusive creation of the "
            "next version file is the commit; use new_metadata_location + commit_metadata"
        )

    def _create_version(self, ident: TableIdent, location: str, metadata: bytes) -> None:
        try:
            self.io.create_exclusive(location, metadata)
            return
        except FileAlreadyExistsError:
            raise CommitSwapLostError(
                f"{ident_name(ident)}: {location} was created by another commit"
            ) from None
        except FileIOError as err:
            failure: CalvingError = err
        # The create failed part-way (e.g. on the directory fsync): look at the result.
        try:
            found = self.io.read(location) if self.io.exists(location) else None
        except CalvingError:
            raise CommitStateUnknownError(
                f"{ident_name(ident)}: creating {location} failed ({failure}) and the result "
                "cannot be read back"
            ) from failure
        if found == metadata:
            return
        if found is None:
            raise CatalogUnavailableError(f"{ident_name(ident)}: {failure}") from failure
        raise CommitSwapLostError(f"{ident_name(ident)}: {location} holds another commit")

    def _write_version_hint(self, ident: TableIdent) -> None:
        """Advisory only, so replacing it is harmless. It names the highest version
        listed, and is re-checked after writing so that a slow writer's stale value is
        corrected: the last writer always leaves the true highest."""
        directory = self._metadata_dir(ident)
        written = None
        for _ in range(10):
            versions = self._versions(ident)
            if not versions or versions[-1] == written:
                return
            written = versions[-1]
            tmp = os.path.join(directory, f".{VERSION_HINT}.{uuid.uuid4().hex}.tmp")
            try:
                with open(tmp, "w", encoding="ascii") as f:
                    f.write(str(written))
                os.replace(tmp, os.path.join(directory, VERSION_HINT))
            except OSError as err:
                log.warning("could not write %s for %s: %s", VERSION_HINT, ident_name(ident), err)
                return
