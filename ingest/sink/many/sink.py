"""``foreachBatch`` for a many-table pipeline: every table a micro-batch touched is
committed in one catalog transaction.

A batch (the ``calving-kafka`` source emits one row per planned offset range) goes
through named stages, each its own module, which ``ManyTablesSink`` ties together:

1. route (``route``): each topic seen for the first time is routed
   (``calving.ingest.config.router``) and its table loaded or created from its first
   change event (``discover``);
2. plan (``plan``): a ``TablePlan`` per table, and the ranges packed into tasks;
3. write (``write``): the tasks run on a ``runner.TaskRunner`` (one Spark job, or in
   this process); each reads its ranges, decodes and writes each table's files
   (``tasks``), reporting the change-event schemas it saw;
4. evolve (``follow``): a table whose events carry a changed schema is evolved (or, for
   an incompatible change, stopped: its records become dead letters) and only its ranges
   are written again; with source-transaction boundaries (``boundaries``), a table
   written past the batch's horizon is written again up to it;
5. commit (``commit``): each table's ``Coordinator`` prepares its ``RowDelta`` (deletion
   vectors from its own primary-key index, a ledger claim for its own topic-partitions);
   the dead-letter table gets the whole batch's claim; all of them swap in one catalog
   transaction (``commit_tables``). A catalog that cannot (the filesystem catalog)
   commits table by table, the dead-letter table last.

Restarts (``start``): ``starting_ledger`` reads the ledger for this writer id of every
table the writer registry (``registry``) names (the lowest offset per topic-partition
wins), so a lost checkpoint replays only what some table lacks, and each table's claim
skips what it holds. Every table is registered before its first commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from calving.commit.catalog.base import Catalog, TableIdent
from calving.commit.index.sharded import ShardedIndex
from calving.commit.io import FileIO
from calving.commit.table.ledger import TopicPartition, read_ledger
from calving.commit.table.multi_commit import TableCommit
from calving.commit.table.table import Table
from calving.ingest.config.format import FormatConfig
from calving.ingest.config.router import Route, Skip, TableRouter
from calving.ingest.config.runtime import DEFAULT_INDEX_MEMORY_BYTES
from calving.ingest.config.table import TableConfig
from calving.ingest.kafka.offsets import OffsetRange
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.sink.coordinator import ParsedMessages
from calving.ingest.sink.dead_letters import DEFAULT_TOPIC_MAX_BYTES
from calving.ingest.sink.driver_index import IndexSave, discard_index_file
from calving.ingest.sink.history import BatchHistory
from calving.ingest.sink.index_rebuild import ExecutorRebuild
from calving.ingest.sink.many import start
from calving.ingest.sink.many.boundaries import Boundaries
from calving.ingest.sink.many.commit import (
    BATCH_COMMIT,
    BATCH_TABLES,
    BatchCommit,
    ManyBatchStats,
    Swapped,
    TransactionClaim,
    swap_in,
)
from calving.ingest.sink.many.follow import follow_schemas
from calving.ingest.sink.many.index_budget import IndexBudget
from calving.ingest.sink.many.observer import ManyBatchObserver, TableFigures
from calving.ingest.sink.many.plan import TASKS_PER_CORE, Planner, pack
from calving.ingest.sink.many.planned import planned_ranges
from calving.ingest.sink.many.recorded import RecordedRoute, recorded_routes
from calving.ingest.sink.many.registry import WriterRegistry
from calving.ingest.sink.many.route import Discovery, RoutedTable, Routing, ranges_by_topic, route
from calving.ingest.sink.many.runner import RangeRow, SparkTaskRunner, TaskRunner
from calving.ingest.sink.many.start import LedgerUnreadableError
from calving.ingest.sink.many.transactions import Horizon, TransactionScope, TransactionTracker
from calving.ingest.sink.many.write import Messages, Writes
from calving.ingest.sink.shard_stage import sharded_index

__all__ = [
    "BATCH_COMMIT",
    "BATCH_TABLES",
    "TASKS_PER_CORE",
    "LedgerUnreadableError",
    "ManyBatchStats",
    "ManyTablesSink",
    "RangeRow",
    "RoutedTable",
    "pack",
]

log = logging.getLogger("calving.many")


class ManyTablesSink:
    """Callable for ``foreachBatch`` over a ``calving.emit = ranges`` DataFrame."""

    def __init__(
        self,
        catalog: Catalog,
        io: FileIO,
        router: TableRouter,
        template: TableConfig,
        fmt: FormatConfig,
        writer_id: str,
        source_options: KafkaSourceOptions,
        *,
        dead_letter_table: Table | None = None,
        dead_letter_topic: str | None = None,
        kafka_config: Mapping[str, str] | None = None,
        dead_letter_max_bytes: int = DEFAULT_TOPIC_MAX_BYTES,
        index_save_every: int = 20,
        index_memory_bytes: int = DEFAULT_INDEX_MEMORY_BYTES,
        on_batch: Callable[[ManyBatchStats], None] | None = None,
        transactions: TransactionTracker | None = None,
        metrics: ManyBatchObserver | None = None,
    ) -> None:
        self.catalog = catalog
        self.io = io
        self.router = router
        self.template = template
        self.format = fmt
        self.writer_id = writer_id
        self.source_options = source_options
        self.dead_letter_table = dead_letter_table
        self.dead_letter_topic = dead_letter_topic
        self.kafka_config = dict(kafka_config or {})
        self.dead_letter_max_bytes = dead_letter_max_bytes
        self.index_save_every = index_save_every
        self.on_batch = on_batch
        #: Source-transaction boundaries (``[sink] transaction_topic``), if on.
        self.transactions = transactions
        #: Per-table figures (``calving.ingest.metrics.many.ManyMetrics``), if any.
        self.metrics = metrics
        #: Topics routed so far, their tables and data collections (the route stage's).
        self.routing = Routing()
        self._rebuild: ExecutorRebuild | None = None
        self._sharded: Callable[[Table], ShardedIndex | None] | None = None
        #: The primary-key indexes the driver keeps between batches (``index_budget``).
        self.index_budget = IndexBudget(index_memory_bytes)
        #: Which tables hold this writer's ledger, kept in the catalog (``registry``).
        self.registry = WriterRegistry(catalog, writer_id)
        self.history: BatchHistory[ManyBatchStats] = BatchHistory()
        #: One Kafka consumer per task for all its ranges (False: one per range; the
        #: benchmark's peer).
        self.reuse_consumer = True
        #: The writer's tables as the start loaded them, until the first route stage.
        self._started: dict[TableIdent, Table] | None = None
        #: Topic -> the route its table recorded (``recorded``), read once.
        self._routes_recorded: dict[str, RecordedRoute] | None = None

    @property
    def routes(self) -> dict[str, Route | Skip]:
        return self.routing.routes

    @property
    def collections(self) -> dict[str, str]:
        """Data-collection names (as END markers give them) -> topic, from the source
        blocks of each routed topic's first event."""
        return self.routing.collections

    @property
    def tables(self) -> dict[str, RoutedTable]:
        return self.routing.tables

    # ------------------------------------------------------------ restarts

    @property
    def description(self) -> str:
        return f"{len(self.tables)} routed table(s)"

    def starting_ledger(self) -> dict[TopicPartition, int]:
        """Where the source must not read below: per topic-partition, the lowest next
        offset any of this writer's tables (and the dead-letter table) holds."""
        return start.lowest(self._ledgers())

    def _ledgers(self) -> list[dict[TopicPartition, int]]:
        return [read_ledger(t.metadata, self.writer_id) for t in self._writer_tables()]

    def _writer_tables(self) -> list[Table]:
        """The writer's tables, loaded now (kept for the first route stage)."""
        tables = self.registry.tables(self.io)
        if self._routes_recorded is None:
            self._started = {t.ident: t for t in tables}
        return tables

    def _recorded(self) -> tuple[dict[str, RecordedRoute], dict[TableIdent, Table]]:
        """The routes the writer's tables recorded, and, the first time, the tables the
        start loaded (then forgotten: a later new topic loads its table afresh)."""
        if self._routes_recorded is not None:
            return self._routes_recorded, {}
        if self._started is None:
            self._writer_tables()
        loaded, self._started = self._started or {}, None
        dead = self.dead_letter_table.ident if self.dead_letter_table is not None else None
        self._routes_recorded = recorded_routes(loaded.values(), self.writer_id, dead)
        return self._routes_recorded, loaded

    def close(self) -> None:
        """Save every keyed table's primary-key index with the table: the index files
        written, then every table pointed at its file in one catalog transaction (a
        commit each where the catalog has no multi-table commit)."""
        if not self.catalog.supports_multi_table_commit:
            for routed in self.tables.values():
                routed.coordinator.save_index()
            return
        saves: list[tuple[RoutedTable, IndexSave]] = []
        try:
            for routed in self.tables.values():
                save = routed.coordinator.index_to_save()
                if save is not None:
                    saves.append((routed, save))
        except BaseException:
            for routed, save in saves:  # written, never named: not left behind
                discard_index_file(routed.table, save)
            raise
        commits = [
            TableCommit(r.table.ident, s.action, r.table.metadata.table_uuid) for r, s in saves
        ]
        outcomes, _ = swap_in(self.catalog, self.io, commits)
        for routed, save in saves:
            routed.coordinator.index_save_done(save, outcomes[routed.table.ident])

    # ------------------------------------------------------------ a batch

    def __call__(self, df: Any, batch_id: int) -> None:
        """One micro-batch of the pipeline's own ``calving.emit = ranges`` query: its
        ranges as planned (``planned_ranges``), or collected when they cannot be read
        from the plan."""
        rows = planned_ranges(df)
        if rows is None:
            rows = [(r.topic, int(r.partition), int(r.start), int(r.end)) for r in df.collect()]
        self.write_batch(df.sparkSession, rows, batch_id)

    def write_batch(self, spark: Any, rows: Sequence[RangeRow], batch_id: int) -> ManyBatchStats:
        """One batch, its tasks as one Spark job on ``spark``; a lost index of a large
        table is rebuilt by Spark tasks too (``ExecutorRebuild``)."""
        if self._rebuild is None:
            self._rebuild = ExecutorRebuild(spark, self.io.properties)
            self._sharded = partial(sharded_index, spark)
            for routed in self.routing.tables.values():
                routed.coordinator.rebuild = self._rebuild
                routed.coordinator.sharded = self._sharded(routed.table)
        return self.run_batch(SparkTaskRunner(spark), rows, batch_id)

    def run_batch(
        self, runner: TaskRunner, rows: Sequence[RangeRow], batch_id: int
    ) -> ManyBatchStats:
        """One batch through route, plan and write, evolve, commit; its tasks on ``runner``."""
        started = time.monotonic()
        bounds = self._boundaries()
        spans, scope = self._route_stage(rows, bounds)
        routed = time.monotonic()
        live = {t: s for t, s in spans.items() if self.routing.table_of(t) is not None}
        messages, bound = self._write_stage(runner, batch_id, live, bounds, scope)
        written = time.monotonic()
        parsed = {name: ParsedMessages.of(ms) for name, ms in messages.items()}
        if self.metrics is not None:
            self.metrics.commit_starting()
        try:
            stats = self._commit_stage(batch_id, parsed, spans, bounds, scope, bound)
        except Exception as err:
            if self.metrics is not None:
                self.metrics.batch_failed(parsed, batch_id, err, started)
            raise
        stats.read = sum(r.end - r.start for rs in spans.values() for r in rs)
        stats.phases = {
            "route": routed - started,
            "write": written - routed,
            "commit": time.monotonic() - written,
        }
        self._observe(stats, started)
        if self.metrics is not None:
            self.metrics.batch_done(self._figures(parsed, stats), started, written)
        self.index_budget.after_batch(self.tables, list(stats.tables), batch_id)
        return stats

    def _figures(
        self, parsed: Mapping[str, ParsedMessages], stats: ManyBatchStats
    ) -> dict[str, TableFigures]:
        """What the figures read of each table the batch committed (or skipped)."""
        topics: dict[str, list[str]] = {}
        for topic, outcome in self.routes.items():
            if isinstance(outcome, Route):
                topics.setdefault(outcome.name, []).append(topic)
        return {
            name: TableFigures(
                routed.coordinator.table,
                routed.coordinator,
                self.writer_id,
                topics.get(name, []),
                parsed[name],
                stats.tables[name],
            )
            for name, routed in self.tables.items()
            if name in stats.tables and name in parsed
        }

    def _route_stage(
        self, rows: Sequence[RangeRow], bounds: Boundaries | None
    ) -> tuple[dict[str, list[OffsetRange]], TransactionScope | None]:
        """The batch's ranges by topic (held to source transactions), every new topic
        routed; with boundaries, the transactions the batch may hold."""
        spans = ranges_by_topic(rows)
        if bounds is not None:
            spans = bounds.ranges(spans, self._ledgers)
        route(spans, self.routing, self._discovery())
        return spans, bounds.scope(spans) if bounds is not None else None

    def _write_stage(
        self,
        runner: TaskRunner,
        batch_id: int,
        live: Mapping[str, list[OffsetRange]],
        bounds: Boundaries | None,
        scope: TransactionScope | None,
    ) -> tuple[Messages, Horizon | None]:
        """The routed ranges written, written again where the evolve stage (or the
        horizon of source transactions) needs it; the messages, and the horizon."""
        writes = self._writes(runner, batch_id)
        messages = writes.write(live, scope=scope, judge=False)
        again = follow_schemas(messages, self.tables, self.format)
        if again:
            writes.write_again(live, messages, again, scope)
        if bounds is None or scope is None:
            return messages, None
        bound, late = bounds.horizon(batch_id, live, messages, scope)
        if late:
            writes.write_again(live, messages, late, TransactionScope(cuts=bound.cuts))
        return messages, bound

    def _commit_stage(
        self,
        batch_id: int,
        parsed: Mapping[str, ParsedMessages],
        spans: Mapping[str, list[OffsetRange]],
        bounds: Boundaries | None,
        scope: TransactionScope | None,
        bound: Horizon | None,
    ) -> ManyBatchStats:
        """Every table committed (``_commit``); with boundaries, the transaction-topic
        range claimed and the tracker moved on."""
        if bounds is None or scope is None or bound is None:
            return self._commit(batch_id, parsed, None)
        stats = self._commit(batch_id, parsed, bounds.claim(bound, scope))
        stats.held_back = bounds.committed(bound, scope, spans)
        return stats

    def _observe(self, stats: ManyBatchStats, started: float) -> None:
        log.info(
            "batch %d: %d record(s) into %d table(s) (%s) in %.2fs (route %.2fs, write %.2fs, "
            "commit %.2fs of which the catalog swap %.3fs)",
            stats.batch_id,
            stats.records,
            len(stats.committed),
            "one catalog transaction" if stats.atomic else "table by table",
            time.monotonic() - started,
            stats.phases["route"],
            stats.phases["write"],
            stats.phases["commit"],
            stats.commit_seconds,
        )
        self.history.append(stats)
        if self.on_batch is not None:
            self.on_batch(stats)

    # ------------------------------------------------------------ the stages' inputs

    def _boundaries(self) -> Boundaries | None:
        if self.transactions is None:
            return None
        return Boundaries(self.transactions, self.routing, self.router)

    def _discovery(self) -> Discovery:
        return Discovery(
            self.catalog,
            self.io,
            self.router,
            self.template,
            self.format,
            self.source_options,
            self.writer_id,
            self.index_save_every,
            self._rebuild,
            self._sharded,
            recorded=self._recorded,
            collections_needed=self.transactions is not None,
        )

    def _writes(self, runner: TaskRunner, batch_id: int) -> Writes:
        planner = Planner(
            self.writer_id,
            self.format,
            self.dead_letter_table,
            self.dead_letter_topic,
            self.kafka_config,
            self.dead_letter_max_bytes,
        )
        return Writes(
            batch_id, runner, planner, self.routing, self.source_options, self.reuse_consumer
        )

    def _commit(
        self,
        batch_id: int,
        parsed: Mapping[str, ParsedMessages],
        transaction: TransactionClaim | None = None,
    ) -> ManyBatchStats:
        commit = BatchCommit(self.tables, self._swap, self.writer_id, self.dead_letter_table)
        return commit.commit(batch_id, parsed, transaction)

    def _swap(self, commits: list[TableCommit]) -> Swapped:
        self.registry.register([c.ident for c in commits], self.io)
        return swap_in(self.catalog, self.io, commits)
