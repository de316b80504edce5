"""A REST catalog server over a SQLite (or PostgreSQL) ``SqlCatalog``, on a loopback
port the OS picks, served from a thread; and a v3 table with deletion vectors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pyroaring import BitMap64

from calving.commit.catalog import SqlCatalog
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.committer import Committed
from calving.commit.table.table import Table
from calving.ingest.serve.server import RestCatalogServer
from calving.ingest.serve.service import CatalogService
from tests.support.tables import make_table, row, rows_as_tuples, write_partitioned


def start_server(catalog: SqlCatalog, token: str | None = None, **kwargs: Any) -> RestCatalogServer:
    """The server over ``catalog`` on a free loopback port; without ``token`` it runs
    ``insecure`` (loopback only), as ``calving catalog serve --insecure`` does."""
    return RestCatalogServer(
        CatalogService(catalog), "127.0.0.1", 0, token=token, insecure=token is None, **kwargs
    ).start()


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request):
    """The SQL catalog on SQLite, then on PostgreSQL."""
    return request.getfixturevalue("sqlite_catalog" if request.param == "sqlite" else "pg_catalog")


@pytest.fixture
def rest_server(sqlite_catalog) -> Iterator[RestCatalogServer]:
    server = start_server(sqlite_catalog)
    yield server
    server.stop()


def dv_table(catalog: SqlCatalog) -> tuple[Table, list[tuple[Any, ...]]]:
    """``db.events``: two appends and a row delta that deletes every 7th id through
    deletion vectors; returns the table and its expected rows."""
    table = make_table(catalog)
    rows = [row(i, region=("eu" if i % 3 else "us"), day=i % 2) for i in range(40)]
    files = write_partitioned(table, rows)
    assert isinstance(table.commit(FastAppend(tuple(f for f, _ in files))), Committed)
    deletes = {}
    for data_file, in_file in files:
        positions = BitMap64(i for i, r in enumerate(in_file) if r["id"] % 7 == 0)
        if len(positions):
            deletes[data_file.file_path] = positions
    assert len(deletes) >= 2
    assert isinstance(table.commit(RowDelta(deletes=deletes)), Committed)
    assert table.live_files().dvs, "the table must hold deletion vectors"
    return table, rows_as_tuples([r for r in rows if r["id"] % 7])


def duckdb_rest_connection() -> Any:
    """DuckDB with the iceberg, avro and httpfs extensions loaded by path from their
    PyPI packages (autoinstall off): REST catalogs need httpfs for HTTP."""
    import os

    import duckdb_extension_httpfs

    from calving.ingest.demo.verify import duckdb_connection

    con = duckdb_connection()
    base = os.path.join(os.path.dirname(duckdb_extension_httpfs.__file__), "extensions")
    version_dir = os.path.join(base, max(os.listdir(base)))
    con.execute(f"LOAD '{os.path.join(version_dir, 'httpfs.duckdb_extension')}'")
    con.execute("SET TimeZone = 'UTC'")
    return con
