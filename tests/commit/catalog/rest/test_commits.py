"""Commits through the REST server: stale bases get a 409 and nothing is lost, racing
writers all land or are refused, multi-table transactions are all or nothing, the
bearer token is enforced, errors follow the spec's error model."""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import CommitFailedException

from calving.commit.errors import CommitSwapLostError
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.table import Table
from calving.ingest.serve.service import CatalogService
from calving.ingest.serve.transaction import table_swap
from tests.commit.catalog.rest.conftest import dv_table, start_server
from tests.support.tables import make_table

pytestmark = pytest.mark.integration


def _batch(start: int, n: int = 3) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _request(url: str, method: str, body: Any = None, token: str | None = None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        raw = err.read()
        return err.code, json.loads(raw) if raw else None


NO_CLIENT_RETRY = {"commit.retry.num-retries": "0"}  # pyiceberg retries a 409 by itself


def test_stale_base_append_gets_409_and_no_commit_is_lost(rest_server):
    rest = RestCatalog("r", uri=rest_server.url)
    rest.create_table("db.t", schema=_batch(0).schema, properties=NO_CLIENT_RETRY)
    first, second = rest.load_table("db.t"), rest.load_table("db.t")
    first.append(_batch(0))
    with pytest.raises(CommitFailedException, match="ref 'main' snapshot id"):
        second.append(_batch(100))  # based on the snapshot before `first`'s
    second.refresh()
    second.append(_batch(100))
    ids = sorted(rest.load_table("db.t").scan().to_arrow().column("id").to_pylist())
    assert ids == [0, 1, 2, 100, 101, 102]


def test_pyiceberg_retries_after_a_409_and_both_appends_land(rest_server, caplog):
    rest = RestCatalog("r", uri=rest_server.url)
    rest.create_table("db.t2", schema=_batch(0).schema)
    first, second = rest.load_table("db.t2"), rest.load_table("db.t2")
    first.append(_batch(0))
    with caplog.at_level(logging.WARNING, logger="pyiceberg"):
        second.append(_batch(100))
    assert any("concurrent update" in r.getMessage() for r in caplog.records)
    ids = sorted(rest.load_table("db.t2").scan().to_arrow().column("id").to_pylist())
    assert ids == [0, 1, 2, 100, 101, 102]


def test_racing_appends_each_land_or_get_409(rest_server):
    rest = RestCatalog("r", uri=rest_server.url)
    rest.create_table("db.race", schema=_batch(0).schema, properties=NO_CLIENT_RETRY)
    tables = [RestCatalog(f"w{i}", uri=rest_server.url).load_table("db.race") for i in range(6)]
    landed, refused = [], []
    start = threading.Barrier(len(tables))

    def append(i: int) -> None:
        start.wait()
        try:
            tables[i].append(_batch(i * 10))
            landed.append(i)
        except CommitFailedException:
            refused.append(i)

    threads = [threading.Thread(target=append, args=(i,)) for i in range(len(tables))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(landed) + len(refused) == len(tables) and landed
    final = rest.load_table("db.race")
    ids = sorted(final.scan().to_arrow().column("id").to_pylist())
    assert ids == sorted(i * 10 + k for i in landed for k in range(3))
    assert len(final.metadata.snapshots) == len(landed)


def _ident(name: str) -> dict[str, Any]:
    return {"namespace": ["db"], "name": name}


def test_transaction_is_all_or_nothing(shared):
    one, _ = dv_table(shared)
    rest_server = start_server(shared)
    try:
        _transaction_all_or_nothing(shared, one, rest_server)
    finally:
        rest_server.stop()


def _transaction_all_or_nothing(catalog, one, rest_server):
    rest = RestCatalog("r", uri=rest_server.url)
    rest.create_table("db.other", schema=_batch(0).schema)
    other_uuid = rest.load_table("db.other").metadata.table_uuid
    url = f"{rest_server.url}/v1/transactions/commit"
    good = {
        "identifier": _ident("events"),
        "requirements": [{"type": "assert-table-uuid", "uuid": one.metadata.table_uuid}],
        "updates": [{"action": "set-properties", "updates": {"tx": "1"}}],
    }
    stale = {
        "identifier": _ident("other"),
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 42}],
        "updates": [{"action": "set-properties", "updates": {"tx": "1"}}],
    }
    status, body = _request(url, "POST", {"table-changes": [good, stale]})
    assert status == 409 and body["error"]["type"] == "CommitFailedException"
    assert "tx" not in Table.load(catalog, ("db", "events")).metadata.properties
    fixed = dict(stale, requirements=[{"type": "assert-table-uuid", "uuid": str(other_uuid)}])
    status, body = _request(url, "POST", {"table-changes": [good, fixed]})
    assert status == 204 and body is None
    for name in ("events", "other"):
        assert Table.load(catalog, ("db", name)).metadata.properties["tx"] == "1"
    # the DV table still reads the same through the server after the commit
    assert (
        rest.load_table("db.events").metadata.current_snapshot_id
        == one.metadata.current_snapshot_id
    )


def test_one_moved_row_rolls_back_the_whole_swap(shared):
    """Both tables prepared, then one moves on: the SQL transaction swaps neither."""
    first, second = make_table(shared, "a"), make_table(shared, "b")
    service = CatalogService(shared)
    body = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"tx": "1"}}]}
    prepared = [service.prepare(t.ident, body) for t in (first, second)]
    second.commit(UpdateProperties({"moved": "yes"}))
    with pytest.raises(CommitSwapLostError, match="db.b"):
        shared.commit_many([table_swap(p) for p in prepared])
    assert shared.load_metadata_location(first.ident) == first.metadata_location
    assert Table.load(shared, second.ident).metadata.properties["moved"] == "yes"
    assert not any(shared.io.exists(p.new_location) for p in prepared)  # rolled back: gone
    again = service.prepare(first.ident, body)  # the loser re-prepares from fresh metadata
    shared.commit_many([table_swap(again)])
    assert Table.load(shared, first.ident).metadata.properties["tx"] == "1"


def test_update_table_requirements_and_updates(sqlite_catalog, rest_server):
    table, _ = dv_table(sqlite_catalog)
    url = f"{rest_server.url}/v1/namespaces/db/tables/events"
    snap = table.metadata.current_snapshot_id
    body = {
        "requirements": [
            {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": snap},
            {"type": "assert-current-schema-id", "current-schema-id": 0},
            {"type": "assert-default-spec-id", "default-spec-id": 0},
            {"type": "assert-last-assigned-field-id", "last-assigned-field-id": 4},
        ],
        "updates": [
            {"action": "set-snapshot-ref", "ref-name": "audit", "type": "tag", "snapshot-id": snap},
            {"action": "set-properties", "updates": {"owner": "rest"}},
        ],
    }
    status, answer = _request(url, "POST", body)
    assert status == 200, answer
    assert answer["metadata"]["refs"]["audit"] == {"snapshot-id": snap, "type": "tag"}
    reloaded = Table.load(sqlite_catalog, ("db", "events"))
    assert reloaded.metadata_location == answer["metadata-location"]
    assert reloaded.metadata.properties["owner"] == "rest"
    assert reloaded.metadata.metadata_log[-1].metadata_file == table.metadata_location
    status, answer = _request(url, "POST", body)  # the field id requirement still holds,
    assert status == 200  # and nothing else was asserted that changed
    body["requirements"][1]["current-schema-id"] = 7
    status, answer = _request(url, "POST", body)
    assert status == 409 and "current schema" in answer["error"]["message"]
    unknown = {"requirements": [], "updates": [{"action": "frobnicate"}]}
    status, answer = _request(url, "POST", unknown)
    assert status == 400 and answer["error"]["type"] == "BadRequestException"


def test_errors_follow_the_error_model(rest_server):
    base = f"{rest_server.url}/v1/namespaces"
    status, body = _request(f"{base}/db/tables/missing", "GET")
    assert status == 404
    assert body == {
        "error": {
            "message": body["error"]["message"],
            "type": "NoSuchTableException",
            "code": 404,
        }
    }
    assert "db.missing" in body["error"]["message"]
    status, body = _request(f"{base}/nope/tables", "GET")
    assert (status, body["error"]["type"]) == (404, "NoSuchNamespaceException")
    status, body = _request(base, "POST", {"namespace": ["db"]})
    assert (status, body["error"]["type"]) == (409, "AlreadyExistsException")
    status, body = _request(f"{base}/db/tables/missing", "HEAD")
    assert status == 404 and body is None


def test_bearer_token_is_required_and_never_logged(sqlite_catalog, caplog):
    token = "tok-9f2c1e"
    server = start_server(sqlite_catalog, token=token)
    try:
        with caplog.at_level(logging.INFO, logger="calving.rest"):
            status, body = _request(f"{server.url}/v1/config", "GET")
            assert (status, body["error"]["type"]) == (401, "NotAuthorizedException")
            status, _ = _request(f"{server.url}/v1/config", "GET", token="wrong")
            assert status == 401
            rest = RestCatalog("r", uri=server.url, token=token)
            assert rest.list_namespaces() == [("db",)]
    finally:
        server.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "calving.rest"]
    assert any(line.startswith("GET /v1/config 401 ") for line in lines)
    assert any(line.startswith("GET /v1/namespaces 200 ") for line in lines)
    assert not any(token in line for line in lines)
