"""The ASGI application of ``calving catalog serve`` (Starlette), in the order a request
meets it:

1. ``Guard`` (pure ASGI, before any body byte is read): a request id; the bearer token
   from the ``Authorization`` header (401 otherwise; ``/v1/oauth/tokens`` excepted); a
   declared ``Content-Length`` over the cap is 413; a body must be declared
   ``application/json`` (the token endpoint: ``application/x-www-form-urlencoded``), else
   415. Every refusal before the body is read closes the connection, so unread body
   bytes are never taken for a request.
2. The body, read in chunks (``Content-Length`` or chunked) with a running cap (413) and
   a timeout for each chunk (408).
3. JSON checks: valid UTF-8 JSON without NaN or Infinity, at most ``MAX_JSON_DEPTH``
   levels deep (400).
4. ``Idempotency-Key`` on mutations (``idempotency``), then routing to the
   ``CatalogService`` in a worker thread (the SQL catalog and file I/O block).

Every error is the protocol's error model with an ``X-Request-Id`` header. Client
errors say what is wrong in one line; a 5xx says only its request id, and the server
logs the failure with the same id (``calving.rest`` logger). Each request is logged as
``METHOD path status ms`` (never a header, so never a credential).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from calving.commit.catalog.base import Namespace
from calving.ingest.serve.errors import RestError, bad_request, not_authorized, rest_error_of
from calving.ingest.serve.idempotency import (
    HEADER as IDEMPOTENCY_HEADER,
)
from calving.ingest.serve.idempotency import (
    Answer,
    IdempotencyStore,
    check_key,
    fingerprint,
    iso_duration,
)
from calving.ingest.serve.service import CatalogService
from calving.ingest.serve.tokens import OAuthError, TokenIssuer
from calving.ingest.serve.transaction import commit_transaction

log = logging.getLogger("calving.rest")

NAMESPACE_SEPARATOR = "\x1f"
TOKENS_PATH = "/v1/oauth/tokens"
MAX_JSON_DEPTH = 64
#: The token endpoint's form is small; it is read before any authentication.
MAX_FORM_BYTES = 64 * 1024
_ROOTS = ("config", "namespaces", "tables", "transactions")
_JSON = "application/json"
_FORM = "application/x-www-form-urlencoded"


@dataclass(frozen=True)
class Limits:
    """What one request may cost the server."""

    max_body_bytes: int = 16 * 1024 * 1024
    body_timeout_s: float = 30.0


@dataclass(frozen=True)
class Auth:
    """How requests authenticate: a static bearer token, OAuth2 client credentials, both,
    or (``insecure``) nothing at all."""

    token: str | None = None
    issuer: TokenIssuer | None = None
    insecure: bool = False

    def __post_init__(self) -> None:
        if self.token is None and self.issuer is None and not self.insecure:
            raise ValueError("an auth method (token or client credentials) or insecure")

    def __repr__(self) -> str:
        kinds = [k for k, on in (("token", self.token), ("oauth2", self.issuer)) if on]
        return f"Auth({'+'.join(kinds) or 'insecure'})"

    def allows(self, authorization: bytes | None) -> bool:
        if self.token is None and self.issuer is None:
            return True
        scheme, _, value = (authorization or b"").partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        value = value.strip()
        if self.token is not None and hmac.compare_digest(value, self.token.encode()):
            return True
        if self.issuer is None:
            return False
        try:
            return self.issuer.valid(value.decode("ascii"))
        except UnicodeDecodeError:
            return False


class BodyError(Exception):
    """The body broke a limit while being read; carries the answer."""

    def __init__(self, error: RestError) -> None:
        super().__init__(error.message)
        self.error = error


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def _media_type(value: bytes | None) -> str:
    return (value or b"").split(b";", 1)[0].strip().lower().decode("latin-1")


def _has_body(scope: Scope) -> bool:
    length = _header(scope, b"content-length")
    if _header(scope, b"transfer-encoding") is not None:
        return True
    return length is not None and length.strip() not in (b"", b"0")


class Guard:
    """Pure ASGI middleware: everything decided from the request line and headers."""

    def __init__(self, app: ASGIApp, auth: Auth, limits: Limits) -> None:
        self.app = app
        self.auth = auth
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = uuid.uuid4().hex[:16]
        scope["state"]["request_id"] = request_id
        scope["state"]["started"] = time.monotonic()
        refusal = self._refusal(scope)
        if refusal is not None:
            await send_error(scope, send, refusal, close=True)
            return
        await self.app(scope, self._bounded(receive, self._cap(scope)), send)

    def _cap(self, scope: Scope) -> int:
        tokens = scope["path"].rstrip("/") == TOKENS_PATH
        return (
            min(self.limits.max_body_bytes, MAX_FORM_BYTES)
            if tokens
            else self.limits.max_body_bytes
        )

    def _refusal(self, scope: Scope) -> RestError | None:
        path = scope["path"].rstrip("/")
        tokens = path == TOKENS_PATH
        if not tokens and not self.auth.allows(_header(scope, b"authorization")):
            return not_authorized()
        length = _header(scope, b"content-length")
        if length is not None and int(length) > self._cap(scope):
            return RestError(413, "RequestTooLargeException", "request body is too large")
        if _has_body(scope):
            wanted = _FORM if tokens else _JSON
            if _media_type(_header(scope, b"content-type")) != wanted:
                return RestError(415, "UnsupportedMediaTypeException", f"the body must be {wanted}")
        return None

    def _bounded(self, receive: Receive, cap: int) -> Receive:
        limits = self.limits
        seen = [0]

        async def bounded() -> Message:
            try:
                message = await asyncio.wait_for(receive(), limits.body_timeout_s)
            except asyncio.TimeoutError:
                raise BodyError(
                    RestError(408, "RequestTimeoutException", "the request body was too slow")
                ) from None
            seen[0] += len(message.get("body", b""))
            if seen[0] > cap:
                raise BodyError(
                    RestError(413, "RequestTooLargeException", "request body is too large")
                )
            return message

        return bounded


async def send_error(scope: Scope, send: Send, error: RestError, *, close: bool) -> None:
    """``error`` as an error-model answer (closing the connection when asked)."""
    body = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers.append((b"x-request-id", str(scope["state"]["request_id"]).encode()))
    if error.status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="calving"'))
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})
    _log_request(scope, error.status)


def _log_request(scope: Scope, status: int) -> None:
    elapsed_ms = (time.monotonic() - scope["state"]["started"]) * 1000
    path = repr(scope["path"][:200])[1:-1]  # control characters escaped
    log.info("%s %s %d %.1f ms", scope["method"], path, status, elapsed_ms)


def _depth_ok(value: Any) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return False
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return True


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(raw: bytes) -> Any:
    """The body's JSON (None when empty), or a 400."""
    if not raw:
        return None
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        detail = "too deeply nested" if isinstance(exc, RecursionError) else str(exc)[:120]
        raise bad_request(f"request body is not JSON: {detail}") from None
    if not _depth_ok(value):
        raise bad_request(f"request body JSON is nested deeper than {MAX_JSON_DEPTH} levels")
    return value


class Router:
    """(method, path segments after ``/v1``, query, body) -> (status, JSON or None)."""

    def __init__(
        self, service: CatalogService, prefix: str | None, store: IdempotencyStore | None
    ) -> None:
        self.service = service
        self.prefix = prefix
        self.store = store

    def config(self) -> dict[str, Any]:
        answer = self.service.config()
        if self.prefix:
            answer["overrides"]["prefix"] = self.prefix
        if self.store is not None:
            answer["idempotency-key-lifetime"] = iso_duration(self.store.lifetime_s)
        return answer

    def match(
        self, method: str, parts: list[str], query: dict[str, str]
    ) -> Callable[[Any], tuple[int, Any]] | None:
        if parts == ["config"]:
            return (lambda b: (200, self.config())) if method == "GET" else None
        if parts and parts[0] not in _ROOTS and parts[0] == self.prefix:
            parts = parts[1:]
        s = self.service
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
        if len(parts) < 2 or parts[0] != "namespaces":
            return None
        return self._under_namespace(method, parts, query)

    def _under_namespace(
        self, method: str, parts: list[str], query: dict[str, str]
    ) -> Callable[[Any], tuple[int, Any]] | None:
        s, n, ns = self.service, len(parts), _namespace(parts[1])
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
        if n == 3 and parts[2] == "properties" and method == "POST":
            return lambda b: (200, s.update_namespace_properties(ns, b))
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
            source = (*src["namespace"], src["name"])
            destination = (*dst["namespace"], dst["name"])
        except (KeyError, TypeError) as exc:
            raise bad_request(f"RenameTableRequest: missing or malformed {exc}") from None
        self.service.catalog.rename_table(source, destination)


def _no_content(call: Callable[[], object]) -> tuple[int, Any]:
    call()
    return 204, None


def _namespace(segment: str) -> Namespace:
    return tuple(segment.split(NAMESPACE_SEPARATOR))


def _json_answer(status: int, answer: Any) -> Answer:
    if status == 204 or answer is None:
        return Answer(status, b"")
    return Answer(status, json.dumps(answer).encode(), (("content-type", _JSON),))


def _response(request: Request, answer: Answer, *, close: bool = False) -> Response:
    headers = dict(answer.headers)
    headers["x-request-id"] = request.state.request_id
    if close:
        headers["connection"] = "close"
    return Response(answer.body, status_code=answer.status, headers=headers)


class CatalogEndpoint:
    """Every ``/v1/...`` route but the token endpoint."""

    def __init__(self, router: Router) -> None:
        self.router = router

    async def handle(self, request: Request) -> Response:
        try:
            answer, replayed = await self._answer(request)
        except BodyError as exc:
            answer, replayed = self._error(request, exc.error), False
            response = _response(request, answer, close=True)
            _log_request(request.scope, answer.status)
            return response
        except Exception as exc:  # noqa: BLE001 - every failure becomes an error answer
            answer, replayed = self._error(request, exc), False
        response = _response(request, answer)
        if replayed:
            response.headers["idempotent-replayed"] = "true"
        _log_request(request.scope, answer.status)
        return response

    def _error(self, request: Request, exc: Exception) -> Answer:
        request_id = request.state.request_id
        error = rest_error_of(exc, request_id)
        if error.status >= 500:
            log.warning(
                "request %s %s %s failed: %s: %s",
                request_id,
                request.method,
                repr(request.url.path[:200])[1:-1],
                type(exc).__name__,
                exc,
            )
        return Answer(error.status, json.dumps(error.body()).encode(), (("content-type", _JSON),))

    async def _answer(self, request: Request) -> tuple[Answer, bool]:
        raw_path = request.scope.get("raw_path") or request.scope["path"].encode()
        parts = [
            urllib.parse.unquote(p.decode("latin-1")) for p in raw_path.strip(b"/").split(b"/")[1:]
        ]
        query = dict(urllib.parse.parse_qsl(request.url.query, keep_blank_values=True))
        handler = None
        if raw_path.startswith(b"/v1/"):
            handler = self.router.match(request.method, parts, query)
        if handler is None:
            raise RestError(404, "NotFoundException", f"no route for {request.method} this path")
        raw = await request.body()
        body = parse_json(raw)
        key = request.headers.get(IDEMPOTENCY_HEADER)
        store = self.router.store
        if key is None or store is None or request.method not in ("POST", "DELETE"):
            return await self._run(handler, body, request), False
        print_ = fingerprint(request.method, raw_path.decode("latin-1"), raw)
        return await store.run(check_key(key), print_, partial(self._run, handler, body, request))

    async def _run(
        self, handler: Callable[[Any], tuple[int, Any]], body: Any, request: Request
    ) -> Answer:
        try:
            status, answer = await run_in_threadpool(handler, body)
        except Exception as exc:  # noqa: BLE001 - an error answer is an answer too
            return self._error(request, exc)
        return _json_answer(status, answer)


class TokenEndpoint:
    """``POST /v1/oauth/tokens``: a form body, an OAuth2 answer."""

    def __init__(self, issuer: TokenIssuer | None) -> None:
        self.issuer = issuer

    async def handle(self, request: Request) -> Response:
        status, body, extra = await self._answer(request)
        headers = {"x-request-id": request.state.request_id, "cache-control": "no-store"}
        headers.update(extra)
        _log_request(request.scope, status)
        return Response(json.dumps(body).encode(), status, headers, media_type=_JSON)

    async def _answer(self, request: Request) -> tuple[int, dict[str, Any], dict[str, str]]:
        if request.method != "POST":
            error = RestError(405, "MethodNotAllowedException", "the token endpoint takes POST")
            return 405, error.body(), {"allow": "POST"}
        if self.issuer is None:
            error = RestError(404, "NotFoundException", "this server issues no OAuth2 tokens")
            return 404, error.body(), {}
        try:
            raw = await request.body()
        except BodyError as exc:
            return exc.error.status, exc.error.body(), {"connection": "close"}
        try:
            text = raw.decode("utf-8")
            form = dict(urllib.parse.parse_qsl(text, keep_blank_values=True, max_num_fields=20))
        except (UnicodeDecodeError, ValueError):
            return 400, OAuthError(400, "invalid_request", "malformed form body").body(), {}
        client = request.client.host if request.client else ""
        try:
            return 200, self.issuer.issue(form, request.headers.get("authorization"), client), {}
        except OAuthError as exc:
            extra = {}
            if exc.retry_after_s is not None:
                extra["retry-after"] = str(max(1, round(exc.retry_after_s)))
            if exc.status == 401:
                extra["www-authenticate"] = 'Basic realm="calving"'
            return exc.status, exc.body(), extra


def build_app(
    service: CatalogService,
    auth: Auth,
    *,
    prefix: str | None = None,
    limits: Limits | None = None,
    idempotency: IdempotencyStore | None = None,
) -> Starlette:
    """The whole ASGI application for ``service``."""
    router = Router(service, prefix, idempotency)
    methods = ["GET", "HEAD", "POST", "DELETE", "PUT", "PATCH", "OPTIONS"]
    return Starlette(
        routes=[
            Route(TOKENS_PATH, TokenEndpoint(auth.issuer).handle, methods=methods),
            Route("/{rest:path}", CatalogEndpoint(router).handle, methods=methods),
        ],
        middleware=[Middleware(Guard, auth=auth, limits=limits or Limits())],
    )
