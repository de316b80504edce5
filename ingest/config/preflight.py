"""Checks that touch the machine, run before anything is created.

``load_config`` checks every value on its own (no I/O beyond librdkafka's in-process
parser). ``validate_before_create(config)`` then checks what only the machine can
answer, and ``build_pipeline`` runs it before opening the catalog, so a pipeline that
would fail later leaves no catalog database, namespace or table behind:

* ``sink.checkpoint`` and a local ``table.warehouse`` (and a SQLite catalog's
  directory) are writable: a probe file is created and removed in the nearest
  existing directory. Remote locations (``s3://``, ``hdfs://`` ...) are not probed.

``check_metrics_port(config)``: with ``[metrics]`` enabled on a fixed port, that port
can be bound on its host (a port in use fails here, not after the table is created).
The broker and the topics are checked by ``calving.ingest.config.source_check``.

``check_table_properties(name, properties)`` is the start-up check of an existing
table's own properties: a bad value fails with the typed accessor's message and the
``calving table set-property`` / ``unset-property`` command that repairs it.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Mapping
from urllib.parse import unquote, urlparse

from calving.commit.errors import ConfigError, InvalidTablePropertyError
from calving.commit.spec.properties import FIX_HINT, KNOWN
from calving.ingest.config.loader import CalvingConfig


def validate_before_create(config: CalvingConfig) -> None:
    """Raise ``ConfigError`` (one line, naming the key) for a location calving could
    not write; values from ``${env:...}`` are masked."""
    checks = [("sink.checkpoint", config.sink.checkpoint)]
    if config.table.warehouse is not None:
        checks.append(("table.warehouse", config.table.warehouse))
    if config.table.catalog.startswith("sqlite:"):
        database = config.table.catalog.split(":///", 1)[-1].split("?", 1)[0]
        checks.append(("table.catalog", os.path.dirname(unquote(database)) or "."))
    for key, location in checks:
        problem = _unwritable(location)
        if problem is not None:
            message = f"{config.origin}: {key}: {problem}"
            raise ConfigError(config.redact.message(message))


def check_metrics_port(config: CalvingConfig) -> None:
    """``ConfigError`` naming ``metrics.port`` when the endpoint could not bind it."""
    cfg = config.metrics
    if not cfg.enabled or cfg.port == 0:
        return
    try:
        infos = socket.getaddrinfo(cfg.host, cfg.port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(
            f"{config.origin}: metrics.port: cannot listen on {cfg.host}:{cfg.port} ({reason}); "
            "choose a free port, or 0 for any"
        ) from None


def local_path(location: str) -> str | None:
    """The local filesystem path of ``location``, or None for a remote URI."""
    if location.startswith("file:"):
        parsed = urlparse(location)
        return unquote(parsed.path) if parsed.netloc in ("", "localhost") else None
    return None if "://" in location else location


def _unwritable(location: str) -> str | None:
    path = local_path(location)
    if path is None:
        return None
    existing = path
    while not os.path.exists(existing):
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    if not os.path.isdir(existing):
        return f"{existing!r} is not a directory, so {location!r} cannot be created there"
    try:
        fd, probe = tempfile.mkstemp(prefix=".calving-probe-", dir=existing)
    except OSError as exc:
        return f"cannot write in {existing!r} ({exc.strerror})"
    os.close(fd)
    os.unlink(probe)
    return None


def check_table_properties(
    table_name: str, properties: Mapping[str, str], overrides: Mapping[str, str] | None = None
) -> None:
    """Refuse an existing table whose properties calving reads have bad values (the
    config's ``overrides`` replace the table's, since they are about to be set)."""
    merged = {**properties, **(overrides or {})}
    for name, raw in merged.items():
        prop = KNOWN.get(name)
        if prop is None:
            continue
        try:
            prop.parse(raw)
            continue
        except InvalidTablePropertyError as exc:
            text = str(exc).replace(f"; {FIX_HINT}", "")
        # Raised outside the handler: one error, no chained context to report instead.
        raise InvalidTablePropertyError(
            f"table {table_name}: {text}; fix it with `calving table set-property "
            f"{table_name} {name} VALUE` or `calving table unset-property {table_name} {name}`"
        )
