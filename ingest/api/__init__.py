"""calving: exactly-once Kafka to Apache Iceberg v3 streaming writer on Spark.

The installed package maps three folders of the source tree (see ``pyproject.toml``,
``[tool.setuptools.package-dir]``): this folder is ``calving`` itself, ``commit/`` is
``calving.commit`` (the table core, no Spark or Kafka imports) and ``ingest/`` is
``calving.ingest`` (Kafka -> Spark -> data files, the CLI).

For your own PySpark job: ``df.writeStream.foreachBatch(calving.sink(...))`` (see
``calving.foreach_batch``), on DataFrames with the Kafka source's columns or of decoded rows;
``calving.kafka_stream(spark, sink)`` is the Kafka DataFrame for such a sink (see
``calving.kafka_source``).
What changed in a table between two snapshots: ``calving.changes(...)`` (see
``calving.change_feed``), a ``pyarrow.Table`` in the vocabulary of Iceberg's changelog view.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

if TYPE_CHECKING:
    from calving.change_feed import changes
    from calving.commit.errors import CalvingError, ConfigError, SchemaError, StaleWriterError
    from calving.foreach_batch import sink, sink_config
    from calving.kafka_source import kafka_stream

_LAZY = {
    "changes": "calving.change_feed",
    "sink": "calving.foreach_batch",
    "sink_config": "calving.foreach_batch",
    "kafka_stream": "calving.kafka_source",
    "CalvingError": "calving.commit.errors",
    "ConfigError": "calving.commit.errors",
    "SchemaError": "calving.commit.errors",
    "StaleWriterError": "calving.commit.errors",
}


def __getattr__(name: str) -> Any:
    # Lazy: ``import calving`` (and ``calving --version``) stays free of pyarrow/Spark.
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'calving' has no attribute {name!r}")


__all__ = [
    "CalvingError",
    "ConfigError",
    "SchemaError",
    "StaleWriterError",
    "__version__",
    "changes",
    "kafka_stream",
    "sink",
    "sink_config",
]
