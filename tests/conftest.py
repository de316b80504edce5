"""Shared fixtures: catalogs on SQLite / PostgreSQL / the filesystem, FileIO, and the
session's embedded Kafka broker."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from calving.commit.catalog import FilesystemCatalog, SqlCatalog
from calving.commit.io import FileIO
from tests.support import timings
from tests.support.tiers import TierPlugin

if TYPE_CHECKING:
    from calving.ingest.kafka.broker import EmbeddedBroker


def pytest_configure(config: pytest.Config) -> None:
    """Tiers: every test marked unit / integration / slow by what it starts, unit tests
    checked to start nothing, the totals per tier at the end (tests/support/tiers.py)."""
    config.pluginmanager.register(TierPlugin(config), "calving-tiers")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist, test files longest first by their recorded seconds, so that
    ``--dist loadfile --no-loadscope-reorder`` hands the long files out first
    (tests/support/timings.py). Every worker orders the same way, as xdist requires."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items[:] = timings.longest_first(items, timings.load())


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """The embedded Tansu broker, shared by the whole session (tests/ingest and the
    documentation's examples); its log is in the session's temp folder."""
    from calving.ingest.kafka.broker import EmbeddedBroker

    log = tmp_path_factory.mktemp("broker") / "tansu.log"
    with EmbeddedBroker(log_path=log) as running:
        yield running


@pytest.fixture(scope="session")
def pg_url():
    """A fresh PostgreSQL database for this test session (dropped afterwards)."""
    from tests.faults.catalogs import postgres_available, temporary_pg_database

    if not postgres_available():
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL at 127.0.0.1:5432 is required in CI")
        pytest.skip("PostgreSQL at 127.0.0.1:5432 is not reachable")
    with temporary_pg_database() as url:
        yield url


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
