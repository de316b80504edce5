"""OAuth2 client credentials for ``calving catalog serve``: ``POST /v1/oauth/tokens``
issues short-lived bearer tokens to the one configured client (single tenant).

The request is the spec's form (``grant_type=client_credentials``, ``scope``) with the
client's id and secret either in the form (``client_id``, ``client_secret``) or as
HTTP Basic authentication (RFC 6749 section 2.3.1, which a server must support: DuckDB's
and Iceberg Java's clients use it). The answer is ``{"access_token", "token_type":
"bearer", "expires_in", "issued_token_type"}``. A token is 32 random bytes, valid
``ttl_s`` seconds; expired ones are forgotten. Ids and secrets are compared as bytes in
constant time and never logged.

Wrong credentials are throttled per client address (``FailureThrottle``): after
``FREE_FAILURES`` failures in a row, each further one locks the address out for a
doubling time (0.5 s up to ``MAX_LOCKOUT_S``); a request during the lockout is answered
429 ``slow_down`` without its secret being looked at. A success clears the address.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
FREE_FAILURES = 3
MAX_LOCKOUT_S = 30.0
#: Addresses remembered at most (the oldest are forgotten first).
MAX_TRACKED = 10_000
#: Most tokens alive at once (the oldest are forgotten first).
MAX_TOKENS = 10_000


class OAuthError(Exception):
    """An OAuth2 error answer (RFC 6749 section 5.2)."""

    def __init__(
        self, status: int, error: str, description: str, retry_after_s: float | None = None
    ) -> None:
        super().__init__(description)
        self.status = status
        self.error = error
        self.description = description
        self.retry_after_s = retry_after_s

    def body(self) -> dict[str, str]:
        return {"error": self.error, "error_description": self.description}


class FailureThrottle:
    """Consecutive failures per key (a client address) and the lockout they earn."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._failures: dict[str, tuple[int, float]] = {}  # key -> (count, locked until)
        self._lock = threading.Lock()

    def wait_s(self, key: str) -> float:
        """Seconds ``key`` must still wait before its credentials are looked at."""
        with self._lock:
            _, until = self._failures.get(key, (0, 0.0))
        return max(0.0, until - self._clock())

    def failed(self, key: str) -> None:
        now = self._clock()
        with self._lock:
            count = self._failures.pop(key, (0, 0.0))[0] + 1
            lockout = 0.0
            if count > FREE_FAILURES:
                lockout = min(0.5 * 2 ** (count - FREE_FAILURES - 1), MAX_LOCKOUT_S)
            self._failures[key] = (count, now + lockout)
            while len(self._failures) > MAX_TRACKED:
                del self._failures[next(iter(self._failures))]

    def succeeded(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)


def _same(given: str, expected: bytes) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected)


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """(client id, secret) from an ``Authorization: Basic`` value (both form-urlencoded
    before base64, as RFC 6749 2.3.1 says), or None when the header is not Basic."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise OAuthError(401, "invalid_client", "malformed HTTP Basic credentials") from None
    client_id, sep, secret = decoded.partition(":")
    if not sep:
        raise OAuthError(401, "invalid_client", "malformed HTTP Basic credentials")
    return urllib.parse.unquote_plus(client_id), urllib.parse.unquote_plus(secret)


class TokenIssuer:
    def __init__(
        self,
        credential: str,
        ttl_s: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        client_id, sep, client_secret = credential.partition(":")
        if not sep or not client_id or not client_secret:
            raise ValueError("a client credential is 'client_id:client_secret'")
        self._client_id = client_id.encode()
        self._client_secret = client_secret.encode()
        self.ttl_s = ttl_s
        self._clock = clock
        self._tokens: dict[str, float] = {}
        self._lock = threading.Lock()
        self.throttle = FailureThrottle(clock)

    def __repr__(self) -> str:
        return f"TokenIssuer(ttl_s={self.ttl_s})"

    def issue(
        self, form: Mapping[str, str], authorization: str | None = None, client: str = ""
    ) -> dict[str, Any]:
        """A token for the form (and ``Authorization`` header) one client address sent."""
        wait = self.throttle.wait_s(client)
        if wait > 0:
            raise OAuthError(429, "slow_down", "too many failed attempts; retry later", wait)
        if form.get("grant_type") != "client_credentials":
            raise OAuthError(400, "unsupported_grant_type", "only client_credentials is supported")
        basic = basic_credentials(authorization)
        in_form = "client_id" in form or "client_secret" in form
        if basic is not None and in_form:
            raise OAuthError(400, "invalid_request", "client credentials given twice")
        client_id, secret = basic or (form.get("client_id", ""), form.get("client_secret", ""))
        same_id = _same(client_id, self._client_id)
        same_secret = _same(secret, self._client_secret)
        if not (same_id and same_secret):
            self.throttle.failed(client)
            raise OAuthError(401, "invalid_client", "unknown client or wrong secret")
        self.throttle.succeeded(client)
        return self._new_token()

    def _new_token(self) -> dict[str, Any]:
        token = secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            self._tokens = {t: e for t, e in self._tokens.items() if e > now}
            self._tokens[token] = now + self.ttl_s
            while len(self._tokens) > MAX_TOKENS:
                del self._tokens[next(iter(self._tokens))]
        return {
            "access_token": token,
            "token_type": "bearer",
            "expires_in": int(self.ttl_s),
            "issued_token_type": ACCESS_TOKEN_TYPE,
        }

    def valid(self, token: str) -> bool:
        with self._lock:
            expires = self._tokens.get(token)
        return expires is not None and expires > self._clock()
