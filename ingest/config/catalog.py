"""``table.catalog`` as a table: ``[table.catalog]`` with ``type`` and its settings, and
the REST catalog's settings from either form.

    catalog = "rest+http://127.0.0.1:8181"          # or rest+https://, a base path allowed

    [table.catalog]
    type = "rest"                                    # rest | sql | filesystem
    uri = "https://catalog.example.com/api/catalog"
    warehouse = "analytics"                          # the catalog's warehouse name
    credential = "${env:CATALOG_CREDENTIAL}"         # client_id:client_secret (OAuth2)
    scope = "PRINCIPAL_ROLE:ALL"
    timeout = "30 seconds"
    [table.catalog.headers]
    "X-Iceberg-Access-Delegation" = "vended-credentials"

``token`` and ``credential`` are secrets: they must come from ``${env:NAME}`` and are never
shown. With ``type = "sql"`` or ``"filesystem"``, ``uri`` is what the string form takes.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field

from calving.commit.errors import ConfigError
from calving.ingest.config.reader import Section
from calving.ingest.config.secrets import SENSITIVE_KEY, join_key, masked_repr

CATALOG_KEYS = (
    "type",
    "uri",
    "warehouse",
    "token",
    "credential",
    "oauth2_server_uri",
    "scope",
    "headers",
    "timeout",
)
CATALOG_TYPES = ("rest", "sql", "filesystem")
#: ``table.catalog`` strings naming a REST catalog: the rest is its base URI.
REST_PREFIXES = ("rest+http://", "rest+https://")
_SECRETS = ("token", "credential")
#: Header names whose values are credentials: like ``token``, only from ``${env:NAME}``.
SECRET_HEADER = re.compile(r"authorization|cookie|api-?key|" + SENSITIVE_KEY.pattern, re.IGNORECASE)
DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True, repr=False)
class RestSettings:
    """How to reach a REST catalog (``calving.commit.catalog.rest.RestCatalog``)."""

    uri: str
    #: The catalog's warehouse (a name or a location, as the server expects it).
    warehouse: str | None = None
    token: str | None = None
    credential: str | None = None
    oauth2_server_uri: str | None = None
    scope: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S
    env_keys: frozenset[str] = field(default_factory=frozenset, compare=False, repr=False)

    def __repr__(self) -> str:
        return masked_repr(self)


def rest_uri(s: Section, name: str, text: str) -> str:
    """The base URI of a ``rest+http(s)://`` catalog string, checked."""
    uri = text[len("rest+") :] if text.startswith(REST_PREFIXES) else text
    return checked_http_uri(s, name, uri)


def checked_http_uri(s: Section, name: str, uri: str) -> str:
    try:
        parts = urllib.parse.urlsplit(uri)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        s.fail(name, f"not a valid http(s) URI, got {s.shown(s.key(name), uri)}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        s.fail(name, f"expected an http:// or https:// URI, got {s.shown(s.key(name), uri)}")
    if parts.username or parts.password:
        s.fail(name, "must not hold credentials; use token or credential from ${env:NAME}")
    return uri.rstrip("/")


def parse_rest(s: Section, uri: str, warehouse: str | None = None) -> RestSettings:
    """REST settings from a ``[table.catalog]`` section (or only ``uri`` for the string
    form, ``s`` then being ``[table]`` and nothing else read)."""
    for name in _SECRETS:
        if s.has(name) and not s.is_env(name):
            s.fail(name, f'is a secret: give it as {name} = "${{env:NAME}}", never in the file')
    timeout = DEFAULT_TIMEOUT_S
    text = s.string("timeout", what='a duration such as "30 seconds"')
    if text is not None:
        from calving.ingest.config.runtime import interval_seconds

        try:
            timeout = interval_seconds(text)
        except ValueError:
            s.fail(
                "timeout",
                f'expected a duration such as "30 seconds", got {s.shown(s.key("timeout"), text)}',
            )
        if timeout <= 0:
            s.fail("timeout", "must be positive")
    oauth2 = s.string("oauth2_server_uri", what="the OAuth2 token endpoint URI")
    return RestSettings(
        uri=uri,
        warehouse=warehouse,
        token=s.string("token", what="a bearer token from ${env:NAME}"),
        credential=s.string("credential", what='"client_id:client_secret" from ${env:NAME}'),
        oauth2_server_uri=None
        if oauth2 is None
        else checked_http_uri(s, "oauth2_server_uri", oauth2),
        scope=s.string("scope", what="an OAuth2 scope"),
        headers=_headers(s),
        timeout_s=timeout,
        env_keys=s.env_names(),
    )


def _headers(s: Section) -> dict[str, str]:
    """``headers``; a credential-bearing one (``Authorization``, ``Cookie``, an API key)
    must come from ``${env:NAME}``, as ``token`` must: it is then masked everywhere."""
    headers = s.passthrough("headers")
    for name in headers:
        key = join_key(s.key("headers"), name)
        if SECRET_HEADER.search(name) and key not in s.ctx.env_keys:
            raise ConfigError(
                f'{key}: holds a credential: give it as "${{env:NAME}}", never in the file'
            )
    return headers
