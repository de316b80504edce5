"""Schema Registry client against a tiny registry on 127.0.0.1; schema directories."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from calving.commit.errors import ConfigError
from calving.ingest.decode.schema_registry import (
    LocalSchemaDirectory,
    SchemaNotFoundError,
    SchemaRegistryClient,
    SchemaRegistryUnavailableError,
    open_schema_source,
)

SCHEMA = json.dumps({"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}]})


class _Registry:
    """Serves /schemas/ids/{id}; ``fail_next`` answers 503 that many times first."""

    def __init__(self) -> None:
        self.schemas = {1: SCHEMA}
        self.fail_next = 0
        self.always_fail = False
        self.requests: list[tuple[str, str | None]] = []
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                registry.requests.append((self.path, self.headers.get("Authorization")))
                if registry.always_fail or registry.fail_next > 0:
                    registry.fail_next -= 1
                    self.send_response(503)
                    self.end_headers()
                    return
                sid = int(self.path.rsplit("/", 1)[-1])
                if sid not in registry.schemas:
                    body = json.dumps({"error_code": 40403, "message": "Schema not found"}).encode()
                    self.send_response(404)
                else:
                    body = json.dumps({"schema": registry.schemas[sid]}).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def registry():
    r = _Registry()
    yield r
    r.close()


def client(url: str, **kw) -> SchemaRegistryClient:
    return SchemaRegistryClient(url, timeout_s=2.0, backoff_s=0.01, **kw)


def test_fetches_and_caches_per_id(registry):
    c = client(registry.url)
    assert c.schema_text(1) == SCHEMA
    assert c.schema_text(1) == SCHEMA
    assert [p for p, _ in registry.requests] == ["/schemas/ids/1"]


def test_transient_503_is_retried(registry):
    registry.fail_next = 2
    c = client(registry.url)
    assert c.schema_text(1) == SCHEMA
    assert len(registry.requests) == 3 and c.requests_made == 3


def test_persistent_failure_is_transient_error(registry):
    registry.always_fail = True
    c = client(registry.url, max_attempts=3)
    with pytest.raises(SchemaRegistryUnavailableError, match="after 3 attempts") as info:
        c.schema_text(1)
    assert info.value.retryable


def test_unknown_id_is_not_found_without_retry(registry):
    c = client(registry.url)
    with pytest.raises(SchemaNotFoundError, match="schema id 7"):
        c.schema_text(7)
    assert len(registry.requests) == 1


def test_unreachable_registry_is_transient():
    c = client("http://127.0.0.1:9", max_attempts=2)
    with pytest.raises(SchemaRegistryUnavailableError):
        c.schema_text(1)


def test_basic_auth_from_environment_only(registry, monkeypatch):
    monkeypatch.setenv("CALVING_SCHEMA_REGISTRY_USERNAME", "svc")
    monkeypatch.setenv("CALVING_SCHEMA_REGISTRY_PASSWORD", "s3cret")
    c = client(registry.url)
    c.schema_text(1)
    assert registry.requests[0][1] == "Basic " + base64.b64encode(b"svc:s3cret").decode()
    registry.always_fail = True
    with pytest.raises(SchemaRegistryUnavailableError) as info:
        client(registry.url, max_attempts=1).schema_text(2)
    assert "s3cret" not in str(info.value)
    with pytest.raises(ConfigError, match="must not carry credentials"):
        SchemaRegistryClient("http://user:pw@127.0.0.1:1")


def test_pickled_client_starts_with_an_empty_cache(registry):
    import pickle

    c = client(registry.url)
    c.schema_text(1)
    copy = pickle.loads(pickle.dumps(c))
    copy.schema_text(1)
    assert len(registry.requests) == 2


def test_local_directory(tmp_path):
    (tmp_path / "5.avsc").write_text(SCHEMA)
    d = open_schema_source(str(tmp_path))
    assert isinstance(d, LocalSchemaDirectory)
    assert d.schema_text(5) == SCHEMA
    with pytest.raises(SchemaNotFoundError, match="6.avsc"):
        d.schema_text(6)
    with pytest.raises(ConfigError):
        LocalSchemaDirectory(tmp_path / "missing")
