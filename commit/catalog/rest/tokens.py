"""OAuth2 client credentials for ``calving catalog serve``: ``POST /v1/oauth/tokens``
issues short-lived bearer tokens to the one configured client (single tenant).

The request is the spec's form (``grant_type=client_credentials``, ``client_id``,
``client_secret``, ``scope``); the answer ``{"access_token", "token_type": "bearer",
"expires_in", "issued_token_type"}``. A token is 32 random bytes, valid ``ttl_s``
seconds; expired ones are forgotten. Secrets are compared in constant time and never
logged.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"


class OAuthError(Exception):
    """An OAuth2 error answer (RFC 6749 section 5.2)."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.error = error
        self.description = description

    def body(self) -> dict[str, str]:
        return {"error": self.error, "error_description": self.description}


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
        self._client_id = client_id
        self._client_secret = client_secret
        self.ttl_s = ttl_s
        self._clock = clock
        self._tokens: dict[str, float] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TokenIssuer(ttl_s={self.ttl_s})"

    def issue(self, form: Mapping[str, str]) -> dict[str, Any]:
        if form.get("grant_type") != "client_credentials":
            raise OAuthError(400, "unsupported_grant_type", "only client_credentials is supported")
        same_id = hmac.compare_digest(form.get("client_id", ""), self._client_id)
        same_secret = hmac.compare_digest(form.get("client_secret", ""), self._client_secret)
        if not (same_id and same_secret):
            raise OAuthError(401, "invalid_client", "unknown client or wrong secret")
        token = secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            self._tokens = {t: e for t, e in self._tokens.items() if e > now}
            self._tokens[token] = now + self.ttl_s
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
