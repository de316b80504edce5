"""SQL catalog on SQLite (embedded default) or PostgreSQL, sharing its tables with
Iceberg's JDBC catalog and pyiceberg's SqlCatalog.

The commit is a check-and-put: ``UPDATE iceberg_tables SET metadata_location = :new,
previous_metadata_location = :old WHERE ... AND metadata_location = :old``; it
counts only if exactly one row changed.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from commit.catalog.base import Catalog, TableIdent, split_ident
from commit.errors import (
    CatalogUnavailableError,
    CommitStateUnknownError,
    CommitSwapLostError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from commit.io import FileIO, to_uri

ICEBERG_TYPE = "TABLE"

_meta = sa.MetaData()
iceberg_tables = sa.Table(
    "iceberg_tables", _meta,
    sa.Column("catalog_name", sa.String(255), primary_key=True, nullable=False),
    sa.Column("table_namespace", sa.String(255), primary_key=True, nullable=False),
    sa.Column("table_name", sa.String(255), primary_key=True, nullable=False),
    sa.Column("metadata_location", sa.String(1000), nullable=True),
    sa.Column("previous_metadata_location", sa.String(1000), nullable=True),
    sa.Column("iceberg_type", sa.String(5), nullable=True),
)
namespace_properties = sa.Table(
    "iceberg_namespace_properties", _meta,
    sa.Column("catalog_name", sa.String(255), primary_key=True, nullable=False),
    sa.Column("namespace", sa.String(255), primary_key=True, nullable=False),
    sa.Column("property_key", sa.String(255), primary_key=True, nullable=False),
    sa.Column("property_value", sa.String(1000), nullable=False),
)

# Test hook: called with ("before"|"after", ident) around the swap statement.
SwapHook = Callable[[str, TableIdent], None]


class SqlCatalog(Catalog):
    def __init__(self, name: str, uri: str, warehouse: str, io: FileIO | None = None) -> None:
        self.name = name
        self.uri = uri
        self.warehouse = to_uri(warehouse.rstrip("/"))
        self.io = io or FileIO()
        self.swap_hook: SwapHook | None = None
        kwargs: dict[str, Any] = {}
        if uri.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": 60}
            kwargs["poolclass"] = sa.pool.NullPool
        else:
            kwargs["pool_pre_ping"] = True
        self.engine = sa.create_engine(uri, **kwargs)
        if uri.startswith("sqlite"):
            sa.event.listen(self.engine, "connect", _sqlite_on_connect)
            sa.event.listen(self.engine, "begin", _sqlite_begin_immediate)
        self._init_lock = threading.Lock()
        self._create_schema()

    def _create_schema(self) -> None:
        try:
            _meta.create_all(self.engine, checkfirst=True)
        except (IntegrityError, OperationalError):
            _meta.create_all(self.engine, checkfirst=True)  # lost a creation race; recheck
        try:
            with self.engine.begin() as c:
                c.execute(sa.text("SELECT iceberg_type FROM iceberg_tables LIMIT 0"))
        except OperationalError:
            with self.engine.begin() as c:  # a v0 JDBC schema: add the column as pyiceberg does
                c.execute(sa.text("ALTER TABLE iceberg_tables ADD COLUMN iceberg_type VARCHAR(5)"))

    def _where(self, ident: TableIdent) -> Any:
        ns, name = split_ident(ident)
        t = iceberg_tables.c
        return sa.and_(t.catalog_name == self.name, t.table_namespace == ns, t.table_name == name,
                       sa.or_(t.iceberg_type == ICEBERG_TYPE, t.iceberg_type.is_(None)))

    def _run(self, fn: Callable[[sa.Connection], Any]) -> Any:
        try:
            with self.engine.begin() as c:
                return fn(c)
        except OperationalError as exc:
            raise CatalogUnavailableError(f"catalog {self.name}: {exc.orig}") from None

    # ------------------------------------------------------------ namespaces
    def _namespace_exists(self, c: sa.Connection, ns: str) -> bool:
        p = namespace_properties.c
        if c.execute(sa.select(p.namespace).where(p.catalog_name == self.name,
                                                  p.namespace == ns).limit(1)).first():
            return True
        t = iceberg_tables.c
        return c.execute(sa.select(t.table_name).where(
            t.catalog_name == self.name, t.table_namespace == ns).limit(1)).first() is not None

    def create_namespace(self, namespace: tuple[str, ...],
                         properties: Mapping[str, str] | None = None) -> None:
        ns = ".".join(namespace)

        def run(c: sa.Connection) -> None:
            if self._namespace_exists(c, ns):
                raise NamespaceAlreadyExistsError(f"namespace {ns} already exists")
            props = {"exists": "true", **dict(properties or {})}
            c.execute(namespace_properties.insert(), [
                {"catalog_name": self.name, "namespace": ns, "property_key": k,
                 "property_value": v} for k, v in props.items()])
        try:
            self._run(run)
        except IntegrityError:
            raise NamespaceAlreadyExistsError(f"namespace {ns} already exists") from None

    def list_namespaces(self) -> list[tuple[str, ...]]:
        def run(c: sa.Connection) -> list[tuple[str, ...]]:
            p, t = namespace_properties.c, iceberg_tables.c
            a = {r[0] for r in c.execute(sa.select(p.namespace).where(p.catalog_name == self.name))}
            b = {r[0] for r in c.execute(sa.select(t.table_namespace).where(
                t.catalog_name == self.name))}
            return sorted(tuple(n.split(".")) for n in a | b)
        return self._run(run)

    def drop_namespace(self, namespace: tuple[str, ...]) -> None:
        ns = ".".join(namespace)

        def run(c: sa.Connection) -> None:
            if not self._namespace_exists(c, ns):
                raise NoSuchNamespaceError(f"namespace {ns} does not exist")
            t = iceberg_tables.c
            if c.execute(sa.select(t.table_name).where(t.catalog_name == self.name,
                                                       t.table_namespace == ns)).first():
                raise NamespaceNotEmptyError(f"namespace {ns} still has tables")
            p = namespace_properties.c
            c.execute(namespace_properties.delete().where(p.catalog_name == self.name,
                                                           p.namespace == ns))
        self._run(run)

    # ------------------------------------------------------------ tables
    def list_tables(self, namespace: tuple[str, ...]) -> list[TableIdent]:
        ns = ".".join(namespace)
        t = iceberg_tables.c
        rows = self._run(lambda c: c.execute(sa.select(t.table_name).where(
            t.catalog_name == self.name, t.table_namespace == ns,
            sa.or_(t.iceberg_type == ICEBERG_TYPE, t.iceberg_type.is_(None)))).all())
        return sorted((*namespace, r[0]) for r in rows)

    def load_metadata_location(self, ident: TableIdent) -> str:
        t = iceberg_tables.c
        row = self._run(lambda c: c.execute(sa.select(t.metadata_location).where(
            self._where(ident))).first())
        if row is None or row[0] is None:
            raise NoSuchTableError(f"table {'.'.join(ident)} does not exist in catalog "
                                   f"{self.name}")
        return str(row[0])

    def create_table(self, ident: TableIdent, table_location: str, metadata: bytes) -> str:
        ns, name = split_ident(ident)
        import uuid

        location = f"{table_location}/metadata/00000-{uuid.uuid4()}.metadata.json"
        self.io.write(location, metadata)

        def run(c: sa.Connection) -> None:
            if not self._namespace_exists(c, ns):
                raise NoSuchNamespaceError(f"namespace {ns} does not exist")
            c.execute(iceberg_tables.insert().values(
                catalog_name=self.name, table_namespace=ns, table_name=name,
                metadata_location=location, previous_metadata_location=None,
                iceberg_type=ICEBERG_TYPE))
        try:
            self._run(run)
        except IntegrityError:
            self.io.delete(location)
            raise TableAlreadyExistsError(f"table {'.'.join(ident)} already exists") from None
        return location

    def register_table(self, ident: TableIdent, metadata_location: str) -> None:
        ns, name = split_ident(ident)
        try:
            self._run(lambda c: c.execute(iceberg_tables.insert().values(
                catalog_name=self.name, table_namespace=ns, table_name=name,
                metadata_location=metadata_location, previous_metadata_location=None,
                iceberg_type=ICEBERG_TYPE)))
        except IntegrityError:
            raise TableAlreadyExistsError(f"table {'.'.join(ident)} already exists") from None

    def drop_table(self, ident: TableIdent) -> None:
        res = self._run(lambda c: c.execute(iceberg_tables.delete().where(self._where(ident))))
        if res.rowcount != 1:
            raise NoSuchTableError(f"table {'.'.join(ident)} does not exist")

    def rename_table(self, src: TableIdent, dst: TableIdent) -> None:
        dns, dname = split_ident(dst)

        def run(c: sa.Connection) -> None:
            if not self._namespace_exists(c, dns):
                raise NoSuchNamespaceError(f"namespace {dns} does not exist")
            res = c.execute(iceberg_tables.update().where(self._where(src)).values(
                table_namespace=dns, table_name=dname))
            if res.rowcount != 1:
                raise NoSuchTableError(f"table {'.'.join(src)} does not exist")
        try:
            self._run(run)
        except IntegrityError:
            raise TableAlreadyExistsError(f"table {'.'.join(dst)} already exists") from None

    # ------------------------------------------------------------ commit
    def commit_metadata(self, ident: TableIdent, expected: str, new_location: str,
                        metadata: bytes) -> None:
        from commit import faults

        self.io.write(new_location, metadata)
        faults.hit("after-metadata-file")
        t = iceberg_tables.c
        stmt = iceberg_tables.update().where(self._where(ident), t.metadata_location == expected) \
            .values(metadata_location=new_location, previous_metadata_location=expected)
        try:
            conn = self.engine.connect()
        except (OperationalError, DBAPIError) as exc:
            raise CatalogUnavailableError(f"catalog {self.name}: {exc.orig}") from None
        with conn:
            if self.swap_hook:
                self.swap_hook("before", ident)
            try:
                with conn.begin():
                    rowcount = conn.execute(stmt).rowcount
            except OperationalError as exc:
                if _before_statement(exc):
                    raise CatalogUnavailableError(f"catalog {self.name}: {exc.orig}") from None
                raise CommitStateUnknownError(
                    f"commit of {'.'.join(ident)} to {new_location}: outcome unknown: "
                    f"{exc.orig}") from None
            except DBAPIError as exc:
                raise CommitStateUnknownError(
                    f"commit of {'.'.join(ident)} to {new_location}: outcome unknown: "
                    f"{exc.orig}") from None
            if self.swap_hook:
                self.swap_hook("after", ident)
        if rowcount != 1:
            raise CommitSwapLostError(
                f"{'.'.join(ident)}: metadata is no longer {expected}; another commit won")


def _before_statement(exc: OperationalError) -> bool:
    """SQLite lock errors are raised before anything changed: safe to treat as unavailable."""
    text = str(exc.orig).lower()
    return "database is locked" in text or "unable to open" in text


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # let the "begin" hook issue BEGIN IMMEDIATE
    dbapi_conn.execute("PRAGMA busy_timeout = 60000")


def _sqlite_begin_immediate(conn: sa.Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")
