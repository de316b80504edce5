"""OAuth2 client credentials against ``calving catalog serve``'s token endpoint: tokens
fetched and refreshed, a token the server expired early is replaced after the 401 and the
refused commit is sent once more (it was never applied), a wrong credential is a one-line
error that never shows the secret."""

from __future__ import annotations

import pytest

from calving.commit.catalog.rest.client import RestCatalog
from calving.commit.errors import CatalogError
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.committer import Committed
from calving.commit.table.table import Table
from calving.ingest.serve.server import RestCatalogServer
from calving.ingest.serve.service import CatalogService
from calving.ingest.serve.tokens import TokenIssuer
from tests.support.tables import make_table, row, write_partitioned

pytestmark = pytest.mark.integration

SECRET = "s3cr3t-Value-81"
CREDENTIAL = f"calving-client:{SECRET}"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def oauth_server(sqlite_catalog):
    clock = Clock()
    issuer = TokenIssuer(CREDENTIAL, ttl_s=600, clock=clock)
    server = RestCatalogServer(CatalogService(sqlite_catalog), "127.0.0.1", 0, issuer=issuer)
    server.start()
    yield server, clock
    server.stop()


def test_credential_gets_a_token_and_commits(oauth_server, sqlite_catalog):
    server, _ = oauth_server
    rest = RestCatalog("rest", server.url, credential=CREDENTIAL, scope="catalog")
    table = make_table(rest)
    files = tuple(f for f, _ in write_partitioned(table, [row(1), row(2)]))
    assert isinstance(table.commit(FastAppend(files)), Committed)
    assert rest.http.auth.fetched == 1  # one token for every request so far
    assert len(Table.load(sqlite_catalog, table.ident).metadata.snapshots) == 1
    assert SECRET not in repr(rest) and SECRET not in repr(rest.http)


def test_a_token_expired_by_the_server_is_replaced_and_the_commit_lands_once(
    oauth_server, sqlite_catalog
):
    server, clock = oauth_server
    rest = RestCatalog("rest", server.url, credential=CREDENTIAL)
    table = make_table(rest)
    files = tuple(f for f, _ in write_partitioned(table, [row(3)]))
    clock.now += 601  # the server's clock says the token expired; the client's does not
    outcome = table.commit(FastAppend(files))
    assert isinstance(outcome, Committed) and not outcome.found_on_refresh
    assert rest.http.auth.fetched == 2  # refreshed once after the 401
    assert len(Table.load(sqlite_catalog, table.ident).metadata.snapshots) == 1


def test_the_client_refreshes_before_expiry(oauth_server):
    server, _ = oauth_server
    rest = RestCatalog("rest", server.url, credential=CREDENTIAL)
    auth = rest.http.auth
    auth._clock = lambda: 1e9  # far past the token's lifetime (600 s, refreshed at 540 s)
    rest.list_namespaces()
    assert auth.fetched == 2


@pytest.mark.parametrize("credential", [f"calving-client:wrong-{SECRET}", f"intruder:{SECRET}"])
def test_a_wrong_credential_is_one_line_without_the_secret(oauth_server, credential):
    server, _ = oauth_server
    with pytest.raises(CatalogError) as info:
        RestCatalog("rest", server.url, credential=credential)
    message = str(info.value)
    assert "invalid_client" in message and "/v1/oauth/tokens" in message
    assert SECRET not in message and "\n" not in message


def test_a_static_token_server_refuses_issued_credentials(sqlite_catalog):
    server = RestCatalogServer(CatalogService(sqlite_catalog), "127.0.0.1", 0, token="t0k")
    server.start()
    try:
        with pytest.raises(CatalogError, match="check the catalog token"):
            RestCatalog("rest", server.url, token="other")
        assert RestCatalog("rest", server.url, token="t0k").list_namespaces() == [("db",)]
    finally:
        server.stop()
