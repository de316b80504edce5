"""Vended storage credentials: a client with no storage settings of its own writes a
table in an ``s3://`` warehouse (a loopback moto server) with the credentials the server's
``loadTable`` answer carries, and pyiceberg reads it back through the server the same
way; the ``storage-credentials`` entry with the longest matching prefix wins."""

from __future__ import annotations

import pytest

from calving.commit.catalog import SqlCatalog
from calving.commit.catalog.rest.client import RestCatalog, vended_storage
from calving.commit.io import FileIO
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.committer import Committed
from calving.ingest.serve.server import RestCatalogServer
from calving.ingest.serve.service import CatalogService
from tests.support.s3 import moto_bucket
from tests.support.tables import make_table, row, write_partitioned

pytestmark = pytest.mark.integration


def test_a_client_without_storage_settings_writes_with_vended_credentials(tmp_path):
    with moto_bucket("lake") as props:
        sql = SqlCatalog("c", f"sqlite:///{tmp_path}/c.db", "s3://lake/wh", io=FileIO(props))
        sql.create_namespace(("db",))
        server = RestCatalogServer(
            CatalogService(sql, vended=props), "127.0.0.1", 0, insecure=True
        ).start()
        try:
            rest = RestCatalog("r", server.url)
            assert not any(k.startswith("s3.") for k in rest.io.properties)
            table = make_table(rest)
            assert table.metadata.location.startswith("s3://lake/wh/")
            assert table.io.properties["s3.endpoint"] == props["s3.endpoint"]
            rows = [row(i) for i in range(6)]
            files = tuple(f for f, _ in write_partitioned(table, rows))
            assert all(f.file_path.startswith("s3://lake/") for f in files)
            assert isinstance(table.commit(FastAppend(files)), Committed)
            assert props["s3.secret-access-key"] not in repr(table.io)

            from pyiceberg.catalog.rest import RestCatalog as PyIcebergRest

            read = PyIcebergRest("p", uri=server.url).load_table("db.events").scan().to_arrow()
            assert sorted(read.column("id").to_pylist()) == list(range(6))
        finally:
            server.stop()


def test_the_longest_matching_storage_credential_prefix_wins():
    reply = {
        "config": {"s3.region": "eu-west-1", "token": "not-storage"},
        "storage-credentials": [
            {"prefix": "s3://lake/", "config": {"s3.access-key-id": "broad"}},
            {"prefix": "s3://lake/wh/db/", "config": {"s3.access-key-id": "narrow"}},
            {"prefix": "s3://other/", "config": {"s3.access-key-id": "elsewhere"}},
        ],
    }
    vended = vended_storage(reply, "s3://lake/wh/db/events/metadata/00001-x.metadata.json")
    assert vended == {"s3.region": "eu-west-1", "s3.access-key-id": "narrow"}
