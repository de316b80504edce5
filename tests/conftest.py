"""Shared fixtures: catalogs on SQLite / PostgreSQL / the filesystem, FileIO."""

from __future__ import annotations

import os
import uuid

import pytest

from commit.catalog import FilesystemCatalog, SqlCatalog
from commit.io import FileIO

PG_ADMIN_URL = os.environ.get(
    "CALVING_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def _pg_available() -> bool:
    import sqlalchemy as sa

    try:
        eng = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with eng.connect() as c:
            c.execute(sa.text("SELECT 1"))
        eng.dispose()
        return True
    except (sa.exc.SQLAlchemyError, OSError):
        return False


@pytest.fixture(scope="session")
def pg_url():
    """A fresh PostgreSQL database for this test session (dropped afterwards)."""
    import sqlalchemy as sa

    if not _pg_available():
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL at 127.0.0.1:5432 is required in CI")
        pytest.skip("PostgreSQL at 127.0.0.1:5432 is not reachable")
    name = f"calving_test_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    yield PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    with admin.connect() as c:
        c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def io() -> FileIO:
    return FileIO()


@pytest.fixture
def sqlite_catalog(tmp_path):
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    cat = SqlCatalog("test", f"sqlite:///{tmp_path}/catalog.db", str(warehouse))
    cat.create_namespace(("db",))
    return cat


@pytest.fixture
def pg_catalog(pg_url, tmp_path):
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    cat = SqlCatalog(f"c_{uuid.uuid4().hex[:8]}", pg_url, str(warehouse))
    cat.create_namespace(("db",))
    return cat


@pytest.fixture
def fs_catalog(tmp_path):
    cat = FilesystemCatalog(str(tmp_path / "fswarehouse"))
    cat.create_namespace(("db",))
    return cat


@pytest.fixture(params=["sqlite", "postgres", "filesystem"])
def any_catalog(request):
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_catalog")
    if request.param == "postgres":
        return request.getfixturevalue("pg_catalog")
    return request.getfixturevalue("fs_catalog")
