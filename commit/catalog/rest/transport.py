"""The REST catalog client's HTTP transport: JSON requests, bearer token and extra
headers, timeouts, and replies mapped to calving's typed errors.

Reads and commits differ in what a failure means. A read that cannot reach the server,
times out or gets a 5xx is ``CatalogUnavailableError`` (try later). A commit request
that never left (connection refused) is ``CatalogUnavailableError`` too, but once it
may have been received, a timeout, a dropped connection, a 5xx or a reply that is not
JSON is ``CommitStateUnknownError``: only reading the table back can tell. 409 on a
commit is ``CommitSwapLostError`` (refresh and retry). Errors from an HTTP answer carry
its status as ``http_status``. The token is never part of a
message.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from calving.commit.catalog.rest.auth import TokenSource
from calving.commit.errors import (
    CatalogError,
    CatalogUnavailableError,
    CommitStateUnknownError,
    CommitSwapLostError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)

DEFAULT_TIMEOUT_S = 30.0

_BY_TYPE: dict[str, type[CatalogError]] = {
    "NoSuchTableException": NoSuchTableError,
    "NoSuchNamespaceException": NoSuchNamespaceError,
    "NamespaceNotEmptyException": NamespaceNotEmptyError,
}


class RestTransport:
    def __init__(
        self,
        uri: str,
        *,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        auth: TokenSource | None = None,
    ) -> None:
        self.uri = uri.rstrip("/")
        self.auth = auth or TokenSource(token=token, timeout_s=timeout_s)
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"RestTransport({self.uri!r}, {self.auth!r})"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        commit: bool = False,
        exists: str = "table",
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """The reply's JSON (None when empty). ``exists`` names what a 409
        AlreadyExists refers to ("table" or "namespace"); ``headers`` are added to this
        request only. A 401 with a refreshable (OAuth2) token is repeated once with a new
        token: the server refused it before applying anything."""
        extra = dict(headers or {})
        try:
            return self._once(method, path, body, commit, exists, extra)
        except _Unauthorized as first:
            if not self.auth.refreshable or not self.auth.refresh_after_401():
                raise first.error from None
        try:
            return self._once(method, path, body, commit, exists, extra)
        except _Unauthorized as again:
            raise again.error from None

    def _once(
        self, method: str, path: str, body: Any, commit: bool, exists: str, extra: dict[str, str]
    ) -> Any:
        req = self._build(method, path, body)
        for key, value in extra.items():
            req.add_header(key, value)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as reply:
                raw = reply.read()
        except urllib.error.HTTPError as err:
            error = _http_error(err, method, path, commit, exists)
            if err.code == 401:
                raise _Unauthorized(error) from None
            raise error from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            raise _transport_error(err, method, path, commit) from None
        return _decode(raw, method, path, commit)

    def _build(self, method: str, path: str, body: Any) -> urllib.request.Request:
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(f"{self.uri}/{path.lstrip('/')}", data=data, method=method)
        for key, value in self.headers.items():
            req.add_header(key, value)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        authorization = self.auth.header()
        if authorization:
            req.add_header("Authorization", authorization)
        return req


class _Unauthorized(Exception):
    """A 401 answer, carrying the error it maps to."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _what(method: str, path: str) -> str:
    return f"REST catalog {method} {path}"


def _decode(raw: bytes, method: str, path: str, commit: bool) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        message = f"{_what(method, path)}: the reply is not JSON"
        if commit:
            raise CommitStateUnknownError(f"{message}; the commit may have landed") from None
        raise CatalogError(message) from None


def _error_model(err: urllib.error.HTTPError) -> tuple[str, str]:
    try:
        obj = json.loads(err.read() or b"{}")
        error = obj["error"]
        return str(error.get("type", "")), str(error.get("message", ""))
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        return "", ""


def _http_error(
    err: urllib.error.HTTPError, method: str, path: str, commit: bool, exists: str
) -> Exception:
    error = _error_for(err, method, path, commit, exists)
    error.http_status = err.code  # type: ignore[attr-defined]
    return error


def _error_for(
    err: urllib.error.HTTPError, method: str, path: str, commit: bool, exists: str
) -> Exception:
    kind, message = _error_model(err)
    text = f"{_what(method, path)}: {err.code} {kind or err.reason}: {message}".rstrip(": ")
    if err.code in (401, 403, 419):
        return CatalogError(f"{text} (check the catalog token or credential)")
    if commit and err.code == 409:
        return CommitSwapLostError(text)
    if commit and err.code >= 500:
        # Every 5xx, 503 included: a proxy or a server may have applied the commit before
        # failing; reading the table back is always safe, a blind retry is not.
        return CommitStateUnknownError(f"{text}; the commit may have landed")
    if err.code == 409 and kind == "AlreadyExistsException":
        return (TableAlreadyExistsError if exists == "table" else NamespaceAlreadyExistsError)(text)
    if kind in _BY_TYPE:
        return _BY_TYPE[kind](text)
    if err.code == 404:
        return NoSuchTableError(text) if exists == "table" else NoSuchNamespaceError(text)
    if err.code >= 500:
        return CatalogUnavailableError(text)
    return CatalogError(text)


def _never_sent(err: BaseException) -> bool:
    reason = getattr(err, "reason", err)
    return isinstance(reason, ConnectionRefusedError | socket.gaierror)


def _transport_error(err: BaseException, method: str, path: str, commit: bool) -> Exception:
    reason = getattr(err, "reason", err)
    text = f"{_what(method, path)}: {type(reason).__name__}: {reason}"
    if commit and not _never_sent(err):
        return CommitStateUnknownError(f"{text}; the commit may have landed")
    return CatalogUnavailableError(text)
