"""``calving catalog serve`` probed as a hostile client would, on loopback: every defect
of issue 21 as a test against the running command (numbers below are the issue's), plus
DuckDB's own OAuth2 login. Loops are bounded; nothing here waits more than a few
seconds for an answer."""

from __future__ import annotations

import socket
import time
import urllib.parse

import pytest

from tests.ingest.serve.conftest import (
    CLIENT_ID,
    CLIENT_SECRET,
    HEADER_TIMEOUT_S,
    TOKEN,
    Served,
    basic,
    raw_exchange,
    table_body,
)

pytestmark = pytest.mark.integration

TABLES = "/v1/namespaces/db/tables"


def _assert_client_error(status: int, body: object, served: Served) -> None:
    assert 400 <= status < 500, (status, body)
    text = str(body)
    assert str(served.warehouse) not in text and "Traceback" not in text


# ---------------------------------------------------------------- 1. names escape


@pytest.mark.parametrize(
    "name",
    ["../../../escaped_by_name", "..", ".", "a/b", "x\x00y", "new\nline", "x" * 10_000, "a\\b"],
)
def test_1_a_table_name_cannot_escape_the_warehouse(served, name):
    status, _, body = served.request("POST", TABLES, table_body(name))
    _assert_client_error(status, body, served)
    assert served.files_outside_warehouse() == []


@pytest.mark.parametrize("part", ["a/b", "x\x00", "line\nbreak", "unit\x1fsep", "..", "a.b", ""])
def test_1_namespace_parts_are_confined(served, part):
    status, _, body = served.request("POST", "/v1/namespaces", {"namespace": [part]})
    _assert_client_error(status, body, served)
    status, _, body = served.request("GET", "/v1/namespaces")
    assert [part] not in body["namespaces"]


def test_1_a_nested_namespace_name_cannot_escape(served):
    path = "/v1/namespaces/" + urllib.parse.quote("a/b", safe="") + "/tables"
    status, _, body = served.request("POST", path, table_body("../../../../x"))
    _assert_client_error(status, body, served)
    assert served.files_outside_warehouse() == []


@pytest.mark.parametrize(
    ("key", "where"),
    [
        ("location", "/tmp/calving-hostile-outside"),
        ("location", "{warehouse}/../outside"),
        ("location", "{warehouse}/db/%2e%2e/%2e%2e/outside"),
        ("location", "file:///etc"),
        ("write.metadata.path", "/tmp/calving-hostile-meta"),
        ("write.metadata.path", "{warehouse}/db/../../m"),
    ],
)
def test_1_explicit_locations_must_lie_in_the_warehouse(served, key, where):
    where = where.replace("{warehouse}", str(served.warehouse))
    extra = {"location": where} if key == "location" else {"properties": {key: where}}
    body = table_body("located", **extra)
    status, _, answer = served.request("POST", TABLES, body)
    _assert_client_error(status, answer, served)
    assert served.files_outside_warehouse() == []
    assert served.request("GET", f"{TABLES}/located")[0] == 404


def test_1_a_namespace_location_outside_the_warehouse_is_refused(served):
    body = {"namespace": ["elsewhere"], "properties": {"location": str(served.root / "out")}}
    status, _, answer = served.request("POST", "/v1/namespaces", body)
    _assert_client_error(status, answer, served)
    inside = {"namespace": ["inside"], "properties": {"location": f"{served.warehouse}/in"}}
    assert served.request("POST", "/v1/namespaces", inside)[0] == 200
    status, _, answer = served.request("POST", "/v1/namespaces/inside/tables", table_body("t"))
    assert status == 200, answer
    assert answer["metadata-location"].startswith(f"file://{served.warehouse}/in/t/metadata/")


def test_1_a_namespace_location_cannot_be_moved_out_by_a_property_update(served):
    assert served.request("POST", "/v1/namespaces", {"namespace": ["movable"]})[0] == 200
    path = "/v1/namespaces/movable/properties"
    body = {"updates": {"location": str(served.root / "out")}}
    status, _, answer = served.request("POST", path, body)
    _assert_client_error(status, answer, served)
    both = {"updates": {"k": "v"}, "removals": ["k"]}
    status, _, answer = served.request("POST", path, both)
    assert status == 422, answer
    status, _, answer = served.request("POST", path, {"updates": {"k": "v"}, "removals": ["gone"]})
    assert (status, answer) == (200, {"updated": ["k"], "removed": [], "missing": ["gone"]})
    status, _, answer = served.request("GET", "/v1/namespaces/movable")
    assert answer["properties"] == {"k": "v"}


def test_1_a_commit_cannot_move_the_table_or_its_metadata_out(served):
    status, _, created = served.request("POST", TABLES, table_body("mover"))
    assert status == 200, created
    before = created["metadata-location"]
    for update in (
        {"action": "set-location", "location": "/tmp/calving-hostile-moved"},
        {"action": "set-properties", "updates": {"write.metadata.path": "/tmp/calving-h-m"}},
    ):
        status, _, body = served.request(
            "POST", f"{TABLES}/mover", {"requirements": [], "updates": [update]}
        )
        _assert_client_error(status, body, served)
    assert served.request("GET", f"{TABLES}/mover")[2]["metadata-location"] == before
    assert served.files_outside_warehouse() == []


# ---------------------------------------------------------------- 3. body before token


def test_3_an_unauthenticated_body_is_not_read(served):
    """Four unauthenticated 60 MB bodies: each is answered 401 from the headers and the
    connection closed, so the server's memory does not grow by what was sent."""
    before = served.rss_kib()
    chunk = b"x" * (1024 * 1024)
    for _ in range(4):
        sock = socket.create_connection((served.host, served.port), timeout=10)
        head = (
            f"POST {TABLES} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {60 * 1024 * 1024}\r\n\r\n"
        )
        sent = 0
        try:
            sock.sendall(head.encode())
            while sent < 60:
                sock.sendall(chunk)
                sent += 1
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            answer = sock.recv(4096)
        except ConnectionResetError:
            answer = b""
        sock.close()
        assert sent < 60 or answer.startswith(b"HTTP/1.1 401"), sent
    assert served.rss_kib() - before < 40 * 1024


def test_3_half_sent_requests_do_not_hold_the_server(served):
    socks = []
    for _ in range(50):
        sock = socket.create_connection((served.host, served.port), timeout=10)
        sock.sendall(b"POST /v1/namespaces HTTP/1.1\r\nHost: x\r\n")
        socks.append(sock)
    time.sleep(HEADER_TIMEOUT_S + 2)
    closed = 0
    for sock in socks:
        sock.settimeout(2)
        try:
            closed += sock.recv(1) == b""
        except TimeoutError:
            pass
        except ConnectionResetError:
            closed += 1
        sock.close()
    assert closed == 50
    assert served.request("GET", "/v1/config")[0] == 200


@pytest.mark.parametrize("length", ["-1", "abc", "1e3", "99999999999999999999999"])
def test_3_6_a_bad_content_length_is_a_400(served, length):
    head = (
        f"POST {TABLES} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    )
    started = time.monotonic()
    answer = raw_exchange(served, head.encode())
    assert answer.split(b" ", 2)[1:2] in ([b"400"], [b"413"]), answer[:200]
    assert time.monotonic() - started < 4


def test_3_a_slow_body_is_cut_off(served):
    head = (
        f"POST /v1/namespaces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    )
    answer = raw_exchange(served, head.encode(), read_s=10)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]


# ---------------------------------------------------------------- 4. smuggling


def test_4_a_request_hidden_in_an_oversized_body_is_never_answered(served):
    hidden = f"GET /v1/config HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    head = (
        f"POST {TABLES} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {1 << 30}\r\n\r\n"
    )
    answer = raw_exchange(served, (head + hidden).encode())
    assert answer.count(b"HTTP/1.1 ") == 1, answer[:400]
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_4_chunked_bodies_are_read_as_bodies(served):
    body = b'{"namespace": ["chunked"]}'
    head = (
        f"POST /v1/namespaces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:10], body[10:]))
    answer = raw_exchange(served, head + chunks + b"0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    assert served.request("GET", "/v1/namespaces/chunked")[0] == 200


def test_4_keep_alive_serves_several_requests_on_one_connection(served):
    one = f"GET /v1/config HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    last = one.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n")
    answer = raw_exchange(served, (one * 2 + last).encode())
    assert answer.count(b"HTTP/1.1 200") == 3, answer[:400]


# ---------------------------------------------------------------- 5. register-table


@pytest.mark.parametrize(
    "location",
    ["/etc/passwd", "/no/such/dir/00000-x.metadata.json", "{warehouse}/db/nothing.metadata.json"],
)
def test_5_register_table_reads_no_file_outside_and_says_nothing(served, location):
    location = location.replace("{warehouse}", str(served.warehouse))
    body = {"name": "stolen", "metadata-location": location}
    status, _, answer = served.request("POST", "/v1/namespaces/db/register", body)
    _assert_client_error(status, answer, served)
    message = answer["error"]["message"]
    assert "passwd" not in message and "root:" not in message and "no such" not in message
    assert message == (
        "metadata-location must name a table metadata file (*.metadata.json) under the "
        "locations this catalog may use"
    )


# ---------------------------------------------------------------- 6. client errors


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"namespace": ["db2"], "n": ' + b"9" * 5000 + b"}",
        b'{"namespace": ["nan"], "properties": {"x": NaN}}',
        b"\xff\xfe not utf-8",
        b'{"namespace": "not a list"}',
    ],
)
def test_6_malformed_json_is_a_400(served, raw):
    status, _, body = served.request(
        "POST", "/v1/namespaces", raw=raw, headers={"Content-Type": "application/json"}
    )
    assert status == 400, body
    assert body["error"]["type"] == "BadRequestException"


def test_6_non_ascii_credentials_are_refused_cleanly(served):
    head = (
        b"GET /v1/config HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        + b"Authorization: Bearer t\xc3\xb6ken\xff\r\n\r\n"
    )
    assert raw_exchange(served, head).startswith(b"HTTP/1.1 401")
    form = urllib.parse.urlencode(
        {"grant_type": "client_credentials", "client_id": "d\u00fcck", "client_secret": "s\u00e9"}
    )
    status, _, body = served.request(
        "POST",
        "/v1/oauth/tokens",
        raw=form.encode(),
        token=None,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 401 and body["error"] == "invalid_client"


def test_6_a_long_table_name_is_a_400_without_paths(served):
    status, _, body = served.request("POST", TABLES, table_body("n" * 10_000))
    _assert_client_error(status, body, served)
    assert len(body["error"]["message"]) < 600


def test_6_5xx_answers_carry_a_request_id(served):
    status, headers, _ = served.request("GET", "/v1/namespaces/db/tables/missing")
    assert status == 404 and len(headers["x-request-id"]) >= 8


# ---------------------------------------------------------------- 7. token endpoint


def _token(
    served: Served, form: dict[str, str], auth: str | None = None, source: str = "127.0.0.1"
) -> tuple[int, dict]:
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if auth:
        headers["Authorization"] = auth
    status, _, body = served.request(
        "POST",
        "/v1/oauth/tokens",
        raw=urllib.parse.urlencode(form).encode(),
        token=None,
        headers=headers,
        source=source,
    )
    return status, body


def test_7_http_basic_client_authentication_gets_a_token(served):
    form = {"grant_type": "client_credentials", "scope": "catalog"}
    status, body = _token(served, form, basic(CLIENT_ID, CLIENT_SECRET))
    assert status == 200, body
    status, _, _ = served.request("GET", "/v1/config", token=body["access_token"])
    assert status == 200
    both = {**form, "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}
    status, _ = _token(served, both, basic(CLIENT_ID, CLIENT_SECRET))
    assert status == 400  # two sets of credentials


def test_7_wrong_secrets_are_slowed_down(served):
    """From another loopback address (127.0.0.2), so the other tests are not locked out."""
    form = {"grant_type": "client_credentials"}
    guesses = [basic(CLIENT_ID, f"guess-{i}") for i in range(8)]
    statuses = [_token(served, form, g, source="127.0.0.2")[0] for g in guesses]
    assert statuses[:3] == [401, 401, 401]
    assert 429 in statuses, statuses
    right = basic(CLIENT_ID, CLIENT_SECRET)
    assert _token(served, form, right, source="127.0.0.2")[0] == 429  # not even looked at
    assert _token(served, form, right)[0] == 200  # another address is not affected


def test_7_duckdb_logs_in_with_its_own_oauth2_client(served):
    from tests.commit.catalog.rest.conftest import duckdb_rest_connection

    status, _, _ = served.request("POST", TABLES, table_body("for_duck"))
    assert status in (200, 409)
    con = duckdb_rest_connection()
    con.execute(
        f"CREATE SECRET duck_oauth (TYPE iceberg, CLIENT_ID '{CLIENT_ID}', "
        f"CLIENT_SECRET '{CLIENT_SECRET}', OAUTH2_SERVER_URI '{served.url}/v1/oauth/tokens')"
    )
    con.execute(f"ATTACH '' AS lake (TYPE iceberg, ENDPOINT '{served.url}', SECRET duck_oauth)")
    names = {row[0] for row in con.execute("SHOW ALL TABLES").fetchall()} | {
        row[2] for row in con.execute("SHOW ALL TABLES").fetchall()
    }
    assert "for_duck" in names
    assert con.execute("SELECT count(*) FROM lake.db.for_duck").fetchone() == (0,)


# ---------------------------------------------------------------- 8. Content-Type


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_8_a_body_must_be_declared_json(served, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    status, _, body = served.request(
        "POST", "/v1/namespaces", raw=b'{"namespace": ["typed"]}', headers=headers
    )
    assert status == 415, body
    assert served.request("GET", "/v1/namespaces/typed")[0] == 404
