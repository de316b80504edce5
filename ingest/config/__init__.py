"""Pipeline configuration: a TOML file -> frozen, typed ``CalvingConfig``.

``load_config(path)`` reads a file; ``parse_config(dict, source_name)`` checks a document
built in code. Every wrong, unknown or missing key is a ``calving.commit.errors.ConfigError``
whose message names the dotted key and what was expected. Secrets are referenced as
``${env:NAME}`` and never appear in ``repr`` or error messages. ``config/README.md`` lists
every key; ``config/*.toml`` are examples users copy.

Sections and their dataclasses:

* ``[source]`` -> ``SourceConfig`` (``spark_options()`` for the calving-kafka source)
* ``[format]`` -> ``FormatConfig`` (``build_decoder(fmt, schema)`` makes the decoder)
* ``[table]`` -> ``TableConfig`` (``calving.ingest.catalogs`` opens the catalog and the table)
* ``[sink]`` -> ``SinkConfig``; ``[spark]`` -> ``SparkConfig``
"""

from calving.ingest.config.format import FORMAT_TYPES, FormatConfig, build_decoder
from calving.ingest.config.loader import CalvingConfig, load_config, parse_config
from calving.ingest.config.runtime import SinkConfig, SparkConfig, interval_seconds
from calving.ingest.config.source import SourceConfig
from calving.ingest.config.table import ColumnConfig, PartitionFieldConfig, TableConfig

__all__ = [
    "FORMAT_TYPES",
    "CalvingConfig",
    "ColumnConfig",
    "FormatConfig",
    "PartitionFieldConfig",
    "SinkConfig",
    "SourceConfig",
    "SparkConfig",
    "TableConfig",
    "build_decoder",
    "interval_seconds",
    "load_config",
    "parse_config",
]
