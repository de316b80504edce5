"""SQL catalog on SQLite (embedded default) or PostgreSQL, in the very tables Iceberg's JDBC
catalog and pyiceberg's ``SqlCatalog`` use, so those engines open the same tables.

Tables (created if missing, with pyiceberg 0.12's column types): ``iceberg_tables``
(catalog_name, table_namespace, table_name: VARCHAR(255) primary key; metadata_location,
previous_metadata_location: VARCHAR(1000); iceberg_type: VARCHAR(5), ``'TABLE'`` for
tables, ``'VIEW'`` rows written by other engines are ignored) and
``iceberg_namespace_properties`` (catalog_name, namespace, property_key: VARCHAR(255)
primary key; property_value: VARCHAR(1000) not null). A database without
``iceberg_type`` (the older JDBC schema) is used as it is, never altered.

A namespace exists if it, or a namespace below it, has a property row or a table;
creating one writes ``exists = true`` plus the given properties.

The swap is ``UPDATE iceberg_tables SET metadata_location = :new,
previous_metadata_location = :expected WHERE <table> AND metadata_location = :expected``
in its own explicit transaction, and counts only if exactly one row changed. Nothing is
durable before COMMIT, so a failure before it means "not committed"
(``CatalogUnavailableError``) and only a failure of the COMMIT itself is
``CommitStateUnknownError``, except where the database says it rolled back.

SQLite: one connection per operation (``NullPool``), a busy timeout (30 s by default)
and ``BEGIN IMMEDIATE`` for writes, so concurrent writers from many processes queue for
the write lock instead of failing; a lock still not granted after the timeout is
``CatalogUnavailableError``. Engines are per process: a catalog used after ``fork``
drops the parent's pooled connections.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from calving.commit import faults as global_faults
from calving.commit.catalog.base import (
    Catalog,
    Namespace,
    TableIdent,
    TableSwap,
    check_ident,
    ident_name,
    namespace_from_string,
    namespace_to_string,
    parse_metadata_version,
    split_ident,
    table_location_of,
)
from calving.commit.catalog.faults import FaultPlan, SwapHook, guarded_swap
from calving.commit.catalog.sql_database import (
    ICEBERG_TABLES,
    NAMESPACE_PROPERTIES,
    SCHEMA,
    UNAVAILABLE_ERRORS,
    commit_was_rolled_back,
    create_engine,
    describe_error,
)
from calving.commit.errors import (
    CalvingError,
    CatalogError,
    CatalogUnavailableError,
    CommitStateUnknownError,
    CommitSwapLostError,
    ConfigError,
    InvalidLocationError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from calving.commit.io import FileIO, to_uri
from calving.commit.spec.metadata_gzip import FILE_SUFFIXES
from calving.commit.spec.properties import TableProperties

if TYPE_CHECKING:
    from calving.commit.spec.metadata import TableMetadata

log = logging.getLogger(__name__)

TABLE_TYPE = "TABLE"
NAMESPACE_EXISTS_PROPERTY = "exists"
NAMESPACE_LOCATION_PROPERTY = "location"
DEFAULT_SQLITE_BUSY_TIMEOUT_S = 30.0

_T = ICEBERG_TABLES.c
_LOAD_CHUNK = 500  # tables per query: SQLite binds at most 999 parameters before 3.32
_P = NAMESPACE_PROPERTIES.c
_R = TypeVar("_R")


class SqlCatalog(Catalog):
    """``SqlCatalog("prod", "sqlite:////var/lib/calving/catalog.db", "file:///data/wh")``
    or ``SqlCatalog("prod", "postgresql+psycopg://user@host/db", "s3://bucket/wh")``."""

    def __init__(
        self,
        name: str,
        uri: str,
        warehouse: str | None = None,
        *,
        io: FileIO | None = None,
        fault_plan: FaultPlan | None = None,
        sqlite_busy_timeout_s: float = DEFAULT_SQLITE_BUSY_TIMEOUT_S,
        create_tables: bool = True,
    ) -> None:
        if not name or len(name) > 255:
            raise ConfigError(f"catalog name must be 1-255 characters, got {name!r}")
        self.name = name
        self.uri = uri
        self.warehouse = to_uri(warehouse).rstrip("/") if warehouse else None
        self.io = io or FileIO()
        self.fault_plan = fault_plan
        self.swap_hook: SwapHook | None = None
        self._url = sa.engine.make_url(uri)
        self._pid = os.getpid()
        self.engine = create_engine(self._url, sqlite_busy_timeout_s)
        self._has_type_column = True
        if create_tables:
            self._create_tables()
        self._has_type_column = self._probe_type_column()

    def __repr__(self) -> str:
        shown = self._url.render_as_string(hide_password=True)
        return f"SqlCatalog({self.name!r}, {shown!r}, warehouse={self.warehouse!r})"

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------ engine

    @contextlib.contextmanager
    def _connect(self, *, write: bool) -> Iterator[sa.Connection]:
        if os.getpid() != self._pid:  # forked: never share the parent's connections
            self.engine.dispose(close=False)
            self._pid = os.getpid()
        with self.engine.connect() as conn:
            if write:
                conn = conn.execution_options(calving_write=True)
            yield conn

    def _read(self, action: str, fn: Callable[[sa.Connection], _R]) -> _R:
        with self._db_errors(action), self._connect(write=False) as conn:
            return fn(conn)

    def _write(self, action: str, fn: Callable[[sa.Connection], _R]) -> _R:
        with self._db_errors(action), self._connect(write=True) as conn, conn.begin():
            return fn(conn)

    @contextlib.contextmanager
    def _db_errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except CalvingError:
            raise
        except UNAVAILABLE_ERRORS as err:
            raise CatalogUnavailableError(
                f"catalog {self.name}: {action}: {describe_error(err)}"
            ) from err
        except sa_exc.SQLAlchemyError as err:
            raise CatalogError(f"catalog {self.name}: {action}: {describe_error(err)}") from err

    def _create_tables(self) -> None:
        for attempt in range(3):
            try:
                self._write(
                    "create catalog tables", lambda c: SCHEMA.create_all(c, checkfirst=True)
                )
                return
            except CatalogUnavailableError:
                raise
            except CatalogError:
                # Another process created them between our check and our CREATE.
                if attempt == 2:
                    raise

    def _probe_type_column(self) -> bool:
        """Whether ``iceberg_tables`` has ``iceberg_type`` (the JDBC catalog's newer schema)."""
        probe = sa.text("SELECT iceberg_type FROM iceberg_tables WHERE 1 = 0")
        with self._db_errors("open catalog tables"):
            try:
                with self._connect(write=False) as conn:
                    conn.execute(probe)
                return True
            except sa_exc.DBAPIError as err:
                orig = getattr(err, "orig", None)
                if getattr(orig, "sqlstate", None) == "42703" or "no such column" in str(orig):
                    return False
                raise

    def _is_table(self) -> Any:
        if not self._has_type_column:
            return sa.true()
        return sa.or_(_T.iceberg_type == TABLE_TYPE, _T.iceberg_type.is_(None))

    def _table_row(self, ident: TableIdent) -> Any:
        namespace, name = split_ident(ident)
        return sa.and_(
            _T.catalog_name == self.name,
            _T.table_namespace == namespace,
            _T.table_name == name,
            self._is_table(),
        )

    # ------------------------------------------------------------ namespaces

    def _namespaces_at_or_below(self, conn: sa.Connection, namespace: str) -> set[str]:
        like = _like_escaped(namespace) + ".%"
        found: set[str] = set()
        for catalog_column, column in (
            (_P.catalog_name, _P.namespace),
            (_T.catalog_name, _T.table_namespace),
        ):
            rows = conn.execute(
                sa.select(column)
                .distinct()
                .where(
                    catalog_column == self.name,
                    sa.or_(column == namespace, column.like(like, escape="!")),
                )
            )
            # LIKE may be case-insensitive (SQLite): compare exactly here.
            found |= {r[0] for r in rows if r[0] == namespace or r[0].startswith(namespace + ".")}
        return found

    def _insert_properties(self, conn: sa.Connection, ns: str, props: Mapping[str, str]) -> None:
        conn.execute(
            NAMESPACE_PROPERTIES.insert(),
            [
                {"catalog_name": self.name, "namespace": ns, "property_key": k,
                 "property_value": v}
                for k, v in props.items()
            ],
        )  # fmt: skip

    def _exists(self, conn: sa.Connection, namespace: str) -> bool:
        return bool(self._namespaces_at_or_below(conn, namespace))

    def namespace_exists(self, namespace: Namespace) -> bool:
        ns = namespace_to_string(namespace)
        return self._read("namespace exists", lambda c: self._exists(c, ns))

    def create_namespace(
        self, namespace: Namespace, properties: Mapping[str, str] | None = None
    ) -> None:
        ns = namespace_to_string(namespace)
        props = {NAMESPACE_EXISTS_PROPERTY: "true", **dict(properties or {})}

        def run(conn: sa.Connection) -> None:
            if self._exists(conn, ns):
                raise NamespaceAlreadyExistsError(f"namespace {ns} already exists")
            self._insert_properties(conn, ns, props)

        try:
            self._write(f"create namespace {ns}", run)
        except CatalogError as err:
            if isinstance(err.__cause__, sa_exc.IntegrityError):
                raise NamespaceAlreadyExistsError(f"namespace {ns} already exists") from None
            raise

    def list_namespaces(self, parent: Namespace = ()) -> list[Namespace]:
        def run(conn: sa.Connection) -> list[Namespace]:
            if parent and not self._exists(conn, namespace_to_string(parent)):
                raise NoSuchNamespaceError(f"namespace {'.'.join(parent)} does not exist")
            names = sa.union(
                sa.select(_P.namespace).where(_P.catalog_name == self.name),
                sa.select(_T.table_namespace).where(_T.catalog_name == self.name),
            )
            depth = len(parent) + 1
            children = set()
            for (text,) in conn.execute(names):
                parts = namespace_from_string(text)
                if len(parts) >= depth and parts[: depth - 1] == tuple(parent):
                    children.add(parts[:depth])
            return sorted(children)

        return self._read("list namespaces", run)

    def namespace_properties(self, namespace: Namespace) -> dict[str, str]:
        ns = namespace_to_string(namespace)

        def run(conn: sa.Connection) -> dict[str, str]:
            if not self._exists(conn, ns):
                raise NoSuchNamespaceError(f"namespace {ns} does not exist")
            rows = conn.execute(
                sa.select(_P.property_key, _P.property_value).where(
                    _P.catalog_name == self.name, _P.namespace == ns
                )
            )
            return {k: v for k, v in rows}

        return self._read(f"namespace properties of {ns}", run)

    def update_namespace_properties(
        self,
        namespace: Namespace,
        updates: Mapping[str, str],
        removals: Collection[str] = (),
    ) -> None:
        ns = namespace_to_string(namespace)
        touched = {*updates, *removals}

        def run(conn: sa.Connection) -> None:
            if not self._exists(conn, ns):
                raise NoSuchNamespaceError(f"namespace {ns} does not exist")
            if touched:
                conn.execute(
                    NAMESPACE_PROPERTIES.delete().where(
                        _P.catalog_name == self.name,
                        _P.namespace == ns,
                        _P.property_key.in_(sorted(touched)),
                    )
                )
            if updates:
                self._insert_properties(conn, ns, updates)

        # Two writers inserting the same new key: the later one's INSERT conflicts after
        # the earlier committed; its DELETE then sees the row, so one more try lands.
        for attempt in range(3):
            try:
                self._write(f"update properties of namespace {ns}", run)
                return
            except CatalogError as err:
                if attempt == 2 or not isinstance(err.__cause__, sa_exc.IntegrityError):
                    raise

    def properties_with_prefix(self, prefix: str) -> dict[Namespace, dict[str, str]]:
        like = _like_escaped(prefix) + "%"

        def run(conn: sa.Connection) -> dict[Namespace, dict[str, str]]:
            rows = conn.execute(
                sa.select(_P.namespace, _P.property_key, _P.property_value).where(
                    _P.catalog_name == self.name, _P.property_key.like(like, escape="!")
                )
            )
            out: dict[Namespace, dict[str, str]] = {}
            for ns, key, value in rows:
                if key.startswith(prefix):  # LIKE may be case-insensitive (SQLite)
                    out.setdefault(namespace_from_string(ns), {})[key] = value
            return out

        return self._read(f"namespace properties starting {prefix!r}", run)

    def drop_namespace(self, namespace: Namespace) -> None:
        ns = namespace_to_string(namespace)

        def run(conn: sa.Connection) -> None:
            below = self._namespaces_at_or_below(conn, ns)
            if not below:
                raise NoSuchNamespaceError(f"namespace {ns} does not exist")
            if below - {ns}:
                raise NamespaceNotEmptyError(f"namespace {ns} has namespaces below it")
            tables = conn.execute(
                sa.select(sa.func.count()).where(
                    _T.catalog_name == self.name, _T.table_namespace == ns
                )
            ).scalar_one()
            if tables:
                raise NamespaceNotEmptyError(f"namespace {ns} still has {tables} table(s)")
            conn.execute(
                NAMESPACE_PROPERTIES.delete().where(
                    _P.catalog_name == self.name, _P.namespace == ns
                )
            )

        self._write(f"drop namespace {ns}", run)

    # ------------------------------------------------------------ table entries

    def list_tables(self, namespace: Namespace) -> list[TableIdent]:
        ns = namespace_to_string(namespace)

        def run(conn: sa.Connection) -> list[TableIdent]:
            if not self._exists(conn, ns):
                raise NoSuchNamespaceError(f"namespace {ns} does not exist")
            rows = conn.execute(
                sa.select(_T.table_name).where(
                    _T.catalog_name == self.name, _T.table_namespace == ns, self._is_table()
                )
            )
            return sorted((*namespace, r[0]) for r in rows)

        return self._read(f"list tables in {ns}", run)

    def load_metadata_location(self, ident: TableIdent) -> str:
        row = self._read(
            f"load {ident_name(ident)}",
            lambda c: c.execute(
                sa.select(_T.metadata_location).where(self._table_row(ident))
            ).first(),
        )
        if row is None or not row[0]:
            raise NoSuchTableError(f"table {ident_name(ident)} does not exist in {self.name}")
        return str(row[0])

    def load_metadata_locations(self, idents: Sequence[TableIdent]) -> list[str]:
        """Every table's row read in one query (per ``_LOAD_CHUNK`` tables) on one
        connection, instead of one connection and query per table."""
        keys = [split_ident(ident) for ident in idents]
        if not keys:
            return []

        def run(conn: sa.Connection) -> dict[tuple[str, str], str]:
            found: dict[tuple[str, str], str] = {}
            for start in range(0, len(keys), _LOAD_CHUNK):
                rows = conn.execute(self._locations_query(keys[start : start + _LOAD_CHUNK]))
                found.update(((r[0], r[1]), r[2]) for r in rows if r[2])
            return found

        found = self._read(f"load {len(keys)} tables", run)
        out = []
        for ident, key in zip(idents, keys):
            if key not in found:
                raise NoSuchTableError(f"table {ident_name(ident)} does not exist in {self.name}")
            out.append(str(found[key]))
        return out

    def _locations_query(self, keys: Sequence[tuple[str, str]]) -> sa.Select[Any]:
        names: dict[str, list[str]] = {}
        for namespace, name in keys:
            names.setdefault(namespace, []).append(name)
        return sa.select(_T.table_namespace, _T.table_name, _T.metadata_location).where(
            _T.catalog_name == self.name,
            self._is_table(),
            sa.or_(
                *(
                    sa.and_(_T.table_namespace == ns, _T.table_name.in_(n))
                    for ns, n in names.items()
                )
            ),
        )

    def create_table_entry(self, ident: TableIdent, metadata_location: str) -> None:
        namespace, name = split_ident(ident)

        def run(conn: sa.Connection) -> None:
            if not self._exists(conn, namespace):
                raise NoSuchNamespaceError(f"namespace {namespace} does not exist")
            row = {
                "catalog_name": self.name,
                "table_namespace": namespace,
                "table_name": name,
                "metadata_location": metadata_location,
                "previous_metadata_location": None,
            }
            if self._has_type_column:
                row["iceberg_type"] = TABLE_TYPE
            conn.execute(ICEBERG_TABLES.insert().values(**row))

        try:
            self._write(f"create {ident_name(ident)}", run)
        except CatalogError as err:
            if isinstance(err.__cause__, sa_exc.IntegrityError):
                raise TableAlreadyExistsError(f"table {ident_name(ident)} already exists") from None
            raise

    def drop_table_entry(self, ident: TableIdent) -> None:
        """Delete the catalog row; the table's files are left alone."""

        def run(conn: sa.Connection) -> None:
            if conn.execute(ICEBERG_TABLES.delete().where(self._table_row(ident))).rowcount != 1:
                raise NoSuchTableError(f"table {ident_name(ident)} does not exist")

        self._write(f"drop {ident_name(ident)}", run)

    def rename_table(self, src: TableIdent, dst: TableIdent) -> None:
        """Rename the catalog row; files stay where they are (metadata holds their
        absolute locations)."""
        to_namespace, to_name = split_ident(dst)

        def run(conn: sa.Connection) -> None:
            if not self._exists(conn, to_namespace):
                raise NoSuchNamespaceError(f"namespace {to_namespace} does not exist")
            changed = conn.execute(
                ICEBERG_TABLES.update()
                .where(self._table_row(src))
                .values(table_namespace=to_namespace, table_name=to_name)
            ).rowcount
            if changed != 1:
                raise NoSuchTableError(f"table {ident_name(src)} does not exist")

        try:
            self._write(f"rename {ident_name(src)}", run)
        except CatalogError as err:
            if isinstance(err.__cause__, sa_exc.IntegrityError):
                raise TableAlreadyExistsError(f"table {ident_name(dst)} already exists") from None
            raise

    def default_table_location(self, ident: TableIdent) -> str:
        """The namespace's ``location`` property + name, else
        ``<warehouse>/<dotted namespace>/<name>`` (pyiceberg's convention)."""
        namespace, name = split_ident(ident)
        props = self.namespace_properties(tuple(ident[:-1]))
        base = props.get(NAMESPACE_LOCATION_PROPERTY)
        if base:
            return f"{to_uri(base).rstrip('/')}/{name}"
        if not self.warehouse:
            raise ConfigError(f"catalog {self.name} has no warehouse: give a table location")
        return f"{self.warehouse}/{namespace}/{name}"

    # ------------------------------------------------------------ metadata and commits

    def create_table(self, ident: TableIdent, table_location: str, metadata: bytes) -> str:
        check_ident(ident)
        location = (
            f"{to_uri(table_location).rstrip('/')}/metadata/00000-{uuid.uuid4()}.metadata.json"
        )
        self.io.write(location, metadata)
        try:
            self.create_table_entry(ident, location)
        except (TableAlreadyExistsError, NoSuchNamespaceError, CatalogUnavailableError):
            self._discard(location)
            raise
        return location

    def new_metadata_location(
        self, ident: TableIdent, current: str, metadata: TableMetadata | None = None
    ) -> str:
        """``<metadata dir>/<5-digit version>-<uuid>.metadata.json``: the version after
        ``current``'s (Iceberg's naming), made unique by the UUID; ``.gz.metadata.json``
        when ``metadata`` is written gzip-compressed (``metadata_codec``)."""
        directory = None
        suffix = FILE_SUFFIXES["none"]
        if metadata is not None:
            directory = TableProperties(metadata.properties).write_metadata_path or (
                metadata.location.rstrip("/") + "/metadata"
            )
            suffix = FILE_SUFFIXES[self.metadata_codec(metadata)]
        if directory is None:
            directory = table_location_of(current) + "/metadata"
        version = max(parse_metadata_version(current), -1) + 1
        return f"{directory.rstrip('/')}/{version:05d}-{uuid.uuid4()}{suffix}"

    def commit_metadata(
        self, ident: TableIdent, expected: str, new_location: str, metadata: bytes
    ) -> None:
        """Write ``metadata`` to ``new_location`` (a fresh unique name), then swap."""
        self.io.write(new_location, metadata)
        global_faults.hit("after-metadata-file")
        try:
            self.swap_metadata_location(ident, expected, new_location)
        except (CommitSwapLostError, CatalogUnavailableError, NoSuchTableError):
            self._discard(new_location)  # certainly not committed: nobody refers to it
            raise

    supports_multi_table_commit = True

    def commit_many(self, swaps: Sequence[TableSwap]) -> None:
        """Several tables' swaps in one database transaction (``sql_many``)."""
        from calving.commit.catalog.sql_many import commit_many

        commit_many(self, swaps)

    def swap_metadata_location(self, ident: TableIdent, expected: str, new: str) -> None:
        check_ident(ident)
        if new == expected:
            raise InvalidLocationError(f"{ident_name(ident)}: swap to the same location {new}")
        guarded_swap(
            self.fault_plan,
            ident,
            expected,
            new,
            lambda: self._check_and_put(ident, expected, new),
            self.swap_hook,
        )

    @functools.cached_property
    def _swap_statement(self) -> sa.Update:
        """The check-and-put, built once with bound parameters (building and caching a
        statement per swap costs more than the swap's own SQL)."""
        row = sa.and_(
            _T.catalog_name == sa.bindparam("swap_catalog"),
            _T.table_namespace == sa.bindparam("swap_namespace"),
            _T.table_name == sa.bindparam("swap_table"),
            self._is_table(),
        )
        return (
            ICEBERG_TABLES.update()
            .where(row, _T.metadata_location == sa.bindparam("swap_expected"))
            .values(
                metadata_location=sa.bindparam("swap_new"),
                previous_metadata_location=sa.bindparam("swap_previous"),
            )
        )

    def _check_and_put(self, ident: TableIdent, expected: str, new: str) -> None:
        name = ident_name(ident)
        namespace, table = split_ident(ident)
        params = {
            "swap_catalog": self.name,
            "swap_namespace": namespace,
            "swap_table": table,
            "swap_expected": expected,
            "swap_new": new,
            "swap_previous": expected,
        }
        committing = False
        try:
            with self._connect(write=True) as conn:
                transaction = conn.begin()
                if conn.execute(self._swap_statement, params).rowcount != 1:
                    current = conn.execute(
                        sa.select(_T.metadata_location).where(self._table_row(ident))
                    ).first()
                    transaction.rollback()
                    if current is None:
                        raise NoSuchTableError(f"table {name} does not exist in {self.name}")
                    raise CommitSwapLostError(
                        f"{name}: current metadata is {current[0]}, not {expected}"
                    )
                if self.fault_plan is not None and self.fault_plan.before_commit is not None:
                    self.fault_plan.before_commit(conn)
                committing = True
                transaction.commit()
        except CalvingError:
            raise
        except Exception as err:
            if committing and not commit_was_rolled_back(err):
                raise CommitStateUnknownError(
                    f"catalog {self.name}: swap of {name} to {new}: COMMIT failed, outcome "
                    f"unknown: {describe_error(err)}"
                ) from err
            # Nothing was committed: the failure came before COMMIT, or COMMIT was refused.
            message = f"catalog {self.name}: swap of {name} not made: {describe_error(err)}"
            if committing or isinstance(err, UNAVAILABLE_ERRORS):
                raise CatalogUnavailableError(message) from err
            if isinstance(err, sa_exc.SQLAlchemyError):
                raise CatalogError(message) from err
            raise

    def _discard(self, location: str) -> None:
        try:
            self.io.delete(location)
        except CalvingError as err:
            log.warning("could not delete uncommitted metadata file %s: %s", location, err)


def _like_escaped(text: str) -> str:
    """``text`` for a LIKE pattern with ``escape="!"``: its wildcards match themselves."""
    return text.replace("!", "!!").replace("_", "!_").replace("%", "!%")
