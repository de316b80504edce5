"""``calving catalog serve``: the Iceberg REST catalog protocol over calving's SQL catalog.

    calving catalog serve (--config F | --catalog URL --warehouse W)
                          [--host 127.0.0.1] [--port 8181] [--token-env NAME]

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
    from calving.commit.catalog.rest.tokens import TokenIssuer

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
        "Single tenant: one catalog, an optional static bearer token, no access control.",
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


def main(args: argparse.Namespace, secrets: Secrets) -> int:
    from calving.commit.catalog.rest.server import RestCatalogServer
    from calving.commit.catalog.rest.service import CatalogService

    logging.getLogger("calving.rest").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    token = _token(args.token_env, secrets, "--token-env")
    issuer = _issuer(args, secrets)
    catalog = _open(args, secrets)
    server = RestCatalogServer(
        CatalogService(catalog, vended=_vended(args.vend_io_env, secrets)),
        args.host,
        args.port,
        token=token,
        prefix=args.prefix,
        issuer=issuer,
    )
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
    from calving.commit.catalog.rest.tokens import TokenIssuer

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
