"""Catalogs for fault scenarios, described as plain values a writer subprocess can open."""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from calving.commit.catalog import FilesystemCatalog, SqlCatalog
from calving.commit.catalog.base import Catalog

KINDS = ("sqlite", "postgres", "filesystem")
#: The REST path: ``RestCatalog`` -> ``calving catalog serve`` -> a SQL catalog.
REST_KINDS = ("rest-sqlite", "rest-postgres")
PG_ADMIN_URL = os.environ.get(
    "CALVING_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
NAMESPACE = ("db",)
IDENT = ("db", "events")


@dataclass(frozen=True)
class CatalogSpec:
    kind: str  # sqlite | postgres | filesystem
    name: str
    uri: str  # SQLAlchemy URL (SQL catalogs) or the warehouse (filesystem)
    warehouse: str

    def open(self) -> Catalog:
        if self.kind == "filesystem":
            return FilesystemCatalog(self.warehouse, name=self.name)
        if self.kind in REST_KINDS:
            from calving.commit.catalog.rest.client import RestCatalog

            return RestCatalog(self.name, self.uri, timeout_s=20.0)
        return SqlCatalog(self.name, self.uri, self.warehouse)

    def via(self, uri: str) -> CatalogSpec:
        """The same catalog reached at ``uri`` (a REST catalog behind a proxy)."""
        return CatalogSpec(self.kind, self.name, uri, self.warehouse)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> CatalogSpec:
        return CatalogSpec(**json.loads(text))


def make_spec(kind: str, workdir: Path, pg_url: str | None = None) -> CatalogSpec:
    """A fresh, empty catalog of ``kind`` under ``workdir`` (PostgreSQL: in ``pg_url``,
    isolated by a unique catalog name)."""
    warehouse = workdir / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    name = f"faults_{uuid.uuid4().hex[:8]}"
    if kind == "sqlite":
        spec = CatalogSpec(kind, name, f"sqlite:///{workdir}/catalog.db", str(warehouse))
    elif kind == "postgres":
        if pg_url is None:
            raise RuntimeError("a PostgreSQL scenario needs a database URL")
        spec = CatalogSpec(kind, name, pg_url, str(warehouse))
    elif kind == "filesystem":
        spec = CatalogSpec(kind, name, str(warehouse), str(warehouse))
    elif kind in REST_KINDS:
        sql = make_spec(kind.removeprefix("rest-"), workdir, pg_url)
        from tests.faults.rest import start_serve

        url = start_serve(sql.uri, sql.name, sql.warehouse, workdir)
        return CatalogSpec(kind, sql.name, url, sql.warehouse)
    else:
        raise ValueError(f"unknown catalog kind {kind!r}; known: {', '.join(KINDS + REST_KINDS)}")
    catalog = spec.open()
    try:
        catalog.create_namespace(NAMESPACE)
    finally:
        catalog.close()
    return spec


def postgres_available(admin_url: str = PG_ADMIN_URL) -> bool:
    import sqlalchemy as sa

    try:
        eng = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with eng.connect() as c:
            c.execute(sa.text("SELECT 1"))
        eng.dispose()
        return True
    except (sa.exc.SQLAlchemyError, OSError):
        return False


@contextlib.contextmanager
def temporary_pg_database(admin_url: str = PG_ADMIN_URL) -> Iterator[str]:
    """A fresh PostgreSQL database (a test session, a harness run), dropped afterwards."""
    import sqlalchemy as sa

    name = f"calving_faults_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
