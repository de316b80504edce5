"""A REST catalog from the pipeline config or ``--catalog`` outside the streaming path:
startup errors (a server answering nonsense, refusing the token, forbidding access) are
one line naming ``table.catalog`` without the secret; credential-bearing headers come
only from the environment and are masked; ``calving table show`` / ``set-property``
take ``--catalog rest+http://...``; ``calving catalog serve --config`` refuses a REST
catalog config. Real HTTP servers on loopback ports (calving's and a stub)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from calving.commit.errors import CatalogUnavailableError, ConfigError
from calving.commit.table.table import Table
from calving.ingest.catalogs import open_catalog
from calving.ingest.cli import main
from calving.ingest.config.loader import parse_config
from tests.commit.catalog.rest.conftest import start_server
from tests.support.tables import make_table

pytestmark = pytest.mark.integration

SECRET = "t0ken-Qw8Zr3"
SERVER_TOKEN = "server-t0ken-Lp2Vx6"


def _config(catalog: dict[str, Any], environ: dict[str, str], tmp_path: Path) -> Any:
    doc = {
        "source": {"bootstrap_servers": "127.0.0.1:9", "topics": ["t"]},
        "format": {"type": "json"},
        "table": {"catalog": catalog, "name": "db.t", "columns": [{"name": "id", "type": "long"}]},
        "sink": {"writer_id": "w", "checkpoint": str(tmp_path / "ckpt")},
    }
    return parse_config(doc, "pipeline.toml", environ=environ)


@pytest.fixture
def stub() -> Iterator[tuple[str, list[tuple[int, bytes]]]]:
    """An HTTP server answering every GET with the (status, body) last put in the list."""
    answers: list[tuple[int, bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = answers[-1]
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answers
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (200, b"<html>not json</html>"),
        (200, b'{"defaults": 5, "overrides": []}'),
        (200, b"[1, 2]"),
        (403, b'{"error": {"message": "forbidden", "type": "ForbiddenException", "code": 403}}'),
        (401, b'{"error": {"message": "bad token", "type": "NotAuthorizedException", "code": 401}}'),
    ],
)  # fmt: skip
def test_a_config_answer_that_is_not_usable_is_one_line_naming_table_catalog(
    stub, tmp_path, status, body
):
    url, answers = stub
    answers.append((status, body))
    config = _config({"type": "rest", "uri": url, "token": "${env:T}"}, {"T": SECRET}, tmp_path)
    with pytest.raises(ConfigError) as info:
        open_catalog(config.table)
    message = str(info.value)
    assert message.startswith(f"table.catalog: REST catalog {url}"), message
    assert "\n" not in message and SECRET not in message


def test_a_server_error_on_config_is_unavailable_naming_table_catalog_and_uri(stub, tmp_path):
    url, answers = stub
    answers.append((503, b"down for maintenance"))
    config = _config({"type": "rest", "uri": url, "token": "${env:T}"}, {"T": SECRET}, tmp_path)
    with pytest.raises(CatalogUnavailableError) as info:
        open_catalog(config.table)
    message = str(info.value)
    assert message.startswith(f"table.catalog: REST catalog {url} unavailable: "), message
    assert "\n" not in message and SECRET not in message


def test_a_refused_static_token_is_one_line_without_the_token(sqlite_catalog, tmp_path):
    server = start_server(sqlite_catalog, token=SERVER_TOKEN)
    try:
        wrong = _config(
            {"type": "rest", "uri": server.url, "token": "${env:T}"}, {"T": SECRET}, tmp_path
        )
        with pytest.raises(ConfigError) as info:
            open_catalog(wrong.table)
        message = str(info.value)
        assert message.startswith("table.catalog: REST catalog") and "401" in message, message
        assert SECRET not in message and SERVER_TOKEN not in message and "\n" not in message
        right = _config(
            {"type": "rest", "uri": server.url, "token": "${env:T}"},
            {"T": SERVER_TOKEN},
            tmp_path,
        )
        assert open_catalog(right.table).list_namespaces() == [("db",)]
    finally:
        server.stop()


def test_credential_headers_come_only_from_the_environment_and_are_masked(sqlite_catalog, tmp_path):
    literal = {"type": "rest", "uri": "http://h", "headers": {"Authorization": f"Bearer {SECRET}"}}
    with pytest.raises(ConfigError) as info:
        _config(literal, {}, tmp_path)
    assert str(info.value).startswith("pipeline.toml: table.catalog.headers.Authorization: ")
    assert SECRET not in str(info.value)
    # From the environment, the header authenticates and never shows in the config's repr.
    server = start_server(sqlite_catalog, token=SERVER_TOKEN)
    try:
        headers = {"Authorization": "${env:H}", "X-Trace": "calving-test"}
        config = _config(
            {"type": "rest", "uri": server.url, "headers": headers},
            {"H": f"Bearer {SERVER_TOKEN}"},
            tmp_path,
        )
        shown = repr(config) + repr(config.table) + repr(config.table.rest)
        assert SERVER_TOKEN not in shown and "calving-test" in shown
        assert open_catalog(config.table).list_namespaces() == [("db",)]
    finally:
        server.stop()


def test_table_show_and_set_property_take_a_rest_catalog_uri(sqlite_catalog, capsys):
    make_table(sqlite_catalog)
    server = start_server(sqlite_catalog)
    try:
        uri = f"rest+{server.url}"
        assert main(["table", "show", "db.events", "--catalog", uri]) == 0
        assert "db.events" in capsys.readouterr().out
        changed = main(
            [
                "table",
                "set-property",
                "db.events",
                "commit.retry.num-retries",
                "7",
                "--catalog",
                uri,
            ]
        )
        assert changed == 0, capsys.readouterr().err
        table = Table.load(sqlite_catalog, ("db", "events"), sqlite_catalog.io)
        assert table.metadata.properties["commit.retry.num-retries"] == "7"
        assert main(["table", "show", "db.events", "--catalog", "rest+http://u:pw@h:1"]) == 2
        err = capsys.readouterr().err
        assert "--catalog: expected rest+http://host:port/path" in err and "pw" not in err
    finally:
        server.stop()


def test_catalog_serve_refuses_a_rest_catalog_config(tmp_path, capsys):
    config = tmp_path / "pipeline.toml"
    config.write_text(
        "[source]\n"
        'bootstrap_servers = "127.0.0.1:9"\n'
        'topics = ["t"]\n'
        "[format]\n"
        'type = "json"\n'
        "[table]\n"
        'catalog = "rest+http://127.0.0.1:9/api"\n'
        'name = "db.t"\n'
        'columns = [ { name = "id", type = "long" } ]\n'
        "[sink]\n"
        'writer_id = "w"\n'
        f'checkpoint = "{tmp_path}/ckpt"\n'
    )
    assert main(["catalog", "serve", "--config", str(config), "--port", "0", "--insecure"]) == 2
    err = capsys.readouterr().err
    assert "table.catalog: calving catalog serve needs a SQL catalog" in err, err
