"""``[table]``: the Iceberg table the stream writes, its catalog, schema and partitioning.

Catalogs by URI scheme:

* ``sqlite:////abs/catalog.db`` (or ``sqlite:///relative.db``, relative to the config
  file) and ``postgresql+psycopg://user:${env:PGPASSWORD}@host/db``: the SQL catalog
  (Iceberg JDBC / pyiceberg tables); ``warehouse`` is required.
* ``file:///abs/warehouse``: the filesystem catalog; the path is the warehouse.
* ``rest+http://host:port/base`` (or ``rest+https://``): an Iceberg REST catalog at
  ``http://host:port/base``; ``warehouse`` is optional (the server's ``/v1/config`` may
  name it). ``[table.catalog]`` (see ``calving.ingest.config.catalog``) gives a REST
  catalog's token, OAuth2 credential, headers and timeout, or any catalog by ``type``.

The schema is either declared (``[[table.columns]]``) or inferred from the first records
(``infer_schema = true``); declared columns then fix their own types and the sample adds
the rest. Identifier fields are required columns (they default to ``required = true``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from calving.commit.catalog.base import check_ident
from calving.commit.errors import CalvingError, ConfigError, InvalidTablePropertyError
from calving.commit.io import to_uri
from calving.commit.spec.partition import PartitionSpec, PartitionSpecBuilder
from calving.commit.spec.properties import FIX_HINT, KNOWN
from calving.commit.spec.schema import Schema
from calving.commit.spec.transforms import IDENTITY, Transform, bucket, truncate
from calving.commit.spec.type_strings import check_type, parse_type, type_text
from calving.commit.spec.types import IcebergType, NestedField
from calving.commit.table.ledger import LEDGER_PREFIX
from calving.ingest.config.catalog import (
    CATALOG_KEYS,
    CATALOG_TYPES,
    RestSettings,
    checked_http_uri,
    parse_rest,
    rest_uri,
)
from calving.ingest.config.reader import Section
from calving.ingest.config.secrets import join_key, masked_repr

KEYS = (
    "catalog",
    "catalog_name",
    "warehouse",
    "name",
    "identifier_fields",
    "partition",
    "properties",
    "columns",
    "infer_schema",
    "infer_temporal",
    "io",
    "topic_map",
    "name_case",
    "invalid_characters",
)
COLUMN_KEYS = ("name", "type", "required", "doc")
CATALOG_EXAMPLES = (
    '"sqlite:////path/catalog.db", "postgresql+psycopg://...", "file:///warehouse", '
    '"rest+http://host:port" or a [table.catalog] table'
)
TRANSFORM_EXAMPLES = 'a transform such as "bucket(16, id)" or "day(ts)"'
_TRANSFORM = re.compile(
    r"^\s*(?:(?P<fn>[A-Za-z_]+)\s*\(\s*(?:(?P<n>\d+)\s*,\s*)?(?P<arg>[^(),\s]+)\s*\)"
    r"|(?P<col>[A-Za-z_][\w.]*))\s*$"
)
_SIMPLE_TRANSFORMS = ("identity", "year", "month", "day", "hour", "void")
#: Iceberg's bucket count / truncate width is a 32-bit signed int.
MAX_TRANSFORM_ARG = 2**31 - 1
#: Characters no table, namespace or column name may hold (NUL and other controls).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class TransformRangeError(ValueError):
    """A bucket count or truncate width outside Iceberg's 32-bit range."""


@dataclass(frozen=True)
class ColumnConfig:
    name: str
    #: The Iceberg type as written, normalised (``decimal(12, 2)``, ``list<string>``).
    type: str
    required: bool = False
    doc: str | None = None

    def iceberg_type(self, next_id: object = None) -> IcebergType:
        """The parsed type; nested ids from ``next_id()`` when given (else throwaway)."""
        if next_id is None:
            return check_type(self.type)
        return parse_type(self.type, next_id)  # type: ignore[arg-type]


@dataclass(frozen=True)
class PartitionFieldConfig:
    """One entry of ``table.partition``: ``bucket(16, id)`` -> column id, bucket[16]."""

    column: str
    transform: Transform
    text: str
    #: How errors show the entry: its repr, or ``<from ${env:NAME}>``.
    shown: str = ""


@dataclass(frozen=True, repr=False)
class TableConfig:
    #: Catalog URI (absolute): ``sqlite:////...``, ``postgresql+psycopg://...``, ``file:///...``.
    catalog: str
    name: str
    catalog_name: str = "calving"
    #: Where new tables' files go: a ``file://`` or ``s3://`` URI (local paths made URIs).
    warehouse: str | None = None
    identifier_fields: tuple[str, ...] = ()
    partition: tuple[PartitionFieldConfig, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    columns: tuple[ColumnConfig, ...] = ()
    infer_schema: bool = False
    #: With infer_schema: ISO-8601 strings become timestamptz / timestamp / date columns.
    infer_temporal: bool = True
    #: FileIO properties (``s3.endpoint``, ``s3.access-key-id`` ...), Iceberg's names.
    io: dict[str, str] = field(default_factory=dict)
    #: A REST catalog's settings (``table.catalog = "rest+http://..."`` or a
    #: ``[table.catalog]`` table with ``type = "rest"``); None for SQL and filesystem.
    rest: RestSettings | None = None
    #: Many tables (whole-database CDC): ``name`` is a template (``{schema}.{table}``) or
    #: ``topic_map`` names tables by topic; ``calving.ingest.config.router`` decides per topic.
    topic_map: dict[str, str] = field(default_factory=dict)
    name_case: str = "lower"
    invalid_characters: str = "replace"
    env_keys: frozenset[str] = field(default_factory=frozenset, compare=False, repr=False)

    def __repr__(self) -> str:
        return masked_repr(self)

    @property
    def routed(self) -> bool:
        """True when the pipeline writes many tables, routed per topic."""
        return "{" in self.name or bool(self.topic_map)

    @property
    def ident(self) -> tuple[str, ...]:
        return tuple(self.name.split("."))

    @property
    def namespace(self) -> tuple[str, ...]:
        return self.ident[:-1]

    @property
    def catalog_kind(self) -> str:
        """``"sql"``, ``"filesystem"`` or ``"rest"``."""
        if self.rest is not None:
            return "rest"
        return "filesystem" if self.catalog.startswith("file:") else "sql"

    def column(self, name: str) -> ColumnConfig | None:
        return next((c for c in self.columns if c.name == name), None)

    def schema(self) -> Schema:
        """The declared columns as an Iceberg schema: top-level ids 1..n, nested ids after."""
        if not self.columns:
            raise ConfigError("table.columns: no columns declared (the schema is inferred)")
        return schema_from_columns(self.columns, self.identifier_fields)

    def partition_spec(self, schema: Schema) -> PartitionSpec:
        return build_spec(schema, self.partition)


def schema_from_columns(
    columns: Sequence[ColumnConfig], identifier_fields: Sequence[str], first_id: int = 1
) -> Schema:
    ids = iter(range(first_id + len(columns), 10**9))
    fields = tuple(
        NestedField(first_id + i, c.name, c.iceberg_type(lambda: next(ids)), c.required, c.doc)
        for i, c in enumerate(columns)
    )
    by_name = {f.name: f.field_id for f in fields}
    return Schema(fields, identifier_field_ids=tuple(by_name[n] for n in identifier_fields))


def build_spec(schema: Schema, partition: Sequence[PartitionFieldConfig]) -> PartitionSpec:
    """The spec of ``partition`` over ``schema``; a ``ConfigError`` names the entry."""
    builder = PartitionSpecBuilder(schema)
    for i, p in enumerate(partition):
        try:
            builder.add(p.column, p.transform)
        except CalvingError as exc:
            shown = p.shown or repr(p.text)
            detail = str(exc) if shown == repr(p.text) else str(exc).replace(p.column, "<column>")
            raise ConfigError(f"table.partition[{i}]: {shown}: {detail}") from None
    try:
        return builder.build()
    except CalvingError as exc:
        raise ConfigError(f"table.partition: {exc}") from None


def parse_transform_text(text: str) -> tuple[str, Transform]:
    """``bucket(16, id)`` -> ("id", bucket[16]); ``id`` -> ("id", identity)."""
    m = _TRANSFORM.match(text)
    if m is None:
        raise ValueError(text)
    if m.group("col"):
        return m.group("col"), IDENTITY
    fn, n, arg = m.group("fn").lower(), m.group("n"), m.group("arg")
    if fn in ("bucket", "truncate"):
        if n is None:
            raise ValueError(text)
        if not 1 <= int(n) <= MAX_TRANSFORM_ARG:
            what = "bucket count" if fn == "bucket" else "truncate width"
            # Iceberg stores N as a 32-bit int; a larger one is unreadable to every engine.
            raise TransformRangeError(f"the {what} must be from 1 to {MAX_TRANSFORM_ARG}")
        return arg, (bucket if fn == "bucket" else truncate)(int(n))
    if fn in _SIMPLE_TRANSFORMS and n is None:
        return arg, Transform(fn)
    raise ValueError(text)


def parse_table(s: Section) -> TableConfig:
    """``[table]``, read in stages (each key read, and each error found, in this order):
    catalog and warehouse, naming, columns and identifier fields, partitioning and
    properties; then the whole, whose partitioning is checked against declared columns."""
    catalog, warehouse, rest = _catalog_and_warehouse(s)
    naming = _naming(s)
    declared, infer = _declared_columns(s, naming.routed)
    identifiers, columns = _identifier_columns(s, declared, infer)
    partition = parse_partition(s)
    properties = s.passthrough("properties")
    check_properties(s, properties)
    config = TableConfig(
        catalog=catalog,
        name=naming.name,
        catalog_name=s.string("catalog_name", "calving") or "calving",
        warehouse=warehouse,
        identifier_fields=identifiers,
        partition=partition,
        properties=properties,
        columns=columns,
        infer_schema=infer,
        infer_temporal=s.boolean("infer_temporal", True),
        io=s.passthrough("io"),
        rest=rest,
        topic_map=naming.topic_map,
        name_case=naming.name_case,
        invalid_characters=naming.invalid_characters,
        env_keys=s.env_names(),
    )
    s.finish()
    _check_partitioning(s, config)
    return config


def _catalog_and_warehouse(s: Section) -> tuple[str, str | None, RestSettings | None]:
    """``table.catalog`` and ``table.warehouse``: the catalog URI, the warehouse URI
    (a filesystem catalog's path; required with a SQL catalog), the REST settings
    (their warehouse defaults to ``table.warehouse``)."""
    catalog, rest = _catalog(s)
    warehouse = s.string("warehouse", what="a directory or URI such as s3://bucket/warehouse")
    if warehouse is not None:
        location = s.ctx.resolve_path(warehouse)
        warehouse = _location_uri(s, "warehouse", location, "a directory or a valid URI")
    if catalog.startswith("file:"):
        if warehouse is not None and warehouse != catalog.rstrip("/"):
            s.fail("warehouse", "differs from the filesystem catalog's path; omit it")
        warehouse = catalog.rstrip("/")
    elif warehouse is None and rest is None:
        s.fail("warehouse", "is required with a SQL catalog (where new tables' files go)")
    if rest is not None and rest.warehouse is None and warehouse is not None:
        rest = replace(rest, warehouse=warehouse)
    return catalog, warehouse, rest


@dataclass(frozen=True)
class _Naming:
    """How the stream names its table(s): ``table.name``, ``topic_map``, ``name_case``
    and ``invalid_characters``."""

    name: str
    topic_map: dict[str, str]
    name_case: str
    invalid_characters: str

    @property
    def routed(self) -> bool:
        """A template name or a topic map: many tables, routed per topic."""
        return "{" in self.name or bool(self.topic_map)


def _naming(s: Section) -> _Naming:
    name = s.required_string("name", what='"namespace.table"')
    topic_map = s.passthrough("topic_map")
    for topic, target in topic_map.items():
        key = join_key(s.key("topic_map"), topic)
        try:
            check_ident(tuple(target.split(".")))
        except CalvingError:
            raise ConfigError(
                f'{key}: expected "namespace.table", got {s.shown(key, target)}'
            ) from None
    name_case = s.string("name_case", "lower") or "lower"
    if name_case not in ("lower", "preserve"):
        s.fail(
            "name_case",
            f'expected "lower" or "preserve", got {s.shown(s.key("name_case"), name_case)}',
        )
    invalid = s.string("invalid_characters", "replace") or "replace"
    if invalid not in ("replace", "error"):
        shown = s.shown(s.key("invalid_characters"), invalid)
        s.fail("invalid_characters", f'expected "replace" or "error", got {shown}')
    naming = _Naming(name, topic_map, name_case, invalid)
    if not naming.routed:
        try:
            check_ident(tuple(name.split(".")))
        except CalvingError:
            s.fail("name", f'expected "namespace.table", got {s.shown(s.key("name"), name)}')
        check_name(s, "name", name, dotted=True)
    return naming


def _declared_columns(s: Section, routed: bool) -> tuple[list[tuple[ColumnConfig, bool]], bool]:
    """``[[table.columns]]`` (each with whether ``required`` was written) and
    ``infer_schema``; a routed name takes neither, nor ``identifier_fields`` or
    ``partition``, and an unrouted one needs one of the two."""
    declared = [_column(c) for c in s.table_list("columns", COLUMN_KEYS)]
    infer = s.boolean("infer_schema", False)
    if routed and (declared or infer):
        s.fail(
            "columns" if declared else "infer_schema",
            "a routed table name (a template or topic_map) takes each table's schema from "
            "its change events; declare no columns",
        )
    for name_ in ("identifier_fields", "partition"):
        if routed and s.has(name_):
            s.fail(
                name_,
                'is per table when the table name is routed: give it in [tables."<name or '
                'glob>"] sections',
            )
    if not declared and not infer and not routed:
        s.fail(
            "columns",
            "no columns declared; add [[table.columns]] entries or set infer_schema = true",
        )
    return declared, infer


def _identifier_columns(
    s: Section, declared: Sequence[tuple[ColumnConfig, bool]], infer: bool
) -> tuple[tuple[str, ...], tuple[ColumnConfig, ...]]:
    """``identifier_fields`` and the columns, identifier columns required unless written
    otherwise (which is an error); each identifier a declared column unless inferred."""
    identifiers = s.string_list("identifier_fields") or ()
    columns = tuple(
        replace(c, required=True) if c.name in identifiers and not given else c
        for c, given in declared
    )
    _no_duplicates(s, columns)
    for i, ident in enumerate(identifiers):
        key = f"{s.key('identifier_fields')}[{i}]"
        column = next((c for c in columns if c.name == ident), None)
        if column is None and not infer:
            raise ConfigError(f"{key}: {s.shown(key, ident)} is not a declared column")
        if column is not None and not column.required:
            raise ConfigError(
                f"{key}: {s.shown(key, ident)} is declared with required = false; "
                "identifier fields must be required"
            )
    if len(set(identifiers)) != len(identifiers):
        s.fail("identifier_fields", "names a column twice")
    return identifiers, columns


def _check_partitioning(s: Section, config: TableConfig) -> None:
    """Check now that partition columns and transforms fit the schema; with an inferred
    schema and undeclared partition columns this waits for the sample."""
    names = {c.name for c in config.columns}
    if config.columns and (
        not config.infer_schema or all(p.column.split(".")[0] in names for p in config.partition)
    ):
        config.partition_spec(_checked_schema(s, config))


def _catalog_uri(s: Section, name: str = "catalog") -> str:
    what = CATALOG_EXAMPLES
    uri = s.required_string(name, what=what)
    if uri.startswith("file:") or "://" not in uri:
        if "://" not in uri and not uri.startswith("file:"):
            s.fail(name, f"expected a URI such as {what}, got {s.shown(s.key(name), uri)}")
        return _location_uri(s, name, uri, "an absolute file:/// URI")
    # Imported here: SQLAlchemy takes 0.14 s to import, and an executor's Python
    # worker imports this module (through the config package) without parsing a URL.
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(uri)
    except ArgumentError:
        s.fail(name, f"not a valid database URL; expected {what}")
    backend = url.get_backend_name()
    if backend == "sqlite":
        database = url.database or ""
        if not database or database == ":memory:" or database.startswith("file:"):
            s.fail(name, "an SQLite catalog needs a database file path")
        # sqlite:///x.db is relative: anchor it at the config file, not the working dir.
        absolute = s.ctx.resolve_path(database)
        return url.set(database=absolute).render_as_string(hide_password=False)
    if backend != "postgresql":
        shown = repr(backend) if not s.is_env(name) else s.shown(s.key(name), uri)
        s.fail(name, f"catalog backend {shown} is not supported; expected {what}")
    return uri


def _catalog(s: Section) -> tuple[str, RestSettings | None]:
    """``table.catalog``: a URI string, or a ``[table.catalog]`` table with a ``type``."""
    if not isinstance(s.data.get("catalog"), dict):
        text = s.required_string("catalog", what=CATALOG_EXAMPLES)
        if text.startswith("rest+"):
            uri = rest_uri(s, "catalog", text)
            return f"rest+{uri}", RestSettings(uri)
        return _catalog_uri(s), None
    sub = s.table("catalog", CATALOG_KEYS)
    assert sub is not None
    kind = sub.string("type", required=True, choices=CATALOG_TYPES, what="the catalog type")
    uri = sub.required_string("uri", what="the catalog's URI")
    if kind == "rest":
        rest = parse_rest(sub, checked_http_uri(sub, "uri", uri), sub.string("warehouse"))
        sub.finish()
        return f"rest+{rest.uri}", rest
    for name in CATALOG_KEYS:
        if name not in ("type", "uri") and sub.has(name):
            sub.fail(name, f'is a REST catalog setting; type = "{kind}" takes only uri')
    catalog = _catalog_uri(sub, "uri")
    if (kind == "filesystem") != catalog.startswith("file:"):
        sub.fail("uri", f"does not name a {kind} catalog, got {sub.shown(sub.key('uri'), uri)}")
    sub.finish()
    return catalog, None


def _location_uri(s: Section, name: str, location: str, what: str) -> str:
    """``to_uri`` with its refusals (``file:relative``, a remote ``file://host/``) as a
    ``ConfigError`` naming the key."""
    try:
        return to_uri(location).rstrip("/")
    except (CalvingError, ValueError):  # ValueError: urlparse's, e.g. "s3://[bucket"
        s.fail(name, f"expected {what}, got {s.shown(s.key(name), location)}")


def _column(c: Section) -> tuple[ColumnConfig, bool]:
    """The column, and whether ``required`` was written (identifier columns default to
    required when it was not)."""
    name = c.required_string("name", what="a column name")
    check_name(c, "name", name)
    raw = c.required_string("type", what='an Iceberg type such as "long" or "decimal(10, 2)"')
    try:
        parsed = check_type(raw)
    except ConfigError as exc:
        c.fail("type", str(exc))
    given = c.has("required")
    column = ColumnConfig(
        name=name,
        type=type_text(parsed),
        required=c.boolean("required", False),
        doc=c.string("doc"),
    )
    c.finish()
    return column, given


def _no_duplicates(s: Section, columns: tuple[ColumnConfig, ...]) -> None:
    seen: set[str] = set()
    for i, c in enumerate(columns):
        if c.name in seen:
            raise ConfigError(f"{s.key('columns')}[{i}].name: column {c.name!r} is declared twice")
        seen.add(c.name)


def parse_partition(s: Section) -> tuple[PartitionFieldConfig, ...]:
    value = s.raw("partition")
    if value is None:
        return ()
    if not isinstance(value, list):
        s.wrong("partition", 'a list of transforms such as ["day(ts)", "bucket(16, id)"]', value)
    out = []
    for i, item in enumerate(value):
        key = f"{s.key('partition')}[{i}]"
        if not isinstance(item, str):
            s.wrong("", TRANSFORM_EXAMPLES, item, key=key)
        shown = s.shown(key, item)
        try:
            column, transform = parse_transform_text(item)
        except TransformRangeError as exc:
            raise ConfigError(f"{key}: {exc}, got {shown}") from None
        except (ValueError, CalvingError):
            raise ConfigError(f"{key}: expected {TRANSFORM_EXAMPLES}, got {shown}") from None
        out.append(PartitionFieldConfig(column, transform, item, shown))
    return tuple(out)


def _checked_schema(s: Section, config: TableConfig) -> Schema:
    try:
        return config.schema()
    except CalvingError as exc:
        raise ConfigError(f"{s.path}: {exc}") from None


def check_name(s: Section, name: str, value: str, *, dotted: bool = False) -> None:
    """Names go into catalogs, file paths and Parquet schemas: no NUL or control
    characters, and (``dotted``: ``namespace.table``) no blank parts."""
    if _CONTROL.search(value):
        s.fail(name, "must not contain NUL or other control characters")
    if dotted and any(not part.strip() for part in value.split(".")):
        s.fail(
            name,
            f'expected "namespace.table" with non-empty parts, got {s.shown(s.key(name), value)}',
        )


def check_properties(s: Section, properties: dict[str, str]) -> None:
    """``[table.properties]``: no ledger keys, and every property calving reads has a
    usable value (the typed accessor's check), so a bad one never reaches a table."""
    for key, raw in properties.items():
        where = join_key(s.key("properties"), key)
        if key.startswith(LEDGER_PREFIX):
            raise ConfigError(f"{where}: the exactly-once ledger is written by calving only")
        prop = KNOWN.get(key)
        if prop is None:
            continue
        try:
            prop.parse(raw)
        except InvalidTablePropertyError as exc:
            text = str(exc).replace(f"; {FIX_HINT}", "")
            detail = text[text.rfind(": want ") + 2 :]
            raise ConfigError(f"{where}: {detail}, got {s.shown(where, raw)}") from None
