"""``calving catalog serve``: the Iceberg REST catalog protocol over calving's SQL catalog
(the server itself is ``calving.ingest.serve``; this module is its command line).

    calving catalog serve (--config F | --catalog URL --warehouse W)
                          (--token-env NAME | --client-credential-env NAME | --insecure)
                          [--host 127.0.0.1] [--port 8181] [--allowed-location URI ...]

Authentication is required: the server refuses to start without ``--token-env`` or
``--client-credential-env`` unless ``--insecure`` is given, and refuses ``--insecure`` on
an address other than loopback. Tables and metadata may only be placed under the
warehouse and the ``--allowed-location`` prefixes.

``--client-credential-env NAME`` also issues OAuth2 tokens (``POST /v1/oauth/tokens``,
client credentials ``client_id:client_secret`` from ``$NAME``, lifetime ``--token-ttl``)
and accepts them as bearer tokens until they expire.

``--vend-io-env NAME`` hands the storage properties in ``$NAME`` (a JSON object, e.g.
``{"s3.access-key-id": ..., "s3.secret-access-key": ...}``) to every client in the
``loadTable`` answer's ``config``: static credentials, not scoped per table.

``--config`` takes ``table.catalog``, ``table.warehouse``, ``table.catalog_name`` and
``[table.io]`` from a pipeline config; ``--catalog`` is a SQLAlchemy URL (SQLite or
PostgreSQL). With ``--token-env NAME`` every request must carry ``Authorization:
Bearer <$NAME>`` (401 otherwise); the token is read from the environment only and
never logged. Prints ``calving catalog serve: listening on http://HOST:PORT`` once
bound (``--port 0`` takes a free port), logs each request at INFO on stderr
(``METHOD path status ms``) and stops on SIGTERM or Ctrl-C (exit 0).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from calving.commit.catalog.sql import SqlCatalog
from calving.commit.errors import ConfigError
from calving.ingest.errors import Secrets

if TYPE_CHECKING:
    from calving.ingest.serve.tokens import TokenIssuer

DEFAULT_PORT = 8181


def add_parsers(sub: Any) -> None:
    """Register ``calving catalog serve``."""
    catalog = sub.add_parser("catalog", help="serve the catalog to other engines")
    catalog_sub = catalog.add_subparsers(dest="catalog_command", required=True)
    serve = catalog_sub.add_parser(
        "serve",
        help="Iceberg REST catalog over the SQL catalog",
        description="Serve calving's SQL catalog (SQLite or PostgreSQL) over the Iceberg "
        "REST protocol, so pyiceberg, DuckDB, Spark or Trino can read and write its tables. "
        "Single tenant: one catalog, one bearer token and/or one OAuth2 client, no per-table "
        "access control. An auth method is required unless --insecure (loopback only).",
    )
    where = serve.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", type=Path, help="take the catalog from this pipeline config")
    where.add_argument(
        "--catalog", help="SQL catalog URL (sqlite:///... or postgresql+psycopg://...)"
    )
    serve.add_argument("--warehouse", help="default table location root (with --catalog)")
    serve.add_argument("--catalog-name", default="calving")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"0 = any free ({DEFAULT_PORT})"
    )
    serve.add_argument("--token-env", metavar="NAME",
                       help="require the bearer token held in environment variable NAME")  # fmt: skip
    serve.add_argument("--prefix", help="also serve the routes under /v1/PREFIX/ and advertise it")
    serve.add_argument("--client-credential-env", metavar="NAME",
                       help="issue OAuth2 tokens (POST /v1/oauth/tokens) to the client whose "
                       "client_id:client_secret is in environment variable NAME")  # fmt: skip
    serve.add_argument("--vend-io-env", metavar="NAME",
                       help="vend these storage properties (a JSON object in environment "
                       "variable NAME, e.g. s3.access-key-id) to clients in loadTable")  # fmt: skip
    serve.add_argument("--token-ttl", type=float, default=3600.0, metavar="SECONDS",
                       help="lifetime of issued OAuth2 tokens (3600)")  # fmt: skip
    serve.add_argument("--insecure", action="store_true",
                       help="serve without authentication (refused unless --host is loopback)")  # fmt: skip
    serve.add_argument("--allowed-location", action="append", default=[], metavar="URI",
                       help="a prefix besides the warehouse where tables may live and be "
                       "registered from (repeatable)")  # fmt: skip
    limits = serve.add_argument_group("limits")
    limits.add_argument("--max-body-bytes", type=int, default=16 * 1024 * 1024, metavar="N",
                        help="largest request body (16 MiB)")  # fmt: skip
    limits.add_argument("--body-timeout", type=float, default=30.0, metavar="SECONDS",
                        help="longest wait for each piece of a request body (30)")  # fmt: skip
    limits.add_argument("--header-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="longest wait for a whole request head (10)")  # fmt: skip
    limits.add_argument("--max-connections", type=int, default=200, metavar="N",
                        help="open connections answered; more get 503 or are closed (200)")  # fmt: skip
    limits.add_argument("--idempotency-lifetime", type=float, default=1800.0, metavar="SECONDS",
                        help="how long an Idempotency-Key's answer is kept (1800)")  # fmt: skip


def _server_modules() -> Any:
    try:
        from calving.ingest.serve import server
    except ImportError as err:
        raise ConfigError(
            f"calving catalog serve needs uvicorn and starlette ({err.name} is missing): "
            "pip install 'calving[serve]'"
        ) from None
    return server


def _check_auth(args: argparse.Namespace) -> None:
    has_auth = args.token_env is not None or args.client_credential_env is not None
    if args.insecure and has_auth:
        raise ConfigError("--insecure: not with --token-env or --client-credential-env")
    if not has_auth and not args.insecure:
        raise ConfigError(
            "calving catalog serve needs an auth method: --token-env NAME and/or "
            "--client-credential-env NAME (or --insecure, on a loopback address only)"
        )
    if args.insecure and not _loopback(args.host):
        raise ConfigError(
            f"--insecure: refused on --host {args.host}; without authentication the server "
            "may only listen on a loopback address (127.0.0.1, ::1, localhost)"
        )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _limits(args: argparse.Namespace) -> tuple[Any, Any]:
    from calving.ingest.serve.app import Limits
    from calving.ingest.serve.server import ServerLimits

    for flag, value in (("--max-body-bytes", args.max_body_bytes), ("--body-timeout",
                        args.body_timeout), ("--header-timeout", args.header_timeout),
                        ("--max-connections", args.max_connections),
                        ("--idempotency-lifetime", args.idempotency_lifetime)):  # fmt: skip
        if value <= 0:
            raise ConfigError(f"{flag}: must be positive, got {value}")
    return (
        Limits(max_body_bytes=args.max_body_bytes, body_timeout_s=args.body_timeout),
        ServerLimits(
            max_connections=args.max_connections,
            header_timeout_s=args.header_timeout,
        ),
    )


def main(args: argparse.Namespace, secrets: Secrets) -> int:
    _check_auth(args)
    server_module = _server_modules()
    from calving.ingest.serve.service import CatalogService

    logging.getLogger("calving.rest").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    token = _token(args.token_env, secrets, "--token-env")
    issuer = _issuer(args, secrets)
    limits, server_limits = _limits(args)
    vended = _vended(args.vend_io_env, secrets)
    catalog = _open(args, secrets)
    if not catalog.warehouse and not args.allowed_location:
        catalog.close()
        raise ConfigError(
            "calving catalog serve needs a warehouse (--warehouse, or table.warehouse with "
            "--config) or an --allowed-location: tables may only live under them"
        )
    try:
        service = CatalogService(
            catalog,
            vended=vended,
            allowed_prefixes=_allowed(args.allowed_location),
        )
        server = server_module.RestCatalogServer(
            service,
            args.host,
            args.port,
            token=token,
            issuer=issuer,
            insecure=args.insecure,
            prefix=args.prefix,
            limits=limits,
            server_limits=server_limits,
            idempotency_lifetime_s=args.idempotency_lifetime,
        )
    except OSError as err:
        catalog.close()
        raise ConfigError(
            f"calving catalog serve: cannot listen on {args.host}:{args.port} "
            f"({err.strerror or err})"
        ) from None
    except BaseException:
        catalog.close()
        raise
    stop = threading.Event()
    handlers = {
        sig: signal.signal(sig, lambda _signum, _frame: stop.set())
        for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        server.start()
        print(f"calving catalog serve: listening on {server.url}", flush=True)
        stop.wait()
    finally:
        server.stop()
        catalog.close()
        for sig, previous in handlers.items():
            signal.signal(sig, previous)
    return 0


def _allowed(prefixes: list[str]) -> tuple[str, ...]:
    from calving.commit.catalog.locations import canonical
    from calving.commit.errors import InvalidLocationError

    out = []
    for prefix in prefixes:
        try:
            out.append(canonical(prefix))
        except InvalidLocationError as err:
            raise ConfigError(f"--allowed-location {prefix!r}: {err}") from None
    return tuple(out)


def _token(name: str | None, secrets: Secrets, flag: str) -> str | None:
    if name is None:
        return None
    value = os.environ.get(name)
    if not value:
        raise ConfigError(f"{flag}: environment variable {name} is not set or empty")
    secrets.add(value)
    return value


def _vended(name: str | None, secrets: Secrets) -> dict[str, str]:
    """Storage properties to vend, a JSON object in environment variable ``name``."""
    text = _token(name, secrets, "--vend-io-env")
    if text is None:
        return {}
    try:
        props = json.loads(text)
    except json.JSONDecodeError:
        props = None
    if not isinstance(props, dict) or not all(isinstance(v, str) for v in props.values()):
        raise ConfigError(f"--vend-io-env: {name} must hold a JSON object of string properties")
    for value in props.values():
        secrets.add(value)
    return {str(k): v for k, v in props.items()}


def _issuer(args: argparse.Namespace, secrets: Secrets) -> TokenIssuer | None:
    """OAuth2 client credentials from ``--client-credential-env NAME``."""
    from calving.ingest.serve.tokens import TokenIssuer

    credential = _token(args.client_credential_env, secrets, "--client-credential-env")
    if credential is None:
        return None
    if args.token_ttl <= 0:
        raise ConfigError("--token-ttl: must be a positive number of seconds")
    try:
        return TokenIssuer(credential, ttl_s=args.token_ttl)
    except ValueError:
        raise ConfigError(
            f"--client-credential-env: {args.client_credential_env} must hold "
            "client_id:client_secret"
        ) from None


def _open(args: argparse.Namespace, secrets: Secrets) -> SqlCatalog:
    from calving.commit.io import FileIO
    from calving.ingest.catalogs import file_io, open_sql_catalog

    if args.config is not None:
        from calving.ingest.config.loader import load_config

        secrets.add_config_file(args.config)
        table_cfg = load_config(args.config).table
        if table_cfg.catalog_kind != "sql":
            raise ConfigError("table.catalog: calving catalog serve needs a SQL catalog")
        secrets.add_url(table_cfg.catalog)
        return open_sql_catalog(
            table_cfg.catalog_name, table_cfg.catalog, table_cfg.warehouse, file_io(table_cfg)
        )
    secrets.add_url(args.catalog)
    if "://" not in args.catalog or args.catalog.startswith("file:"):
        raise ConfigError("--catalog: calving catalog serve needs a SQL catalog URL")
    return open_sql_catalog(args.catalog_name, args.catalog, args.warehouse, FileIO(),
                            key="--catalog")  # fmt: skip
