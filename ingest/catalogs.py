"""From ``[table]`` config to live objects: the catalog, the table (created or checked),
and the dead-letter table.

``ensure_table`` is idempotent and safe to run on every start: an existing table is the
source of truth and only ever gains what the config adds (missing columns, as optional;
type widenings the spec allows; configured properties). Anything the config asks for
that an existing table cannot become (an incompatible column type, other identifier
fields, another partitioning) is an error naming the config key and the field, never a
silent rewrite.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from calving.commit.catalog.base import Catalog, TableIdent, parse_ident
from calving.commit.catalog.filesystem import FilesystemCatalog
from calving.commit.catalog.sql import SqlCatalog
from calving.commit.errors import (
    CalvingError,
    CatalogUnavailableError,
    ConfigError,
    NoSuchTableError,
    SchemaError,
    TableAlreadyExistsError,
)
from calving.commit.io import FileIO
from calving.commit.spec.arrow import primitive_from_arrow
from calving.commit.spec.schema import Schema
from calving.commit.spec.type_strings import type_text
from calving.commit.spec.types import (
    IcebergType,
    NestedField,
    PrimitiveType,
    can_promote,
    same_shape,
)
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.actions.update_schema import AddColumn, UpdateSchema
from calving.commit.table.table import Table, create_table
from calving.ingest.config.catalog import REST_PREFIXES, RestSettings
from calving.ingest.config.format import FormatConfig
from calving.ingest.config.preflight import check_table_properties, local_path
from calving.ingest.config.schema import config_schema
from calving.ingest.config.table import TableConfig, build_spec
from calving.ingest.decode import DEAD_LETTER_SCHEMA

log = logging.getLogger("calving.catalogs")


@dataclass(frozen=True)
class _Column:
    """A column the table must have: where it is configured, its name, type, doc."""

    key: str  # config key, for errors (``table.columns[2]``)
    name: str
    field_type: IcebergType
    required: bool = False
    doc: str | None = None


# ---------------------------------------------------------------- catalog


def file_io(table_cfg: TableConfig) -> FileIO:
    """The FileIO for the table's files, with ``[table.io]`` properties (S3 endpoint,
    credentials ...)."""
    return FileIO(table_cfg.io)


def open_catalog(table_cfg: TableConfig, io: FileIO | None = None) -> Catalog:
    """The catalog ``table.catalog`` names: SQL (SQLite / PostgreSQL), filesystem or
    REST."""
    io = io or file_io(table_cfg)
    if table_cfg.rest is not None:
        return open_rest_catalog(table_cfg.catalog_name, table_cfg.rest, io)
    if table_cfg.catalog_kind == "filesystem":
        try:
            return FilesystemCatalog(table_cfg.catalog, name=table_cfg.catalog_name, io=io)
        except ConfigError as exc:
            raise ConfigError(f"table.catalog: {exc}") from None
    return open_sql_catalog(table_cfg.catalog_name, table_cfg.catalog, table_cfg.warehouse, io)


def check_catalog_exists(uri: str, key: str) -> None:
    """Commands that read or change an existing table never create a catalog: a SQLite
    database file or a filesystem catalog directory that does not exist is one line
    naming ``key`` (nothing is created)."""
    path: str | None = None
    if uri.startswith("sqlite:"):
        database = uri.split(":///", 1)[1].split("?", 1)[0] if ":///" in uri else ""
        path = urllib.parse.unquote(database) if database not in ("", ":memory:") else None
    elif uri.startswith("file:") or "://" not in uri:
        path = local_path(uri)
    if path is not None and not os.path.exists(path):
        raise ConfigError(
            f"{key}: no catalog at {path!r}; nothing was created (calving run creates it)"
        )


def open_catalog_uri(uri: str, name: str, io: FileIO, key: str = "--catalog") -> Catalog:
    """The catalog a bare URI names (``--catalog`` of the admin commands): SQL,
    ``file:`` / a path (filesystem) or ``rest+http(s)://`` (REST, no credentials: a
    catalog that needs them is reached with ``--config``). A local catalog must exist
    (``check_catalog_exists``)."""
    check_catalog_exists(uri, key)
    if uri.startswith(REST_PREFIXES):
        base = uri[len("rest+") :].rstrip("/")
        parts = urllib.parse.urlsplit(base)
        if not parts.hostname or parts.username or parts.password:
            raise ConfigError(
                f"{key}: expected rest+http://host:port/path without credentials in it"
            )
        return open_rest_catalog(name, RestSettings(base), io, key=key)
    if uri.startswith("file:") or "://" not in uri:
        try:
            return FilesystemCatalog(uri, name=name, io=io)
        except ConfigError as exc:
            raise ConfigError(f"{key}: {exc}") from None
    return open_sql_catalog(name, uri, None, io, key=key)


def open_rest_catalog(
    name: str, rest: RestSettings, io: FileIO, key: str = "table.catalog"
) -> Catalog:
    """``RestCatalog`` for ``rest``; a server that cannot be reached, refuses the
    credentials or answers nonsense is one line naming ``table.catalog`` (never a
    secret: the transport's messages hold none)."""
    from calving.commit.catalog.rest.client import RestCatalog

    try:
        return RestCatalog(
            name,
            rest.uri,
            warehouse=rest.warehouse,
            token=rest.token,
            credential=rest.credential,
            oauth2_server_uri=rest.oauth2_server_uri,
            scope=rest.scope,
            headers=rest.headers,
            io=io,
            timeout_s=rest.timeout_s,
        )
    except CatalogUnavailableError as exc:
        raise CatalogUnavailableError(
            f"{key}: REST catalog {rest.uri} unavailable: {exc}"
        ) from None
    except CalvingError as exc:
        raise ConfigError(f"{key}: REST catalog {rest.uri}: {exc}") from None


#: Database driver modules and the calving extra that installs them.
_DRIVER_EXTRAS = {"psycopg": "postgres", "psycopg2": "postgres", "psycopg_binary": "postgres"}


def open_sql_catalog(
    name: str, url: str, warehouse: str | None, io: FileIO, key: str = "table.catalog"
) -> SqlCatalog:
    """``SqlCatalog`` for ``url``; every error names ``key`` and never shows the URL's
    password (a URL that does not parse, a missing driver, a driver's own error)."""
    check_catalog_url(url, key)
    try:
        return SqlCatalog(name, url, warehouse, io=io)
    except ConfigError as exc:
        raise ConfigError(f"{key}: {mask_secret(str(exc), url)}") from None
    except ModuleNotFoundError as exc:
        raise _missing_driver(exc, url, key) from None
    except sa_exc.ArgumentError as exc:
        raise ConfigError(
            f"{key}: not a usable database URL ({mask_secret(str(exc), url)})"
        ) from None
    except CalvingError as exc:
        masked = mask_secret(str(exc), url)
        if masked != str(exc):
            exc.args = (masked,)  # the type stays: callers tell errors apart by it
            raise exc from None
        raise


def _missing_driver(exc: ModuleNotFoundError, url: str, key: str) -> ConfigError:
    module = (exc.name or "").split(".")[0]
    extra = _DRIVER_EXTRAS.get(module)
    hint = f"install calving[{extra}]" if extra else f"install the {module!r} package"
    return ConfigError(
        f"{key}: the {_scheme(url)} catalog needs the Python module {module!r}, which "
        f"is not installed: {hint}"
    )


def check_sql_catalog_before_create(url: str, key: str = "table.catalog") -> None:
    """What can be known of a SQL catalog URL without connecting (so before the broker
    is asked and before anything is created): its user name and password parse, and
    its driver is installed. Other URLs (REST, filesystem) pass."""
    if url.startswith((*REST_PREFIXES, "file:")) or "://" not in url:
        return
    check_catalog_url(url, key)
    try:
        sa.engine.make_url(url).get_dialect().import_dbapi()
    except ModuleNotFoundError as exc:
        raise _missing_driver(exc, url, key) from None
    except (sa_exc.ArgumentError, sa_exc.NoSuchModuleError, AttributeError):
        return  # opening the catalog reports it, naming the key


def check_catalog_url(url: str, key: str = "table.catalog") -> None:
    """Refuse a URL whose user name or password holds characters that break URL parsing
    (``@``, ``/``, ``?``, ``#``): the driver would connect to the wrong host and name a
    piece of the password in its error. The message never shows the password."""
    scheme, sep, rest = url.partition("://")
    if not sep or rest.startswith("/") or "@" not in rest:
        return
    userinfo = rest.rpartition("@")[0]
    if any(c in userinfo for c in "@/?#"):
        raise ConfigError(
            f"{key}: the user name or password in the {scheme} URL contains '@', '/', '?' or "
            "'#'; percent-encode it (@ as %40, / as %2F, ? as %3F, # as %23, % as %25), "
            "e.g. with urllib.parse.quote(password, safe='')"
        )


def mask_secret(text: str, url: str) -> str:
    """``text`` with ``url``'s password (raw or as parsed) replaced by ``***``."""
    try:
        password = sa.engine.make_url(url).password
    except (sa_exc.ArgumentError, ValueError):
        password = None
    userinfo = url.partition("://")[2].rpartition("@")[0]
    raw = userinfo.partition(":")[2]
    for secret in sorted({str(p) for p in (password, raw) if p}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _scheme(url: str) -> str:
    return url.partition("://")[0] or "SQL"


# ---------------------------------------------------------------- the data table


def ensure_table(
    catalog: Catalog,
    io: FileIO,
    table_cfg: TableConfig,
    sample: pa.Table | None = None,
    *,
    fmt: FormatConfig | None = None,
) -> Table:
    """Load the configured table, bringing it up to the config, or create it.

    A new table gets the declared schema, identifier fields, partition spec and
    properties (format version 3). With ``infer_schema`` the schema comes from
    ``sample``, the Kafka source's records (a table with a binary ``value`` column and,
    for upsert formats, ``key``); ``fmt`` says how to read them (default plain JSON).
    """
    ident = table_cfg.ident
    catalog.create_namespace_if_missing(ident[:-1])
    try:
        table = Table.load(catalog, ident, io)
    except NoSuchTableError:
        schema = config_schema(table_cfg, sample, fmt)
        spec = build_spec(schema, table_cfg.partition)
        try:
            return create_table(
                catalog, ident, schema, spec=spec, properties=table_cfg.properties, io=io
            )
        except TableAlreadyExistsError:
            table = Table.load(catalog, ident, io)  # created concurrently: check it instead
    # A bad property on the table fails now, naming the repair command, not at a commit.
    check_table_properties(table_cfg.name, table.metadata.properties, table_cfg.properties)
    _check_identifiers(table, table_cfg)
    _check_partitioning(table, table_cfg)
    columns = [
        _Column(f"table.columns[{i}]", c.name, c.iceberg_type(), c.required, c.doc)
        for i, c in enumerate(table_cfg.columns)
    ]
    _evolve(table, columns)
    changed = {
        k: v for k, v in table_cfg.properties.items() if table.metadata.properties.get(k) != v
    }
    if changed:
        table.commit_or_raise(UpdateProperties(set=changed))
    return table


def _check_identifiers(table: Table, cfg: TableConfig) -> None:
    have = table.metadata.schema.identifier_field_names
    if cfg.identifier_fields and set(have) != set(cfg.identifier_fields):
        raise SchemaError(
            f"table.identifier_fields: table {table.name} has identifier fields {list(have)}, "
            f"the config says {list(cfg.identifier_fields)}; calving does not change them"
        )


def _check_partitioning(table: Table, cfg: TableConfig) -> None:
    if not cfg.partition:
        return
    m = table.metadata
    have = [(m.schema.column_name(f.source_id), str(f.transform)) for f in m.spec.fields]
    want = [(p.column, str(p.transform)) for p in cfg.partition]
    if have != want:
        shown = ", ".join(f"{t}({c})" for c, t in have) or "nothing"
        raise SchemaError(
            f"table.partition: table {table.name} is partitioned by {shown}, the config says "
            f"{[p.text for p in cfg.partition]}; calving does not change an existing table's "
            "partitioning"
        )


def _evolve(table: Table, columns: Sequence[_Column]) -> None:
    """Add missing columns (optional) and widen types; refuse incompatible ones."""
    struct = table.metadata.schema.as_struct()
    add: list[AddColumn] = []
    promote: list[tuple[str, PrimitiveType]] = []
    for c in columns:
        existing = struct.field_by_name(c.name)
        if existing is None:
            if c.required:
                log.info("column %r is added as optional: existing rows have no value", c.name)
            add.append(AddColumn(c.name, c.field_type, c.doc))
        elif same_shape(existing.field_type, c.field_type) or can_promote(
            c.field_type, existing.field_type
        ):
            continue  # equal, or the table is already wider than the config asks
        elif isinstance(c.field_type, PrimitiveType) and can_promote(
            existing.field_type, c.field_type
        ):
            promote.append((c.name, c.field_type))
        else:
            raise SchemaError(
                f"{c.key}: column {c.name!r} is declared as {type_text(c.field_type)}, but table "
                f"{table.name} has it as {type_text(existing.field_type)}, and that cannot change "
                "(only int->long, float->double, date->timestamp and wider decimals can)"
            )
    if add or promote:
        table.commit_or_raise(UpdateSchema(add=tuple(add), promote=tuple(promote)))


# ---------------------------------------------------------------- dead letters

_DEAD_LETTER_DOCS = {
    "topic": "Kafka topic of the record",
    "partition": "Kafka partition of the record",
    "offset": "Kafka offset of the record",
    "timestamp": "Kafka timestamp of the record",
    "key": "the record's key bytes, as received",
    "value": "the record's value bytes, as received",
    "error": "why the record could not be decoded",
    "error_type": "the typed error's class name",
    "decoder": "the decoder that refused the record",
}


def dead_letter_schema() -> Schema:
    """``calving.ingest.decode.DEAD_LETTER_SCHEMA`` as an Iceberg schema (all columns optional:
    the sink writes whatever the record had)."""
    fields = []
    for i, f in enumerate(DEAD_LETTER_SCHEMA, start=1):
        try:
            t = primitive_from_arrow(f.type)
        except SchemaError:
            raise SchemaError(
                f"dead-letter column {f.name!r}: no Iceberg type for {f.type}"
            ) from None
        fields.append(NestedField(i, f.name, t, False, _DEAD_LETTER_DOCS.get(f.name)))
    return Schema(tuple(fields))


def ensure_dead_letter_table(catalog: Catalog, io: FileIO, name: str | TableIdent) -> Table:
    """Load or create the unpartitioned dead-letter table ``name`` (``"ns.table"``)."""
    try:
        ident = parse_ident(name) if isinstance(name, str) else tuple(name)
    except CalvingError:
        raise ConfigError(
            f'sink.dead_letter_table: expected "namespace.table", got {name!r}'
        ) from None
    catalog.create_namespace_if_missing(ident[:-1])
    schema = dead_letter_schema()
    try:
        table = Table.load(catalog, ident, io)
    except NoSuchTableError:
        try:
            return create_table(catalog, ident, schema, io=io)
        except TableAlreadyExistsError:
            table = Table.load(catalog, ident, io)  # created concurrently
    check_table_properties(".".join(ident), table.metadata.properties)
    _evolve(
        table,
        [
            _Column(
                f"sink.dead_letter_table ({'.'.join(ident)})", f.name, f.field_type, False, f.doc
            )
            for f in schema.fields
        ],
    )
    return table
