"""The HTTP layer of ``calving catalog serve``: routing, bearer token, JSON, logging.

Standard library only (``ThreadingHTTPServer``, one thread per connection). Routes
are the spec's, with or without the configured ``{prefix}``; a namespace in a path is
its parts joined by the unit separator (``%1F``). Every request is logged as
``METHOD path status ms`` (never a header, so never a credential).
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from calving.commit.catalog.base import Namespace
from calving.commit.catalog.rest.errors import RestError, bad_request, rest_error_of
from calving.commit.catalog.rest.service import CatalogService
from calving.commit.catalog.rest.tokens import OAuthError, TokenIssuer
from calving.commit.catalog.rest.transaction import commit_transaction

log = logging.getLogger("calving.rest")

NAMESPACE_SEPARATOR = "\x1f"
MAX_BODY_BYTES = 64 * 1024 * 1024
_ROOTS = ("config", "namespaces", "tables", "transactions")
TOKENS_PATH = "/v1/oauth/tokens"

Answer = tuple[int, Any]  # (status, JSON body or None)


def _no_content(call: Callable[[], object]) -> Answer:
    call()
    return 204, None


def _namespace(segment: str) -> Namespace:
    return tuple(segment.split(NAMESPACE_SEPARATOR))


class Router:
    """(method, path segments after ``/v1``, query, body) -> (status, JSON)."""

    def __init__(self, service: CatalogService, prefix: str | None = None) -> None:
        self.service = service
        self.prefix = prefix

    def config(self) -> dict[str, Any]:
        answer = self.service.config()
        if self.prefix:
            answer["overrides"]["prefix"] = self.prefix
        return answer

    def route(self, method: str, parts: list[str], query: dict[str, str], body: Any) -> Answer:
        if parts == ["config"] and method == "GET":
            return 200, self.config()
        if parts and parts[0] not in _ROOTS and parts[0] == self.prefix:
            parts = parts[1:]
        handler = self._match(method, parts, query)
        if handler is None:
            raise RestError(
                404, "NotFoundException", f"no route for {method} /v1/{'/'.join(parts)}"
            )
        return handler(body)

    def _match(
        self, method: str, parts: list[str], query: dict[str, str]
    ) -> Callable[[Any], Answer] | None:
        s = self.service
        n = len(parts)
        if parts == ["namespaces"]:
            parent = _namespace(query["parent"]) if query.get("parent") else ()
            return {
                "GET": lambda b: (200, s.list_namespaces(parent)),
                "POST": lambda b: (200, s.create_namespace(b)),
            }.get(method)
        if parts == ["transactions", "commit"] and method == "POST":
            return lambda b: _no_content(partial(commit_transaction, s, b))
        if parts == ["tables", "rename"] and method == "POST":
            return lambda b: _no_content(partial(self._rename, b))
        if n < 2 or parts[0] != "namespaces":
            return None
        ns = _namespace(parts[1])
        if n == 2:
            return {
                "GET": lambda b: (200, s.load_namespace(ns)),
                "HEAD": lambda b: _no_content(partial(s.load_namespace, ns)),
                "DELETE": lambda b: _no_content(partial(s.drop_namespace, ns)),
            }.get(method)
        if n == 3 and parts[2] == "tables":
            return {
                "GET": lambda b: (200, s.list_tables(ns)),
                "POST": lambda b: (200, s.create_table(ns, b)),
            }.get(method)
        if n == 3 and parts[2] == "register" and method == "POST":
            return lambda b: (200, s.register_table(ns, b))
        if n == 4 and parts[2] == "tables":
            ident = (*ns, parts[3])
            purge = query.get("purgeRequested", "false").lower() == "true"
            return {
                "GET": lambda b: (200, s.load_table(ident)),
                "HEAD": lambda b: _no_content(partial(s.table_exists, ident)),
                "POST": lambda b: (200, s.commit_table(ident, b)),
                "DELETE": lambda b: _no_content(partial(s.drop_table, ident, purge)),
            }.get(method)
        return None

    def _rename(self, body: Any) -> None:
        try:
            src, dst = body["source"], body["destination"]
            source = (*(str(p) for p in src["namespace"]), str(src["name"]))
            destination = (*(str(p) for p in dst["namespace"]), str(dst["name"]))
        except (KeyError, TypeError) as exc:
            raise bad_request(f"RenameTableRequest: missing or malformed {exc}") from None
        self.service.catalog.rename_table(source, destination)


class _Handler(BaseHTTPRequestHandler):
    server: RestCatalogServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are logged by _handle, without headers

    def _handle(self, method: str) -> None:
        started = time.monotonic()
        url = urllib.parse.urlsplit(self.path)
        try:
            status, answer = self._answer(method, url)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an error model answer
            error = rest_error_of(exc)
            if error.status >= 500:
                log.warning("%s %s failed: %s", method, url.path, error.message)
            status, answer = error.status, error.body()
        elapsed_ms = (time.monotonic() - started) * 1000
        # Logged before the reply is written: a client that has its answer finds the line.
        log.info("%s %s %d %.1f ms", method, url.path, status, elapsed_ms)
        try:
            self._send(method, status, answer)
        except (BrokenPipeError, ConnectionResetError):
            log.info("%s %s: the client went away before the reply", method, url.path)

    def _answer(self, method: str, url: urllib.parse.SplitResult) -> Answer:
        issuer = self.server.issuer
        if issuer is not None and method == "POST" and url.path.rstrip("/") == TOKENS_PATH:
            return self._issue(issuer)
        body = self._read_body()
        if not self._authorized():
            raise RestError(401, "NotAuthorizedException", "missing, wrong or expired token")
        segments = url.path.strip("/").split("/")
        if not segments or segments[0] != "v1":
            raise RestError(404, "NotFoundException", "paths start with /v1/")
        parts = [urllib.parse.unquote(p) for p in segments[1:]]
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        return self.server.router.route(method, parts, query, body)

    def _authorized(self) -> bool:
        token, issuer = self.server.token, self.server.issuer
        if token is None and issuer is None:
            return True
        header = self.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer":
            return False
        value = value.strip()
        if token is not None and hmac.compare_digest(value, token):
            return True
        return issuer is not None and issuer.valid(value)

    def _issue(self, issuer: TokenIssuer) -> Answer:
        """``POST /v1/oauth/tokens``: a form body, an OAuth2 answer."""
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise bad_request(f"request body of {length} bytes is too large")
        text = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        form = dict(urllib.parse.parse_qsl(text, keep_blank_values=True))
        try:
            return 200, issuer.issue(form)
        except OAuthError as exc:
            return exc.status, exc.body()

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise bad_request(f"request body of {length} bytes is too large")
        if length == 0:
            return None
        raw = self.rfile.read(length)
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise bad_request(f"request body is not JSON: {exc}") from None

    def _send(self, method: str, status: int, answer: Any) -> None:
        data = b"" if answer is None else json.dumps(answer).encode("utf-8")
        if status == 204:
            data = b""
        self.send_response(status)
        if data:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if method != "HEAD" and data:
            self.wfile.write(data)


class RestCatalogServer(ThreadingHTTPServer):
    """``RestCatalogServer(service, "127.0.0.1", 0).start()``; ``url`` is where it
    listens (port 0 takes a free one)."""

    daemon_threads = True

    def __init__(
        self,
        service: CatalogService,
        host: str = "127.0.0.1",
        port: int = 8181,
        *,
        token: str | None = None,
        prefix: str | None = None,
        issuer: TokenIssuer | None = None,
    ) -> None:
        super().__init__((host, port), _Handler)
        self.router = Router(service, prefix)
        self.token = token
        #: OAuth2 client credentials (``POST /v1/oauth/tokens``); tokens it issued are
        #: accepted as bearer tokens until they expire.
        self.issuer = issuer
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> RestCatalogServer:
        """Serve in a daemon thread; ``stop`` ends it."""
        self._thread = threading.Thread(target=self.serve_forever, name="calving-rest", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
