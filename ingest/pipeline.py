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
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from calving.commit.errors import CalvingError, ConfigError, NoSuchTableError
from calving.commit.table.table import Table
from calving.ingest.catalogs import (
    check_sql_catalog_before_create,
    ensure_dead_letter_table,
    ensure_table,
    file_io,
    open_catalog,
)
from calving.ingest.config.format import build_decoder
from calving.ingest.config.loader import CalvingConfig
from calving.ingest.config.preflight import check_metrics_port, validate_before_create
from calving.ingest.config.runtime import SparkConfig
from calving.ingest.config.source import SourceConfig
from calving.ingest.config.source_check import check_source
from calving.ingest.decode.avro_confluent import ConfluentAvroReader
from calving.ingest.kafka.offsets import OffsetRange, offsets_to_json
from calving.ingest.kafka.options import RANGE_TASKS
from calving.ingest.metrics import many_metrics_for, metrics_for
from calving.ingest.sink.coordinator import BatchStats
from calving.ingest.sink.foreach_batch import CalvingSink
from calving.ingest.sink.many.sink import ManyTablesSink
from calving.ingest.sink.many.transactions import TransactionTracker
from calving.ingest.sink.path_choice import PathChoice, SourcePlan, choose_path
from calving.ingest.spark_daemon import DAEMON_MODULE
from calving.ingest.worker_python import use_this_python

if TYPE_CHECKING:
    from calving.ingest.maintain import Maintainer
    from calving.ingest.maintain_many import ManyMaintainer

log = logging.getLogger("calving.pipeline")

#: Records read per partition (at most) to infer a new table's schema.
SAMPLE_PER_PARTITION = 500

_registered_sources: set[int] = set()


class StreamFailedError(CalvingError):
    """The streaming query stopped with an error (the cause is chained)."""


class _StopRequested(CalvingError):
    """Raised by a batch that would start after a stop was requested."""


#: How often ``Pipeline.run`` looks at the stop flag while the query runs (seconds).
_POLL_S = 0.5


def _stop_between_batches(query: Any) -> None:
    """Stop ``query`` once no trigger is running (a batch in flight finishes first)."""
    while query.isActive and query.status.get("isTriggerActive", False):
        time.sleep(0.1)
    query.stop()


def failure_text(failure: BaseException) -> str:
    """One line saying what ``failure`` is, never blank: its message, else the first
    line of its JVM stack trace (a Java exception without a message, such as an
    ``InterruptedException`` while Spark shuts down), else its cause's, else its
    class."""
    seen: BaseException | None = failure
    while seen is not None:
        try:
            text = str(seen).strip()
        except Exception:  # noqa: BLE001 -- a JVM that is gone cannot format it
            text = ""
        if not text:
            trace = str(getattr(seen, "_stackTrace", "") or "").strip()
            text = trace.splitlines()[0] if trace else ""
        if text:
            return text
        seen = seen.__cause__ or seen.__context__
    return f"{type(failure).__name__} (no message)"


def quiet_query_errors(spark: Any) -> None:
    """Silence the JVM's own report of a failed query or task (a full Java and Python
    traceback on stderr); the caller reports the root cause itself. ``calving -v``
    leaves them on."""
    jvm = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level
    configurator = jvm.org.apache.logging.log4j.core.config.Configurator
    for name, lvl in _QUIET_LOGGERS.items():
        configurator.setLevel(name, getattr(level, lvl))


_QUIET_LOGGERS = {
    "org.apache.spark.sql.execution.streaming": "OFF",
    "org.apache.spark.executor.Executor": "OFF",
    "org.apache.spark.scheduler.TaskSetManager": "ERROR",
    # "Failed to cancel job group ..." when a stopped query had no job running.
    "org.apache.spark.scheduler.DAGScheduler": "ERROR",
}


LOOPBACK = "127.0.0.1"
#: Settings of every driver JVM calving starts (``[spark.conf]`` wins). Spark's status
#: store (what the web UI and the status API list) keeps the last 1,000 jobs, stages and
#: SQL executions by default, each execution with its plan and metrics, in the driver's
#: heap for as long as it runs, UI or not. A stream's batches all look alike; the last
#: 100 of each are enough to look at.
#:
#: The driver JVM's collector: G1 enlarges the heap whenever its pauses take more than
#: a few percent of the time (under 8 %, less while the heap is small), and a driver on a
#: busy machine, its pauses stretched by the executors beside it, crossed that once in
#: a soak and kept twice the heap from then on (270 to 554 MiB committed, 100-350 MiB in
#: use). ``GCTimeRatio=4`` lets collection take up to 20 % before the heap grows, and
#: the free-ratio bounds let a collection give memory back when more than 40 % of the
#: heap is free. Spark prepends ``spark.driver.defaultJavaOptions`` to
#: ``spark.driver.extraJavaOptions``, so a user's own JVM options still apply.
DRIVER_JAVA_OPTIONS = "-XX:GCTimeRatio=4 -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=40"
DRIVER_DEFAULTS = {
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.sql.ui.retainedExecutions": "100",
    "spark.driver.defaultJavaOptions": DRIVER_JAVA_OPTIONS,
    # Python workers that start warm (``calving.ingest.spark_daemon``).
    "spark.python.daemon.module": DAEMON_MODULE,
}
#: Session settings of a ``local`` master that calving starts (``[spark.conf]`` wins).
LOCAL_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.bindAddress": LOOPBACK,
    "spark.driver.host": LOOPBACK,
}


def spark_session(cfg: SparkConfig, log_level: str = "WARN") -> Any:
    """The Spark session for ``cfg``. Under ``spark-submit`` (a JVM gateway already set
    up) the submitted master and settings win; ``[spark]`` only adds its ``conf``."""
    use_this_python()
    from pyspark.sql import SparkSession

    options = {"spark.app.name": cfg.app_name}
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if not submitted:
        # calving starts the JVM: no console progress bar over calving's own lines (a
        # driver Spark treats like a shell shows one otherwise); [spark.conf] overrides.
        options |= {"spark.master": cfg.master, "spark.ui.showConsoleProgress": "false"}
        options |= DRIVER_DEFAULTS
    if cfg.master.startswith("local") and not submitted:
        # A local driver needs no web UI, few shuffle partitions and no address beyond
        # loopback (Spark binds the driver to the host's network address otherwise, and
        # a web UI to every interface); [spark.conf] and SPARK_LOCAL_IP override.
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
        options |= LOCAL_DEFAULTS
    options |= cfg.conf
    if not submitted:
        launch_jvm_in_own_session(options)
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    return session


def launch_jvm_in_own_session(options: dict[str, str]) -> bool:
    """Start the driver JVM (py4j gateway) as pyspark would for ``options``, but in a
    session of its own; True if started here (False: this process has one already).

    A signal to the driver's whole process group (systemd's default
    ``KillMode=control-group`` uses the cgroup, but ``kill -TERM -PGID``, ``timeout``
    and a terminal's Ctrl-C use the group) would otherwise also reach the JVM, whose
    shutdown hooks stop the SparkContext under the running query: the stream then fails
    instead of stopping between batches. In its own session only the Python driver gets
    the signal, and it stops the query and then the JVM in order. The JVM (and the
    Python workers it starts) still ends with the driver: pyspark's gateway exits when
    its stdin, a pipe from this process, closes."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return False
    conf = SparkConf(loadDefaults=False)
    for key, value in options.items():
        conf.set(key, value)
    gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})
    SparkContext._ensure_initialized(gateway=gateway)
    return True


#: Spark's FileSystem-based checkpoint manager. The default (FileContext-based) one sets
#: each checkpoint file's permissions by forking ``chmod`` wherever Hadoop has no native
#: library (pip's pyspark): 20-50 ms per file, two files per micro-batch, on the path
#: between one batch's commit and the next batch's start. Both write a temporary file and
#: rename it into place.
CHECKPOINT_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
CHECKPOINT_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def use_fast_checkpoint_manager(session: Any) -> bool:
    """Set ``CHECKPOINT_MANAGER`` on ``session`` unless a checkpoint manager is already
    configured or this Spark has no such class; True if set."""
    if session.conf.get(CHECKPOINT_MANAGER_KEY, None):
        return False
    from py4j.protocol import Py4JError

    try:
        session._jvm.java.lang.Class.forName(CHECKPOINT_MANAGER)
    except Py4JError:  # Py4JJavaError: a class this Spark does not have
        log.info("keeping Spark's default checkpoint manager: %s not found", CHECKPOINT_MANAGER)
        return False
    session.conf.set(CHECKPOINT_MANAGER_KEY, CHECKPOINT_MANAGER)
    return True


def sample_records(source: SourceConfig, per_partition: int = SAMPLE_PER_PARTITION) -> pa.Table:
    """The first records of every subscribed partition (key and value), read from the
    earliest offsets: what a new table's schema is inferred from."""
    from calving.ingest.kafka.range_reader import read_range
    from calving.ingest.kafka.source import BrokerView, kafka_arrow_schema

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


def kafka_frame(
    spark: Any, options: dict[str, str], ledger: dict[tuple[str, int], int] | None = None
) -> Any:
    """The streaming DataFrame of the ``calving-kafka`` source with ``options`` (registered
    on ``spark`` first), starting from ``ledger`` (a writer's next offsets) where it is
    ahead of Spark's checkpoint."""
    from calving.ingest.kafka.source import KafkaSource

    if id(spark) not in _registered_sources:
        spark.dataSource.register(KafkaSource)
        _registered_sources.add(id(spark))
    reader = spark.readStream.format("calving-kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    if ledger:
        reader = reader.option("calving.startingLedger", json.dumps(offsets_to_json(ledger)))
    return reader.load()


@dataclass
class Pipeline:
    """A configured pipeline, ready to start: ``run()`` blocks until the query ends."""

    config: CalvingConfig
    spark: Any
    #: The table (None for a many-table pipeline: ``sink.tables`` has them).
    table: Table | None
    sink: CalvingSink | ManyTablesSink
    #: Set it (e.g. from a SIGTERM handler) to make ``run()`` stop between batches.
    stop_requested: threading.Event = field(default_factory=threading.Event)
    #: The id of the last batch this process committed (None: none yet).
    last_batch_id: int | None = None
    #: Inline maintenance (``[maintenance] inline = true``): a pass after a batch.
    maintainer: Maintainer | ManyMaintainer | None = None
    #: How records travel: fused read-decode-write tasks, or through Spark (shuffle).
    path: PathChoice = field(default_factory=lambda: PathChoice("shuffle", "default"))
    #: Why the batch in flight at a requested stop was abandoned (None: none was).
    abandoned: str | None = None

    @property
    def one_table(self) -> Table:
        """The table of a one-table pipeline (a many-table one has ``sink.tables``)."""
        if self.table is None:
            raise CalvingError("this pipeline writes many tables; see pipeline.sink.tables")
        return self.table

    def source_frame(self) -> Any:
        """The streaming DataFrame of the configured Kafka source, never reading below
        the table's ledger for this writer."""
        plan = SourcePlan(self.config.source, self.path)
        frame = kafka_frame(self.spark, plan.spark_options(), self.sink.starting_ledger())
        if isinstance(self.sink, CalvingSink):
            self.sink.open_early(self.spark)
        return frame

    def start(self, available_now: bool = False) -> Any:
        """Start the streaming query (a processing-time trigger, or drain what is
        available now and stop)."""
        use_fast_checkpoint_manager(self.spark)
        writer = (
            self.source_frame()
            .writeStream.queryName(f"calving-{self.config.sink.writer_id}")
            .foreachBatch(self._batch)
            .option("checkpointLocation", self.config.sink.checkpoint)
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=self.config.sink.trigger_interval)
        return writer.start()

    def _batch(self, df: Any, batch_id: int) -> None:
        # A batch that starts after a stop was requested is refused before it writes
        # anything: Spark has not committed it, so the next run plans it again.
        if self.stop_requested.is_set():
            raise _StopRequested(f"stop requested before batch {batch_id}")
        self.sink(df, batch_id)
        self.last_batch_id = batch_id
        if self.maintainer is not None:
            self.maintainer.after_batch()

    def run(self, available_now: bool = False, timeout: float | None = None) -> None:
        """Run until the query ends (``available_now``: everything available is
        committed), ``stop_requested`` is set (the query stops between batches), or
        ``timeout`` passes; then save the primary-key index. A query error is re-raised
        as ``StreamFailedError`` with the cause chained; KeyboardInterrupt stops the
        query and propagates. Once a stop was requested, a failure of the query or of
        Spark (a JVM that got the same signal is going down) abandons the batch in
        flight instead (``abandoned`` says why): its offsets are not committed, so the
        next run takes it again, and the table's ledger keeps it exactly-once."""
        from pyspark.errors import StreamingQueryException

        query = self.start(available_now)
        deadline = time.monotonic() + timeout if timeout else None
        try:
            while not query.awaitTermination(_POLL_S):
                if self.stop_requested.is_set():
                    _stop_between_batches(query)
                    return
                if deadline is not None and time.monotonic() > deadline:
                    raise StreamFailedError(f"the stream did not finish within {timeout:.0f}s")
        except StreamingQueryException as failure:
            if self.stop_requested.is_set():
                self._abandon(failure)
                return
            raise StreamFailedError(
                f"stream into {self.sink.description} failed: {failure_text(failure)}"
            ) from failure
        except Exception as failure:
            if not self.stop_requested.is_set() or isinstance(failure, CalvingError):
                raise
            self._abandon(failure)
        finally:
            self._stop_query(query)
            self.sink.close()

    def _abandon(self, failure: BaseException) -> None:
        if _StopRequested.__name__ in str(failure):
            return  # the batch after the stop refused to start: nothing was in flight
        self.abandoned = failure_text(failure).splitlines()[0][:300]
        log.debug("stopping: the batch in flight was abandoned", exc_info=failure)

    def _stop_query(self, query: Any) -> None:
        """Stop ``query`` if it still runs; after a requested stop, a Spark that is
        already going down is no error."""
        try:
            if query.isActive:
                query.stop()
        except Exception as failure:
            if not self.stop_requested.is_set():
                raise
            self._abandon(failure)

    def close(self) -> None:
        """Stop the metrics endpoint (``run()`` leaves it up for a last scrape)."""
        if self.sink.metrics is not None:
            self.sink.metrics.close()


def build_pipeline(
    config: CalvingConfig,
    spark: Any | None = None,
    *,
    on_batch: Callable[[Any], None] | None = None,
) -> Pipeline:
    """Open the catalog, create or check the table and the dead-letter table, and build
    the sink. A new table with ``infer_schema`` samples the topic first. A routed
    table name (whole-database CDC) builds a ``ManyTablesSink`` instead.

    Everything that can fail is checked first, so that a failing start creates nothing:
    the locations calving writes, the metrics port, the broker and the named topics."""
    validate_before_create(config)
    check_sql_catalog_before_create(config.table.catalog)
    check_metrics_port(config)
    check_source(config.source)
    if config.router is not None:
        many = build_many_sink(config, on_batch=on_batch)
        path = PathChoice(
            "fused",
            "many tables: one task per partition range",
            keyed=True,
            overrides=(*with_transaction_topic(config).items(), (RANGE_TASKS, "1")),
        )
        session = spark or spark_session(config.spark)
        return Pipeline(
            config, session, None, many, maintainer=many_maintainer(config, many, session),
            path=path,
        )  # fmt: skip
    sink = build_sink(config, on_batch=on_batch)
    session = spark or spark_session(config.spark)
    maintainer = None
    if config.maintenance.inline:
        from calving.ingest.maintain import build_maintainer

        # The stream's endpoint serves the inline passes' figures too.
        registry = getattr(sink.metrics, "registry", None)
        maintainer = build_maintainer(config, session, registry=registry)
        maintainer.stream_metadata = lambda: sink.table.metadata
    path = path_for(config, sink.table)
    log.info("records path: %s (%s)", path.path, path.reason)
    return Pipeline(config, session, sink.table, sink, maintainer=maintainer, path=path)


def avro_reader(config: CalvingConfig) -> ConfluentAvroReader | None:
    """Reads Confluent Avro with the format's schemas (``debezium-avro``), else None."""
    source = config.format.schema_source()
    return ConfluentAvroReader(source) if source is not None else None


def many_maintainer(
    config: CalvingConfig, sink: ManyTablesSink, session: Any
) -> ManyMaintainer | None:
    """Inline maintenance across a many-table pipeline's tables, if configured."""
    if not config.maintenance.inline:
        return None
    from calving.ingest.maintain_many import ManyMaintainer

    return ManyMaintainer(
        sink,
        config.maintenance,
        spark=session,
        io_properties=config.table.io,
        registry=getattr(sink.metrics, "registry", None),
        log_passes=config.metrics.log_batches,
    )


def with_transaction_topic(config: CalvingConfig) -> dict[str, str]:
    """The subscription of a many-table pipeline with source-transaction boundaries: the
    configured topics plus the transaction topic, so that new markers start a batch (the
    router never makes it a table)."""
    topic = config.sink.transaction_topic
    if topic is None:
        return {}
    options = config.source.spark_options()
    if "subscribe" in options:
        return {"subscribe": f"{options['subscribe']},{topic}"}
    pattern = options["subscribePattern"]
    return {"subscribePattern": f"(?:{pattern})|{re.escape(topic)}"}


def build_many_sink(
    config: CalvingConfig, *, on_batch: Callable[[Any], None] | None = None
) -> ManyTablesSink:
    """The sink of a many-table pipeline: the catalog, the dead-letter table and the
    router; the tables themselves are opened or created as their topics appear."""
    assert config.router is not None
    validate_before_create(config)
    io = file_io(config.table)
    catalog = open_catalog(config.table, io)
    sink_cfg = config.sink
    dead_letters = (
        ensure_dead_letter_table(catalog, io, sink_cfg.dead_letter_table)
        if sink_cfg.dead_letter_table
        else None
    )
    return ManyTablesSink(
        catalog,
        io,
        config.router,
        config.table,
        config.format,
        sink_cfg.writer_id,
        config.source.source_options(),
        dead_letter_table=dead_letters,
        dead_letter_topic=sink_cfg.dead_letter_topic,
        kafka_config=config.source.kafka_client_config() if sink_cfg.dead_letter_topic else None,
        dead_letter_max_bytes=sink_cfg.dead_letter_max_bytes,
        index_save_every=sink_cfg.index_save_every,
        index_memory_bytes=sink_cfg.index_memory_bytes,
        on_batch=on_batch,
        transactions=(
            TransactionTracker(
                sink_cfg.transaction_topic,
                config.source.source_options(),
                sink_cfg.transaction_timeout_seconds,
                sink_cfg.topic_prefix,
                avro=avro_reader(config),
            )
            if sink_cfg.transaction_topic
            else None
        ),
        metrics=many_metrics_for(config),
    )


def path_for(config: CalvingConfig, table: Table) -> PathChoice:
    """The ``[sink] path`` the pipeline takes for ``table`` (see ``path_choice``)."""
    keyed = bool(table.metadata.schema.identifier_field_ids)
    return choose_path(config.sink.path, config.source, config.format, keyed)


def build_sink(
    config: CalvingConfig,
    *,
    on_batch: Callable[[BatchStats], None] | None = None,
    sink_class: type[CalvingSink] = CalvingSink,
    **sink_options: Any,
) -> CalvingSink:
    """The table (created or brought up to the config), the dead-letter table and the
    ``foreachBatch`` sink, without a Spark session (``calving.sink()`` passes its own
    ``sink_class`` and options)."""
    table_cfg = config.table
    # Locations calving must write are checked before the catalog, namespace or table
    # is created (a failing pipeline leaves nothing behind).
    validate_before_create(config)
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
    path = path_for(config, table)
    return sink_class(
        table,
        functools.partial(build_decoder, config.format),
        sink_cfg.writer_id,
        dead_letter_table=dead_letters,
        dead_letter_topic=sink_cfg.dead_letter_topic,
        dead_letter_max_bytes=sink_cfg.dead_letter_max_bytes,
        kafka_config=config.source.kafka_client_config() if sink_cfg.dead_letter_topic else None,
        key_partitions=sink_cfg.key_partitions,
        index_save_every=sink_cfg.index_save_every,
        evolve_schema=sink_cfg.evolve_schema,
        on_batch=on_batch,
        metrics=metrics_for(config),
        source_options=config.source.source_options() if path.path == "fused" else None,
        keyed_path=path.path,
        **sink_options,
    )
