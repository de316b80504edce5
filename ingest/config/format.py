"""``[format]``: how record bytes become rows, and the decoder that does it.

| type            | value                         | key                      | decoder              |
|-----------------|-------------------------------|--------------------------|----------------------|
| json            | one JSON object per record    | unused                   | ``JsonValueDecoder`` |
| avro            | Confluent Avro                | unused                   | ``ConfluentAvroDecoder`` |
| debezium-json   | Debezium envelope, JSON       | ``key_format`` (json)    | ``DebeziumDecoder``  |
| debezium-avro   | Debezium envelope, Conf. Avro | ``key_format`` (avro)    | ``DebeziumDecoder``  |
| upsert-json     | the row as JSON; null deletes | ``key_format`` (json)    | ``KeyUpsertDecoder`` |
| upsert-avro     | the row as Conf. Avro; null deletes | ``key_format`` (avro) | ``KeyUpsertDecoder`` |

Avro (value or key) needs a schema source: ``schema_registry_url`` (registry credentials
come from CALVING_SCHEMA_REGISTRY_USERNAME / _PASSWORD) or ``schema_dir`` (``<id>.avsc``
files).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from calving.commit.errors import ConfigError
from calving.commit.spec.schema import Schema
from calving.ingest.config.reader import Section
from calving.ingest.config.secrets import masked_repr
from calving.ingest.decode import (
    AvroOptions,
    ConfluentAvroDecoder,
    DebeziumDecoder,
    DebeziumOptions,
    Decoder,
    JsonOptions,
    JsonValueDecoder,
    KeyUpsertDecoder,
    open_schema_source,
)
from calving.ingest.decode.coerce import EpochUnit
from calving.ingest.decode.schema_registry import SchemaSource

FormatType = Literal["json", "avro", "debezium-json", "debezium-avro", "upsert-json", "upsert-avro"]
FORMAT_TYPES: tuple[FormatType, ...] = (
    "json",
    "avro",
    "debezium-json",
    "debezium-avro",
    "upsert-json",
    "upsert-avro",
)
KEYS = (
    "type",
    "schema_registry_url",
    "schema_dir",
    "key_format",
    "case_insensitive",
    "epoch_unit",
    "naive_timestamps_as_utc",
    "decimal_handling_mode",
    "vectorized",
)
_EPOCH_UNITS = ("ms", "us", "ns", "auto", "none")


@dataclass(frozen=True, repr=False)
class FormatConfig:
    type: FormatType
    schema_registry_url: str | None = None
    schema_dir: str | None = None
    #: Debezium and key-upsert: how Kafka keys (the primary key) are encoded.
    key_format: Literal["json", "avro"] | None = None
    case_insensitive: bool = False
    #: Unit of bare integers in temporal columns; None rejects them.
    epoch_unit: EpochUnit | None = None
    naive_timestamps_as_utc: bool = False
    #: Debezium only: how the connector encoded decimals (its decimal.handling.mode).
    decimal_handling_mode: Literal["precise", "string", "double"] = "precise"
    #: Batch decoding: Arrow's JSON reader (json, debezium-json) or Avro read a batch at a
    #: time (avro, debezium-avro) for the values it can take.
    vectorized: bool = True
    env_keys: frozenset[str] = field(default_factory=frozenset, compare=False, repr=False)

    def __repr__(self) -> str:
        return masked_repr(self)

    @property
    def value_format(self) -> Literal["json", "avro"]:
        return "avro" if self.type.endswith("avro") else "json"

    @property
    def envelope(self) -> Literal["plain", "debezium", "upsert"]:
        if self.type.startswith("debezium"):
            return "debezium"
        return "upsert" if self.type.startswith("upsert") else "plain"

    @property
    def keyed(self) -> bool:
        """True if the format carries deletes and updates (the table needs a key)."""
        return self.envelope != "plain"

    @property
    def needs_schema_source(self) -> bool:
        return "avro" in (self.value_format, self.key_format)

    def schema_source(self) -> SchemaSource | None:
        if self.schema_registry_url is not None:
            return _open(self.schema_registry_url, "format.schema_registry_url")
        if self.schema_dir is not None:
            return _open(self.schema_dir, "format.schema_dir")
        return None


def _open(location: str, key: str) -> SchemaSource:
    try:
        return open_schema_source(location)
    except ConfigError as exc:
        raise ConfigError(f"{key}: {exc}") from None


def parse_format(s: Section) -> FormatConfig:
    kind = s.required_string(
        "type", what=" | ".join(f'"{t}"' for t in FORMAT_TYPES), choices=FORMAT_TYPES
    )
    debezium = kind.startswith("debezium")
    keyed = debezium or kind.startswith("upsert")
    value_format = "avro" if kind.endswith("avro") else "json"

    key_format = s.string("key_format", choices=("json", "avro"))
    if key_format is not None and not keyed:
        s.fail("key_format", f'only applies to debezium-* and upsert-* formats, not "{kind}"')
    if keyed and key_format is None:
        key_format = value_format  # connectors and producers use one converter for both
    mode = s.string("decimal_handling_mode", choices=("precise", "string", "double"))
    if mode is not None and not debezium:
        s.fail("decimal_handling_mode", f'only applies to debezium-* formats, not "{kind}"')
    vectorized = s.raw("vectorized")
    if vectorized is not None and kind.startswith("upsert"):
        s.fail("vectorized", f'does not apply to the "{kind}" format')
    unit = s.string("epoch_unit", choices=_EPOCH_UNITS)
    if unit is None:
        # Debezium without a schema writes epoch integers; plain JSON must ask for them.
        unit = "auto" if debezium else "none"

    registry = s.string("schema_registry_url", what="an http(s):// URL")
    directory = s.string("schema_dir", what="a directory of <id>.avsc files")
    if directory is not None:
        directory = s.ctx.resolve_path(directory)
    if registry is not None and directory is not None:
        raise ConfigError(f"{s.path}: set only one of schema_registry_url and schema_dir")
    needs_source = "avro" in (value_format, key_format)
    if needs_source and registry is None and directory is None:
        raise ConfigError(
            f"{s.key('schema_registry_url')}: Avro needs a schema source; set "
            "schema_registry_url or schema_dir"
        )
    if not needs_source and (registry is not None or directory is not None):
        which = "schema_registry_url" if registry is not None else "schema_dir"
        s.fail(which, f'is only used by Avro formats, not "{kind}"')

    config = FormatConfig(
        type=kind,  # type: ignore[arg-type]
        schema_registry_url=registry,
        schema_dir=directory,
        key_format=key_format,  # type: ignore[arg-type]
        case_insensitive=s.boolean("case_insensitive", False),
        epoch_unit=None if unit == "none" else unit,  # type: ignore[arg-type]
        naive_timestamps_as_utc=s.boolean("naive_timestamps_as_utc", False),
        decimal_handling_mode=mode or "precise",  # type: ignore[arg-type]
        vectorized=s.boolean("vectorized", True),
        env_keys=s.env_names(),
    )
    s.finish()
    if registry is not None:
        config.schema_source()  # checks the URL's form now; connects only when decoding
    return config


def build_decoder(fmt: FormatConfig, schema: Schema) -> Decoder:
    """The ``calving.ingest.decode`` decoder for ``fmt`` writing into ``schema`` (the table's
    current schema). Picklable: Spark ships it to the executors."""
    try:
        if fmt.type == "json":
            return JsonValueDecoder(schema, _json_options(fmt))
        if fmt.envelope == "upsert":
            return KeyUpsertDecoder(
                schema,
                _json_options(fmt),
                fmt.value_format,
                fmt.key_format or fmt.value_format,
                fmt.schema_source(),
            )
        if fmt.type == "avro":
            source = fmt.schema_source()
            assert source is not None
            return ConfluentAvroDecoder(
                schema,
                source,
                AvroOptions(
                    case_insensitive=fmt.case_insensitive,
                    naive_timestamps_as_utc=fmt.naive_timestamps_as_utc,
                    epoch_unit=fmt.epoch_unit,
                    vectorized=fmt.vectorized,
                ),
            )
        if fmt.envelope == "debezium":
            options = DebeziumOptions(
                value_format=fmt.value_format,
                key_format=fmt.key_format or fmt.value_format,
                epoch_unit=fmt.epoch_unit,  # type: ignore[arg-type]
                decimal_handling_mode=fmt.decimal_handling_mode,
                naive_timestamps_as_utc=fmt.naive_timestamps_as_utc,
                case_insensitive=fmt.case_insensitive,
                vectorized=fmt.vectorized,
            )
            return DebeziumDecoder(schema, options, fmt.schema_source())
    except ConfigError as exc:
        if not schema.identifier_field_ids and fmt.keyed:
            raise ConfigError(
                f'table.identifier_fields: format.type "{fmt.type}" needs the table\'s '
                f"primary key ({exc})"
            ) from None
        raise
    raise ConfigError(f'format.type: no decoder for "{fmt.type}"')


def _json_options(fmt: FormatConfig) -> JsonOptions:
    return JsonOptions(
        case_insensitive=fmt.case_insensitive,
        epoch_unit=fmt.epoch_unit,
        naive_timestamps_as_utc=fmt.naive_timestamps_as_utc,
        vectorized=fmt.vectorized,
    )
