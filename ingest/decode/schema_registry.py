"""Where Confluent Avro writer schemas come from: a Schema Registry over HTTP, or files.

Both sources answer ``schema_text(schema_id) -> str`` (the Avro schema JSON) and raise
``SchemaNotFoundError`` for an id they do not know (the decoder dead-letters the record,
naming the id) or ``SchemaRegistryUnavailableError`` when the registry cannot answer
after retries (transient: the batch fails and is retried; records are never dead-lettered
because a server was down).

The HTTP client needs only the standard library (it runs on Spark executors), caches every
schema it fetched for the life of the object (ids are immutable in a registry), retries
connection errors, timeouts, 429 and 5xx with exponential backoff, and takes basic-auth
credentials from two environment variables only; they are never logged or put in errors.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Protocol

from calving.commit.errors import ConfigError, Terminal, Transient

DEFAULT_USERNAME_ENV = "CALVING_SCHEMA_REGISTRY_USERNAME"
DEFAULT_PASSWORD_ENV = "CALVING_SCHEMA_REGISTRY_PASSWORD"
_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class SchemaNotFoundError(Terminal):
    """The source does not know this schema id."""

    def __init__(self, schema_id: int, detail: str) -> None:
        self.schema_id = schema_id
        super().__init__(f"schema id {schema_id}: {detail}")


class SchemaRegistryUnavailableError(Transient):
    """The registry did not answer usefully within the retries; try the batch again."""


class SchemaSource(Protocol):
    def schema_text(self, schema_id: int) -> str: ...


class SchemaRegistryClient:
    """``GET {url}/schemas/ids/{id}`` -> the ``schema`` string, cached per id."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 10.0,
        max_attempts: int = 4,
        backoff_s: float = 0.2,
        username_env: str = DEFAULT_USERNAME_ENV,
        password_env: str = DEFAULT_PASSWORD_ENV,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ConfigError(f"schema registry url must be http(s)://host[:port], got {url!r}")
        if parsed.username or parsed.password:
            raise ConfigError(
                "schema registry url must not carry credentials; set "
                f"{username_env} and {password_env} instead"
            )
        if max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {max_attempts}")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.username_env = username_env
        self.password_env = password_env
        self._cache: dict[int, str] = {}
        self.requests_made = 0

    def schema_text(self, schema_id: int) -> str:
        cached = self._cache.get(schema_id)
        if cached is not None:
            return cached
        text = self._fetch(schema_id)
        self._cache[schema_id] = text
        return text

    def _request(self, schema_id: int) -> urllib.request.Request:
        request = urllib.request.Request(
            f"{self.url}/schemas/ids/{int(schema_id)}",
            headers={"Accept": "application/vnd.schemaregistry.v1+json, application/json"},
        )
        user = os.environ.get(self.username_env)
        if user is not None:
            secret = os.environ.get(self.password_env, "")
            token = base64.b64encode(f"{user}:{secret}".encode()).decode("ascii")
            request.add_header("Authorization", f"Basic {token}")
        return request

    def _fetch(self, schema_id: int) -> str:
        last = "no attempt made"
        for attempt in range(self.max_attempts):
            if attempt:
                time.sleep(self.backoff_s * (2 ** (attempt - 1)))
            self.requests_made += 1
            try:
                with urllib.request.urlopen(self._request(schema_id), timeout=self.timeout_s) as r:
                    body = r.read()
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    raise SchemaNotFoundError(
                        schema_id, "not found in the schema registry"
                    ) from None
                if exc.code in _RETRY_STATUSES:
                    last = f"HTTP {exc.code}"
                    continue
                raise SchemaRegistryUnavailableError(
                    f"schema registry {self.url} answered HTTP {exc.code} for schema id {schema_id}"
                ) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                last = type(exc).__name__
                continue
            return _schema_from_body(body, schema_id, self.url)
        raise SchemaRegistryUnavailableError(
            f"schema registry {self.url}: no answer for schema id {schema_id} after "
            f"{self.max_attempts} attempts (last: {last})"
        )

    def __getstate__(self) -> dict[str, Any]:
        # Shipped to executors without the cache: each process fills its own.
        state = self.__dict__.copy()
        state["_cache"] = {}
        return state


def _schema_from_body(body: bytes, schema_id: int, url: str) -> str:
    try:
        doc = json.loads(body)
        text = doc["schema"]
        if not isinstance(text, str):
            raise TypeError("schema is not a string")
    except (ValueError, KeyError, TypeError) as exc:
        raise SchemaRegistryUnavailableError(
            f"schema registry {url} sent an unreadable answer for schema id {schema_id}: {exc}"
        ) from None
    schema_type = doc.get("schemaType", "AVRO")
    if schema_type != "AVRO":
        raise SchemaNotFoundError(schema_id, f"is a {schema_type} schema, not Avro")
    return text


class LocalSchemaDirectory:
    """A directory of ``<id>.avsc`` files (for tests, air-gapped runs and replays)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise ConfigError(f"schema directory {str(self.path)!r} does not exist")
        self._cache: dict[int, str] = {}

    def schema_text(self, schema_id: int) -> str:
        cached = self._cache.get(schema_id)
        if cached is not None:
            return cached
        file = self.path / f"{int(schema_id)}.avsc"
        try:
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SchemaNotFoundError(schema_id, f"no file {file.name} in {self.path}") from None
        self._cache[schema_id] = text
        return text


def open_schema_source(location: str, **client_options: float | str) -> SchemaSource:
    """``http(s)://...`` -> ``SchemaRegistryClient``; anything else -> a schema directory."""
    if location.startswith(("http://", "https://")):
        return SchemaRegistryClient(location, **client_options)  # type: ignore[arg-type]
    return LocalSchemaDirectory(location)
