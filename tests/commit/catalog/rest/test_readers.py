"""pyiceberg's RestCatalog and DuckDB's iceberg extension read and write through the
REST catalog server: listing, loading a calving v3 table with deletion vectors
(exact rows), creating and appending (calving reads it back directly)."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from calving.commit.table.table import Table
from calving.ingest.serve.server import RestCatalogServer
from calving.ingest.serve.service import CatalogService
from tests.commit.catalog.rest.conftest import duckdb_rest_connection, dv_table, start_server
from tests.support.oracles import datafusion_rows, pyiceberg_rows
from tests.support.tables import COLUMNS

pytestmark = pytest.mark.integration

ITEMS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})


def _rows(arrow: pa.Table, columns: list[str]) -> list[tuple]:
    return sorted(tuple(r[c] for c in columns) for r in arrow.to_pylist())


def test_pyiceberg_lists_loads_and_scans_a_dv_table(sqlite_catalog, rest_server):
    table, expected = dv_table(sqlite_catalog)
    rest = RestCatalog("r", uri=rest_server.url)
    assert rest.list_namespaces() == [("db",)]
    assert rest.list_tables("db") == [("db", "events")]
    assert rest.namespace_exists("db") and not rest.namespace_exists("nope")
    assert rest.table_exists("db.events") and not rest.table_exists("db.nope")
    loaded = rest.load_table("db.events")
    assert loaded.metadata.format_version == 3
    assert loaded.metadata_location == table.metadata_location
    assert _rows(loaded.scan().to_arrow(), COLUMNS) == expected


@pytest.mark.parametrize("token", [None, "s3cret-token"])
def test_duckdb_attaches_the_server_and_reads_a_dv_table(sqlite_catalog, token):
    _, expected = dv_table(sqlite_catalog)
    server = start_server(sqlite_catalog, token=token)
    con = duckdb_rest_connection()
    try:
        if token is None:
            auth = "AUTHORIZATION_TYPE 'none'"
        else:
            con.execute(f"CREATE SECRET rest_token (TYPE iceberg, TOKEN '{token}')")
            auth = "SECRET rest_token"
        con.execute(f"ATTACH '' AS r (TYPE iceberg, ENDPOINT '{server.url}', {auth})")
        got = con.execute("SELECT id, region, ts, payload FROM r.db.events").fetchall()
    finally:
        con.close()
        server.stop()
    assert sorted(got) == expected


def test_pyiceberg_creates_and_appends_then_calving_reads(shared):
    server = start_server(shared)
    try:
        rest = RestCatalog("r", uri=server.url)
        rest.create_namespace("py", {"owner": "tests"})
        assert rest.load_namespace_properties("py") == {"owner": "tests"}
        created = rest.create_table("py.items", schema=ITEMS.schema)
        created.append(ITEMS)
        created.append(ITEMS.slice(0, 1))
        rest_location = rest.load_table("py.items").metadata_location
    finally:
        server.stop()
    ours = Table.load(shared, ("py", "items"))
    assert ours.metadata_location == rest_location
    assert ours.metadata.format_version == 2
    assert len(ours.metadata.snapshots) == 2
    live = ours.live_files()
    assert sum(e.data_file.record_count for e in live.data.values()) == 4
    # an independent reader of the very metadata file the server wrote
    assert pyiceberg_rows(rest_location, ["id", "name"]) == sorted(
        [(1, "a"), (1, "a"), (2, "b"), (3, "c")]
    )


def test_staged_create_commits_with_assert_create(sqlite_catalog, rest_server):
    rest = RestCatalog("r", uri=rest_server.url)
    with rest.create_table_transaction("db.staged", schema=ITEMS.schema) as txn:
        txn.set_properties({"k": "v"})
    loaded = rest.load_table("db.staged")
    assert loaded.properties["k"] == "v"
    assert Table.load(sqlite_catalog, ("db", "staged")).metadata.properties["k"] == "v"
    with (
        pytest.raises(Exception, match="already exists"),
        rest.create_table_transaction("db.staged", schema=ITEMS.schema),
    ):
        pass


def test_duckdb_creates_inserts_and_deletes_through_the_server(sqlite_catalog, rest_server):
    con = duckdb_rest_connection()
    try:
        con.execute(f"ATTACH '' AS r (TYPE iceberg, ENDPOINT '{rest_server.url}', AUTHORIZATION_TYPE 'none')")  # fmt: skip
        con.execute("CREATE TABLE r.db.dk (id BIGINT, name VARCHAR)")
        con.execute("INSERT INTO r.db.dk VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        con.execute("DELETE FROM r.db.dk WHERE id = 2")
    finally:
        con.close()
    direct = Table.load(sqlite_catalog, ("db", "dk"))
    assert len(direct.metadata.snapshots) == 2
    for read in (pyiceberg_rows, datafusion_rows):
        assert read(direct.metadata_location, ["id", "name"]) == [(1, "a"), (3, "c")]


def test_a_prefix_is_advertised_and_served(sqlite_catalog, caplog):
    _, expected = dv_table(sqlite_catalog)
    server = RestCatalogServer(
        CatalogService(sqlite_catalog), "127.0.0.1", 0, prefix="lake", insecure=True
    )
    server.start()
    try:
        with caplog.at_level(logging.INFO, logger="calving.rest"):
            rest = RestCatalog("r", uri=server.url)
            assert rest.properties.get("prefix") == "lake"
            assert _rows(rest.load_table("db.events").scan().to_arrow(), COLUMNS) == expected
    finally:
        server.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "calving.rest"]
    assert any(line.startswith("GET /v1/lake/namespaces/db/tables/events 200") for line in lines)
