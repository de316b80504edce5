"""One pipeline from a ``CalvingConfig``: Spark session, the table (created or brought up
to the config), the dead-letter table, the ``calving-kafka`` source and the sink, wired
the same way for ``calving run``, ``calving demo`` and code that embeds calving.

The Kafka source starts from the table's exactly-once ledger (``calving.startingLedger``)
whenever the ledger is ahead of the checkpoint, so a lost checkpoint replays nothing.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from commit.errors import CalvingError, ConfigError, NoSuchTableError
from commit.table.table import Table
from ingest.catalogs import ensure_dead_letter_table, ensure_table, file_io, open_catalog
from ingest.config.format import build_decoder
from ingest.config.loader import CalvingConfig
from ingest.config.runtime import SparkConfig
from ingest.config.source import SourceConfig
from ingest.kafka.offsets import OffsetRange, offsets_to_json
from ingest.sink.coordinator import BatchStats
from ingest.sink.foreach_batch import CalvingSink

log = logging.getLogger("calving.pipeline")

#: Records read per partition (at most) to infer a new table's schema.
SAMPLE_PER_PARTITION = 500

_registered_sources: set[int] = set()


class StreamFailedError(CalvingError):
    """The streaming query stopped with an error (the cause is chained)."""


def spark_session(cfg: SparkConfig, log_level: str = "WARN") -> Any:
    """The Spark session for ``cfg``. Under ``spark-submit`` (a JVM gateway already set
    up) the submitted master and settings win; ``[spark]`` only adds its ``conf``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(cfg.app_name)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if not submitted:
        builder = builder.master(cfg.master)
    if cfg.master.startswith("local") and not submitted:
        # A local driver needs no web UI and few shuffle partitions; [spark.conf] overrides.
        builder = builder.config("spark.ui.enabled", "false").config(
            "spark.sql.shuffle.partitions", "2"
        )
    for key, value in cfg.conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    return session


def sample_records(source: SourceConfig, per_partition: int = SAMPLE_PER_PARTITION) -> pa.Table:
    """The first records of every subscribed partition (key and value), read from the
    earliest offsets: what a new table's schema is inferred from."""
    from ingest.kafka.range_reader import read_range
    from ingest.kafka.source import BrokerView, kafka_arrow_schema

    options = source.source_options()
    view = BrokerView(options)
    tps = view.partitions()
    first, last = view.earliest(tps), view.latest(tps)
    schema = kafka_arrow_schema(False)
    batches: list[pa.RecordBatch] = []
    for topic, partition in tps:
        start = first[(topic, partition)]
        end = min(last[(topic, partition)], start + per_partition)
        batches.extend(read_range(options, OffsetRange(topic, partition, start, end), schema))
    return pa.Table.from_batches(batches, schema=schema).select(["key", "value"])


@dataclass
class Pipeline:
    """A configured pipeline, ready to start: ``run()`` blocks until the query ends."""

    config: CalvingConfig
    spark: Any
    table: Table
    sink: CalvingSink

    def source_frame(self) -> Any:
        """The streaming DataFrame of the configured Kafka source, never reading below
        the table's ledger for this writer."""
        from ingest.kafka.source import KafkaSource

        if id(self.spark) not in _registered_sources:
            self.spark.dataSource.register(KafkaSource)
            _registered_sources.add(id(self.spark))
        reader = self.spark.readStream.format("calving-kafka")
        for key, value in self.config.source.spark_options().items():
            reader = reader.option(key, value)
        self.table.refresh()
        ledger = self.table.ledger(self.config.sink.writer_id)
        if ledger:
            reader = reader.option("calving.startingLedger", json.dumps(offsets_to_json(ledger)))
        return reader.load()

    def start(self, available_now: bool = False) -> Any:
        """Start the streaming query (a processing-time trigger, or drain what is
        available now and stop)."""
        writer = (
            self.source_frame()
            .writeStream.queryName(f"calving-{self.config.sink.writer_id}")
            .foreachBatch(self.sink)
            .option("checkpointLocation", self.config.sink.checkpoint)
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=self.config.sink.trigger_interval)
        return writer.start()

    def run(self, available_now: bool = False, timeout: float | None = None) -> None:
        """Run until the query ends (``available_now``: everything available is
        committed), then save the primary-key index. A query error is re-raised as
        ``StreamFailedError`` with the cause chained."""
        from pyspark.errors import StreamingQueryException

        query = self.start(available_now)
        try:
            finished = query.awaitTermination(timeout) if timeout else query.awaitTermination()
            if timeout and not finished and query.isActive:
                raise StreamFailedError(f"the stream did not finish within {timeout:.0f}s")
        except StreamingQueryException as failure:
            raise StreamFailedError(f"stream into {self.table.name} failed: {failure}") from failure
        except KeyboardInterrupt:
            log.info("interrupted: stopping the query after the batch in flight")
        finally:
            if query.isActive:
                query.stop()
            self.sink.close()


def build_pipeline(
    config: CalvingConfig,
    spark: Any | None = None,
    *,
    on_batch: Callable[[BatchStats], None] | None = None,
) -> Pipeline:
    """Open the catalog, create or check the table and the dead-letter table, and build
    the sink. A new table with ``infer_schema`` samples the topic first."""
    table_cfg = config.table
    io = file_io(table_cfg)
    catalog = open_catalog(table_cfg, io)
    sample = None
    if table_cfg.infer_schema:
        try:
            Table.load(catalog, table_cfg.ident, io)
        except NoSuchTableError:
            sample = sample_records(config.source)
            if sample.num_rows == 0:
                raise ConfigError(
                    f"table.infer_schema: table {table_cfg.name} does not exist and the source "
                    "has no records yet to infer its schema from; declare [[table.columns]] "
                    "or start once records are there"
                ) from None
    table = ensure_table(catalog, io, table_cfg, sample, fmt=config.format)
    dead_letters = (
        ensure_dead_letter_table(catalog, io, config.sink.dead_letter_table)
        if config.sink.dead_letter_table
        else None
    )
    sink_cfg = config.sink
    sink = CalvingSink(
        table,
        functools.partial(build_decoder, config.format),
        sink_cfg.writer_id,
        dead_letter_table=dead_letters,
        dead_letter_topic=sink_cfg.dead_letter_topic,
        kafka_config=config.source.kafka_client_config() if sink_cfg.dead_letter_topic else None,
        key_partitions=sink_cfg.key_partitions,
        index_save_every=sink_cfg.index_save_every,
        evolve_schema=sink_cfg.evolve_schema,
        on_batch=on_batch,
    )
    return Pipeline(config, spark or spark_session(config.spark), table, sink)
