"""Bearer tokens for the REST catalog client: a static token, or OAuth2 client
credentials fetched from the token endpoint and refreshed.

    TokenSource(token="...")                                  # static
    TokenSource(credential="id:secret", token_uri=".../v1/oauth/tokens", scope="catalog")

With a credential, a token is fetched on first use, fetched again once less than a tenth
of its ``expires_in`` (at most 60 s) is left, and fetched again when the server answers
401 (``refresh_after_401``): the transport then repeats the request once. Repeating is
safe even for a commit: a 401 means the server refused the request before looking at
it, so nothing was applied. A static token cannot be refreshed, so its 401 is final.
Neither the credential nor a token is ever part of a message or a repr.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from calving.commit.errors import CatalogError, CatalogUnavailableError

#: Refresh when this share of the token's lifetime is left (capped by ``MAX_MARGIN_S``).
REFRESH_SHARE = 0.1
MAX_MARGIN_S = 60.0


class TokenSource:
    def __init__(
        self,
        *,
        token: str | None = None,
        credential: str | None = None,
        token_uri: str | None = None,
        scope: str | None = None,
        timeout_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if credential is not None and token_uri is None:
            raise CatalogError("an OAuth2 credential needs the token endpoint's URI")
        self._static = token
        self._credential = credential
        self.token_uri = token_uri
        self.scope = scope or "catalog"
        self.timeout_s = timeout_s
        self._clock = clock
        self._token: str | None = None
        self._refresh_at = 0.0
        self._lock = threading.Lock()
        #: Tokens fetched so far (tests and metrics).
        self.fetched = 0

    def __repr__(self) -> str:
        kind = "oauth2" if self._credential else "static" if self._static else "none"
        return f"TokenSource({kind})"

    @property
    def refreshable(self) -> bool:
        return self._credential is not None

    def header(self) -> str | None:
        """The ``Authorization`` value for the next request (None: no auth)."""
        if self._credential is None:
            return f"Bearer {self._static}" if self._static else None
        with self._lock:
            if self._token is None or self._clock() >= self._refresh_at:
                self._fetch()
            return f"Bearer {self._token}"

    def refresh_after_401(self) -> bool:
        """Forget the token after a 401; True if a new one can be fetched."""
        if self._credential is None:
            return False
        with self._lock:
            self._token = None
        return True

    def _fetch(self) -> None:
        assert self._credential is not None and self.token_uri is not None
        client_id, sep, client_secret = self._credential.partition(":")
        if not sep:  # a bare secret: the client id is empty, as Iceberg's clients allow
            client_id, client_secret = "", self._credential
        form = urllib.parse.urlencode(
            {
                "grant_type": "client_credentials",
                "client_id": client_id,
                "client_secret": client_secret,
                "scope": self.scope,
            }
        ).encode()
        request = urllib.request.Request(self.token_uri, data=form, method="POST")
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
        answer = _post(request, self.token_uri, self.timeout_s)
        token, expires_in = answer.get("access_token"), answer.get("expires_in")
        if not isinstance(token, str) or not token:
            raise CatalogError(f"OAuth2 token endpoint {self.token_uri}: no access_token")
        self._token = token
        self.fetched += 1
        lifetime = float(expires_in) if isinstance(expires_in, int | float) else 3600.0
        self._refresh_at = self._clock() + lifetime - min(lifetime * REFRESH_SHARE, MAX_MARGIN_S)


def _post(request: urllib.request.Request, uri: str, timeout_s: float) -> dict[str, object]:
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            raw = reply.read()
    except urllib.error.HTTPError as err:
        detail = _oauth_error(err)
        raise CatalogError(
            f"OAuth2 token endpoint {uri} refused the client credential: {err.code} {detail} "
            "(check the catalog credential)"
        ) from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise CatalogUnavailableError(
            f"OAuth2 token endpoint {uri}: {type(reason).__name__}: {reason}"
        ) from None
    try:
        answer = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CatalogError(f"OAuth2 token endpoint {uri}: the reply is not JSON") from None
    if not isinstance(answer, dict):
        raise CatalogError(f"OAuth2 token endpoint {uri}: the reply is not a JSON object")
    return answer


def _oauth_error(err: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(err.read() or b"{}")
        return f"{body.get('error', '')}: {body.get('error_description', '')}".strip(": ")
    except (ValueError, AttributeError, OSError):
        return str(err.reason)
