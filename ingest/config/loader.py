"""A whole pipeline config: TOML file -> ``CalvingConfig``, checked across sections."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from calving.commit.errors import ConfigError
from calving.ingest.config.format import KEYS as FORMAT_KEYS
from calving.ingest.config.format import FormatConfig, parse_format
from calving.ingest.config.maintenance import (
    MAINTENANCE_KEYS,
    MaintenanceConfig,
    parse_maintenance,
)
from calving.ingest.config.metrics import METRICS_KEYS, MetricsConfig, parse_metrics
from calving.ingest.config.reader import Context, Section
from calving.ingest.config.runtime import (
    SINK_KEYS,
    SPARK_KEYS,
    SinkConfig,
    SparkConfig,
    parse_sink,
    parse_spark,
)
from calving.ingest.config.secrets import Redactor, resolve_env
from calving.ingest.config.source import KEYS as SOURCE_KEYS
from calving.ingest.config.source import SourceConfig, parse_source
from calving.ingest.config.table import KEYS as TABLE_KEYS
from calving.ingest.config.table import TableConfig, parse_table

if TYPE_CHECKING:
    # The router's module reads config sections itself: imported where it is used.
    from calving.ingest.config.router import TableRouter

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport
    import tomli as tomllib

SECTIONS = ("source", "format", "table", "tables", "sink", "spark", "metrics", "maintenance")


#: Formats a many-table pipeline reads: each event carries its table's key and schema.
ROUTED_FORMATS = ("debezium-json", "debezium-avro")


@dataclass(frozen=True)
class CalvingConfig:
    """One streaming pipeline: Kafka ``source`` decoded per ``format`` into ``table``,
    written by ``sink`` in the ``spark`` session."""

    source: SourceConfig
    format: FormatConfig
    table: TableConfig
    sink: SinkConfig
    spark: SparkConfig
    #: ``[metrics]``: the Prometheus endpoint (off by default) and the per-batch log line.
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    #: ``[maintenance]``: ``calving maintain``'s policy and inline maintenance.
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    #: Many tables (``table.name`` a template or ``table.topic_map``): which table each
    #: topic's change events go to, with the ``[tables."..."]`` settings; else None.
    router: TableRouter | None = None
    #: Where the config came from (a file path, or the name given to ``parse_config``).
    origin: str = "<config>"
    #: Masks values from ``${env:...}`` in messages of later stages (creating the table).
    redact: Redactor = field(default_factory=Redactor, compare=False, repr=False)


def load_config(
    path: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> CalvingConfig:
    """Read and check a TOML config file. Relative paths inside it are relative to the
    file's directory; ``${env:NAME}`` references are read from ``environ`` (default: the
    process environment). Every problem is a ``ConfigError`` naming the file and key."""
    path = os.fspath(path)
    data = read_toml(path)
    base_dir = os.path.dirname(os.path.abspath(path))
    return parse_config(data, path, base_dir=base_dir, environ=environ)


def parse_config(
    data: Mapping[str, Any],
    source_name: str = "<config>",
    *,
    base_dir: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> CalvingConfig:
    """Check an already parsed TOML document (e.g. built in code by the demo).

    ``base_dir`` anchors relative paths (default: the working directory)."""
    ctx = Context(base_dir=base_dir or os.getcwd())
    env = os.environ if environ is None else environ
    try:
        values: dict[str, str] = {}
        resolved = resolve_env(dict(data), "", env, ctx.env_keys, values)
        ctx.redact = Redactor.of(ctx.env_keys, values, env)
        return _parse(resolved, source_name, ctx)
    except ConfigError as exc:
        # Every message passes the redactor: no error path can echo an env value.
        error = ConfigError(f"{source_name}: {ctx.redact.message(str(exc))}")
    # Raised outside the handler, so the error carries no chained context: a reporter
    # walking __context__ must not find the unredacted original.
    raise error


def _parse(resolved: dict[str, Any], origin: str, ctx: Context) -> CalvingConfig:
    root = Section(resolved, "", ctx, SECTIONS)
    source = root.table("source", SOURCE_KEYS, required=True)
    fmt = root.table("format", FORMAT_KEYS, required=True)
    table = root.table("table", TABLE_KEYS, required=True)
    sink = root.table("sink", SINK_KEYS, required=True)
    spark = root.table("spark", SPARK_KEYS)
    metrics = root.table("metrics", METRICS_KEYS)
    maintenance = root.table("maintenance", MAINTENANCE_KEYS)
    tables = root.raw("tables")
    root.finish()
    assert source is not None and fmt is not None and table is not None and sink is not None

    source_cfg = parse_source(source)
    format_cfg = parse_format(fmt)
    table_cfg = parse_table(table)
    sink_cfg = parse_sink(sink, table_cfg.name)
    config = CalvingConfig(
        source=source_cfg,
        format=format_cfg,
        table=table_cfg,
        sink=sink_cfg,
        spark=parse_spark(spark),
        metrics=parse_metrics(metrics),
        maintenance=parse_maintenance(maintenance),
        origin=origin,
        redact=ctx.redact,
        router=_router(table_cfg, source_cfg, sink_cfg, tables, ctx),
    )
    _check_across(config)
    return config


def _router(
    table: TableConfig, source: SourceConfig, sink: SinkConfig, tables: Any, ctx: Context
) -> TableRouter | None:
    if not table.routed:
        if tables is not None:
            raise ConfigError(
                '[tables."..."]: per-table settings need a routed table name (a template '
                'such as table.name = "{schema}.{table}", or table.topic_map)'
            )
        return None
    from calving.ingest.config.router import TableRouter

    if source.assign:
        raise ConfigError("source.assign: a routed pipeline reads source.topics or topic_pattern")
    return TableRouter.from_config(
        name=table.name,
        topics=source.topics,
        topic_pattern=source.topic_pattern,
        topic_map=table.topic_map,
        tables=tables,
        name_case=table.name_case,
        invalid_characters=table.invalid_characters,
        reserved=(sink.transaction_topic,) if sink.transaction_topic else (),
        ctx=ctx,
    )


def _check_across(config: CalvingConfig) -> None:
    fmt, table = config.format, config.table
    if config.sink.transaction_topic is not None and config.router is None:
        raise ConfigError(
            "sink.transaction_topic: source-transaction boundaries need a routed table name "
            '(many tables, e.g. table.name = "{schema}.{table}")'
        )
    if config.router is not None:
        if fmt.type not in ROUTED_FORMATS:
            raise ConfigError(
                f"format.type: a routed table name needs change events that carry their "
                f'table\'s schema and key ({" or ".join(ROUTED_FORMATS)}), got "{fmt.type}"'
            )
        return
    if fmt.keyed and not table.identifier_fields:
        raise ConfigError(
            f'table.identifier_fields: format.type "{fmt.type}" carries updates and deletes, '
            'so the table needs a primary key (e.g. identifier_fields = ["id"])'
        )
    if table.infer_schema and fmt.value_format == "avro":
        raise ConfigError(
            f'table.infer_schema: only JSON formats can be inferred, not "{fmt.type}"; '
            "declare [[table.columns]]"
        )


def read_toml(path: str) -> dict[str, Any]:
    """The TOML document in ``path``; a missing, unreadable or malformed file is a
    ``ConfigError`` naming it."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
