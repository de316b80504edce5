"""calving's own commit path (SQLite and PostgreSQL behind the server) through ``RestCatalog`` against ``calving catalog serve``:
tables created, appended to and row-deleted (DVs) through REST read back exactly by
independent readers; racing calving writers all land; and injected faults on the
commit (409, 500 before or after applying, a timeout after applying) each end in
exactly one landed commit or a refusal, never two (a commit the server applies after
the client timed out and read the table back included)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from pyroaring import BitMap64

from calving.commit.catalog.rest.client import RestCatalog
from calving.commit.errors import CatalogUnavailableError, TableAlreadyExistsError
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.committer import Committed
from calving.commit.table.table import Table
from calving.ingest.serve.errors import RestError
from calving.ingest.serve.server import RestCatalogServer
from calving.ingest.serve.service import CatalogService
from tests.support.oracles import ALL_READERS
from tests.support.tables import COLUMNS, make_table, row, rows_as_tuples, write_partitioned

pytestmark = pytest.mark.integration


class FaultyService(CatalogService):
    """Injects one fault per queued name into the next table commits."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.faults: list[str] = []
        self.sleep_s = 0.0

    def commit_table(self, ident: Any, body: Any) -> dict[str, Any]:
        fault = self.faults.pop(0) if self.faults else None
        if fault == "409":
            raise RestError(409, "CommitFailedException", "injected conflict")
        if fault == "500-before":
            raise RestError(500, "CommitStateUnknownException", "injected, not applied")
        if fault == "slow-before":  # the client gives up; the commit is applied later
            time.sleep(self.sleep_s)
        answer = super().commit_table(ident, body)
        if fault == "500-after":
            raise RestError(500, "CommitStateUnknownException", "injected, applied")
        if fault == "slow-after":
            time.sleep(self.sleep_s)
        return answer


@pytest.fixture
def faulty(shared):
    service = FaultyService(shared)
    server = RestCatalogServer(service, "127.0.0.1", 0, insecure=True).start()
    yield service, server
    server.stop()


def _rest(server: RestCatalogServer, **kwargs: Any) -> RestCatalog:
    return RestCatalog("rest", server.url, **kwargs)


def test_calving_writes_a_dv_table_through_rest(shared, faulty):
    _, server = faulty
    rest = _rest(server)
    assert rest.warehouse == shared.warehouse
    table = make_table(rest)
    assert ("db", "events") in rest.list_tables(("db",))
    rows = [row(i, region=("eu" if i % 3 else "us"), day=i % 2) for i in range(30)]
    files = write_partitioned(table, rows)
    assert isinstance(table.commit(FastAppend(tuple(f for f, _ in files))), Committed)
    deletes = {}
    for data_file, in_file in files:
        positions = BitMap64(i for i, r in enumerate(in_file) if r["id"] % 5 == 0)
        if len(positions):
            deletes[data_file.file_path] = positions
    assert isinstance(table.commit(RowDelta(deletes=deletes)), Committed)
    assert isinstance(table.commit(UpdateProperties({"owner": "rest"})), Committed)
    direct = Table.load(shared, ("db", "events"))
    assert table.metadata_location == direct.metadata_location  # the server's file
    assert direct.metadata.table_uuid == table.metadata.table_uuid
    assert direct.metadata.properties["owner"] == "rest"
    assert len(direct.metadata.snapshots) == 2 and direct.live_files().dvs
    expected = rows_as_tuples([r for r in rows if r["id"] % 5])
    # The server writes the table's metadata files as the table asks: gzip for a table
    # calving created, plain once the property says none; readers take both.
    assert direct.metadata_location.endswith(".gz.metadata.json")
    assert direct.io.read(direct.metadata_location)[:2] == b"\x1f\x8b"
    for name, read in ALL_READERS.items():
        assert read(direct.metadata_location, COLUMNS) == expected, name
    assert isinstance(
        table.commit(UpdateProperties({"write.metadata.compression-codec": "none"})), Committed
    )
    plain = Table.load(shared, ("db", "events"))
    assert not plain.metadata_location.endswith(".gz.metadata.json")
    assert plain.io.read(plain.metadata_location)[:1] == b"{"
    for name, read in ALL_READERS.items():
        assert read(plain.metadata_location, COLUMNS) == expected, name
    with pytest.raises(TableAlreadyExistsError):
        make_table(rest)


def test_racing_calving_writers_all_land(shared, faulty):
    _, server = faulty
    make_table(_rest(server))
    writers = [Table.load(_rest(server), ("db", "events")) for _ in range(4)]
    batches = [[row(100 * w + i) for i in range(3)] for w in range(len(writers))]
    files = [write_partitioned(t, b) for t, b in zip(writers, batches)]
    start, outcomes = threading.Barrier(len(writers)), []

    def commit(w: int) -> None:
        start.wait()
        outcomes.append(writers[w].commit(FastAppend(tuple(f for f, _ in files[w]))))

    threads = [threading.Thread(target=commit, args=(w,)) for w in range(len(writers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(isinstance(o, Committed) for o in outcomes) and len(outcomes) == len(writers)
    direct = Table.load(shared, ("db", "events"))
    assert len(direct.metadata.snapshots) == len(writers)
    expected = rows_as_tuples([r for b in batches for r in b])
    assert ALL_READERS["pyiceberg"](direct.metadata_location, COLUMNS) == expected


@pytest.mark.parametrize("fault", ["409", "500-before", "500-after", "slow-after", "slow-before"])
def test_a_faulty_commit_lands_exactly_once(shared, faulty, fault):
    service, server = faulty
    service.sleep_s = 2.0
    table = make_table(_rest(server, timeout_s=1.0))
    batch = [row(i) for i in range(4)]
    files = write_partitioned(table, batch)
    service.faults.append(fault)
    outcome = table.commit(FastAppend(tuple(f for f, _ in files)))
    assert isinstance(outcome, Committed), outcome
    if fault != "slow-before":  # a late commit may land before or after the read-back
        # A lost reply (slow-after) is answered by repeating the commit under its
        # Idempotency-Key; a 500 after applying is not a final answer, so it is read back.
        assert outcome.found_on_refresh == (fault == "500-after")
    if fault == "slow-after":
        assert server.idempotency.replayed == 1
    time.sleep(service.sleep_s if fault == "slow-before" else 0)  # let a late one arrive
    direct = Table.load(shared, ("db", "events"))
    assert len(direct.metadata.snapshots) == 1
    assert outcome.metadata_location == direct.metadata_location
    assert ALL_READERS["duckdb"](direct.metadata_location, COLUMNS) == rows_as_tuples(batch)


def test_a_lost_reply_is_read_back_from_a_server_without_idempotency_keys(sqlite_catalog):
    service = FaultyService(sqlite_catalog)
    server = RestCatalogServer(
        service, "127.0.0.1", 0, insecure=True, idempotency_lifetime_s=None
    ).start()
    try:
        rest = _rest(server, timeout_s=1.0)
        assert rest.idempotency_lifetime_s is None
        table = make_table(rest)
        files = write_partitioned(table, [row(i) for i in range(4)])
        service.sleep_s = 2.0
        service.faults.append("slow-after")
        outcome = table.commit(FastAppend(tuple(f for f, _ in files)))
        assert isinstance(outcome, Committed) and outcome.found_on_refresh
        assert len(Table.load(sqlite_catalog, ("db", "events")).metadata.snapshots) == 1
    finally:
        server.stop()


def test_unreachable_server_is_unavailable():
    with pytest.raises(CatalogUnavailableError, match="GET v1/config"):
        RestCatalog("gone", "http://127.0.0.1:9", timeout_s=2.0)


class _Garbage(threading.Thread):
    """A server answering every request with 200 and a body that is not JSON."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, HTTPServer

        class Handler(BaseHTTPRequestHandler):
            def _reply(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Length", "9")
                self.end_headers()
                self.wfile.write(b"<html>oops")

            do_GET = do_POST = _reply

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        super().__init__(target=self.httpd.serve_forever, daemon=True)


def test_malformed_replies_and_bad_tokens():
    from calving.commit.catalog.rest.transport import RestTransport
    from calving.commit.errors import CatalogError, CommitStateUnknownError

    garbage = _Garbage()
    garbage.start()
    try:
        url = f"http://127.0.0.1:{garbage.httpd.server_address[1]}"
        with pytest.raises(CatalogError, match="not JSON"):
            RestCatalog("bad", url)
        with pytest.raises(CommitStateUnknownError, match="may have landed"):
            RestTransport(url).request("POST", "v1/namespaces/db/tables/t", {}, commit=True)
    finally:
        garbage.httpd.shutdown()
        garbage.httpd.server_close()


def test_a_wrong_token_is_refused_without_showing_it(sqlite_catalog):
    server = RestCatalogServer(
        CatalogService(sqlite_catalog), "127.0.0.1", 0, token="right"
    ).start()
    try:
        from calving.commit.errors import CatalogError

        with pytest.raises(CatalogError, match="401 NotAuthorizedException") as info:
            RestCatalog("r", server.url, token="wrong-secret")
        assert "wrong-secret" not in str(info.value)
        assert RestCatalog("r", server.url, token="right").list_namespaces() == [("db",)]
    finally:
        server.stop()
