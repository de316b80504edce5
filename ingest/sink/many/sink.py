"""``foreachBatch`` for a many-table pipeline: every table a micro-batch touched is
committed in one catalog transaction.

Per batch (the ``calving-kafka`` source emits one row per planned offset range):

1. route: each topic seen for the first time is routed (``calving.ingest.config.router``) and its
   table loaded or created from its first change event (``discover``);
2. write: one Spark job; each task reads its ranges, decodes and writes each table's
   files (``tasks``), reporting the change-event schemas it saw;
3. evolve: a table whose events carry a changed schema is evolved (or, for an
   incompatible change, stopped: its records become dead letters) and only its ranges
   are written again;
4. commit: each table's ``Coordinator`` prepares its ``RowDelta`` (deletion vectors from
   its own primary-key index, a ledger claim for its own topic-partitions); the
   dead-letter table gets the whole batch's claim; all of them swap in one catalog
   transaction (``commit_tables``). A catalog that cannot (the filesystem catalog)
   commits table by table, the dead-letter table last.

Restarts: ``starting_ledger`` reads every table's ledger for this writer id (the
lowest offset per topic-partition wins), so a lost checkpoint replays only what some
table lacks, and each table's claim skips what it holds.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from calving.commit.catalog.base import Catalog, TableIdent
from calving.commit.errors import (
    CalvingError,
    CatalogError,
    NoSuchTableError,
    Terminal,
    Transient,
)
from calving.commit.io import FileIO
from calving.commit.spec.metadata import serialize_metadata
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.committer import Committed, Skipped
from calving.commit.table.ledger import LedgerClaim, TopicPartition, read_ledger
from calving.commit.table.ledger import OffsetRange as LedgerRange
from calving.commit.table.multi_commit import TableCommit, commit_tables
from calving.commit.table.outcomes import CommitOutcome, done_or_raise
from calving.commit.table.table import Table
from calving.ingest.config.format import FormatConfig, build_decoder
from calving.ingest.config.router import NeedsSource, Route, Skip, TableRouter
from calving.ingest.config.table import TableConfig
from calving.ingest.decode.batch import Decoder
from calving.ingest.kafka.offsets import OffsetRange
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.sink.coordinator import (
    BatchStats,
    Coordinator,
    ParsedMessages,
    PreparedBatch,
)
from calving.ingest.sink.dead_letters import DEFAULT_TOPIC_MAX_BYTES, DeadLetterTarget
from calving.ingest.sink.executor import TaskPlan
from calving.ingest.sink.foreach_batch import forget_files as _forget
from calving.ingest.sink.foreach_batch import keys_in_two_tasks
from calving.ingest.sink.many.discover import first_event, open_routed_table
from calving.ingest.sink.many.evolve import evolution
from calving.ingest.sink.many.tasks import TablePlan, decode_task_output, many_tables_task
from calving.ingest.sink.many.transactions import (
    LAST_TRANSACTION,
    TRANSACTION_OFFSET,
    Horizon,
    TransactionScope,
    TransactionTracker,
    collection_names,
    horizon,
    possible,
)
from calving.ingest.sink.messages import (
    Coordinates,
    DeadLettersDeferred,
    Message,
    RangeSeen,
    SchemaSeen,
    TransactionRuns,
    decode_tagged,
)

log = logging.getLogger("calving.many")

RangeRow = tuple[str, int, int, int]


@dataclass
class RoutedTable:
    table: Table
    coordinator: Coordinator
    #: Why the table is stopped (an incompatible source schema change), if it is.
    stopped: str | None = None
    decoder: tuple[int, Decoder] | None = None
    #: Value schemas (``SchemaSeen`` texts) that need no change, with the table schema id
    #: they were checked against: a steady stream reports the same ones every batch.
    settled: dict[str, int] = field(default_factory=dict)
    #: The table's metadata JSON for task plans, with the location it was written from
    #: (serialized again only when the table changed).
    serialized: tuple[str, bytes] | None = None

    @property
    def name(self) -> str:
        return self.table.name


@dataclass
class ManyBatchStats:
    batch_id: int
    tables: dict[str, BatchStats] = field(default_factory=dict)
    #: True when the tables swapped in one catalog transaction.
    atomic: bool = False
    commit_seconds: float = 0.0
    dead_letters: int = 0
    #: Tables stopped by an incompatible schema change (name -> message).
    stopped: dict[str, str] = field(default_factory=dict)
    #: With transaction boundaries: the last source transaction the batch committed,
    #: and the records left for a later batch (behind an incomplete transaction).
    transaction: str | None = None
    held_back: int = 0
    #: Records the batch read (its ranges, held-back ones read again included).
    read: int = 0
    #: Seconds the batch spent routing, writing (tasks) and committing (driver).
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(s.records for s in self.tables.values())

    @property
    def committed(self) -> list[str]:
        return sorted(n for n, s in self.tables.items() if s.outcome == "committed")


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
        on_batch: Callable[[ManyBatchStats], None] | None = None,
        transactions: TransactionTracker | None = None,
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
        self.metrics = None  # the per-table Prometheus figures are not wired for many tables
        self.routes: dict[str, Route | Skip] = {}
        #: Data-collection names (as END markers give them) -> topic, from the source
        #: blocks of each routed topic's first event.
        self.collections: dict[str, str] = {}
        self.tables: dict[str, RoutedTable] = {}
        self.history: list[ManyBatchStats] = []
        #: One Kafka consumer per task for all its ranges (False: one per range; the
        #: benchmark's peer).
        self.reuse_consumer = True

    # ------------------------------------------------------------ restarts

    @property
    def description(self) -> str:
        return f"{len(self.tables)} routed table(s)"

    def starting_ledger(self) -> dict[TopicPartition, int]:
        """Where the source must not read below: per topic-partition, the lowest next
        offset any of this writer's tables (and the dead-letter table) holds."""
        out: dict[TopicPartition, int] = {}
        for ledger in self._ledgers():
            for tp, offset in ledger.items():
                out[tp] = min(offset, out.get(tp, offset))
        return out

    def _ledgers(self) -> list[dict[TopicPartition, int]]:
        return [read_ledger(t.metadata, self.writer_id) for t in self._writer_tables()]

    def _writer_tables(self) -> Iterable[Table]:
        """Every table of the catalog. One that cannot be loaded is never skipped (its
        ledger could hold the lowest offset): a transient failure is retried, then the
        start stops; only a table dropped since it was listed is left out."""
        seen = set()
        for namespace in _all_namespaces(self.catalog):
            for ident in self.catalog.list_tables(namespace):
                if ident in seen:
                    continue
                seen.add(ident)
                table = _load_for_ledger(self.catalog, ident, self.io)
                if table is not None:
                    yield table

    def close(self) -> None:
        """Save every keyed table's primary-key index with the table."""
        for routed in self.tables.values():
            routed.coordinator.save_index()

    # ------------------------------------------------------------ a batch

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [(r.topic, int(r.partition), int(r.start), int(r.end)) for r in df.collect()]
        self.write_batch(df.sparkSession, rows, batch_id)

    def write_batch(self, spark: Any, rows: Sequence[RangeRow], batch_id: int) -> ManyBatchStats:
        started = time.monotonic()
        spans = _spans(rows)
        scope = None
        if self.transactions is not None:
            spans = self._transaction_ranges(spans)
        self._route(spans)
        if self.transactions is not None:
            scope = self._transaction_scope(spans)
        routed = time.monotonic()
        live = {t: s for t, s in spans.items() if self._routed_table(t) is not None}
        messages = self._write(spark, batch_id, live, scope=scope, judge=False)
        messages = self._evolve_and_rewrite(spark, batch_id, live, messages, scope)
        bound = None
        if self.transactions is not None and scope is not None:
            bound, messages = self._within_horizon(spark, batch_id, live, messages, scope)
        written = time.monotonic()
        parsed = {name: ParsedMessages.of(ms) for name, ms in messages.items()}
        stats = self._commit(batch_id, parsed, self._transaction_claim(bound, scope))
        if self.transactions is not None and scope is not None and bound is not None:
            read = {(r.topic, r.partition): r.end for rs in spans.values() for r in rs}
            self.transactions.committed(bound, scope, read)
            stats.held_back = self.transactions.held_back()
        stats.read = sum(r.end - r.start for rs in spans.values() for r in rs)
        stats.phases = {
            "route": routed - started,
            "write": written - routed,
            "commit": time.monotonic() - written,
        }
        log.info(
            "batch %d: %d record(s) into %d table(s) (%s) in %.2fs (route %.2fs, write %.2fs, "
            "commit %.2fs of which the catalog swap %.3fs)",
            batch_id,
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
        return stats

    # ------------------------------------------------------------ transactions

    def _transaction_ranges(
        self, planned: dict[str, list[OffsetRange]]
    ) -> dict[str, list[OffsetRange]]:
        tracker = self.transactions
        assert tracker is not None
        if not tracker.restored:
            tracker.restore(self._ledgers())
        spans = tracker.ranges(planned)
        tracker.read_markers()
        return spans

    def _transaction_scope(self, spans: Mapping[str, list[OffsetRange]]) -> TransactionScope:
        """The ended transactions this batch can hold, as far as their END markers' event
        counts fit in the records it reads."""
        tracker = self.transactions
        assert tracker is not None
        available = {t: sum(r.end - r.start for r in rs) for t, rs in spans.items()}
        return tracker.scope(possible(tracker.pending, available, self._collection_topic))

    def _collection_topic(self, name: str) -> str | None:
        """The replicated topic of a transaction END's data collection, or None: the
        topic whose events' source block names it, else ``<topic_prefix>.<name>``."""
        tracker = self.transactions
        assert tracker is not None
        topic = self.collections.get(name) or f"{tracker.topic_prefix}.{name}"
        route = self.routes.get(topic)
        if isinstance(route, Skip) or not self.router.subscribed(topic):
            return None
        return topic

    def _within_horizon(
        self,
        spark: Any,
        batch_id: int,
        spans: Mapping[str, list[OffsetRange]],
        messages: dict[str, list[Message]],
        scope: TransactionScope,
    ) -> tuple[Horizon, dict[str, list[Message]]]:
        """The batch's horizon; tables whose files went past it are written again up
        to it (their first files are never committed)."""
        tracker = self.transactions
        assert tracker is not None
        runs = [
            r
            for ms in messages.values()
            for m in ms
            if isinstance(m, TransactionRuns)
            for r in m.runs
        ]
        starts = {(r.topic, r.partition): r.start for rs in spans.values() for r in rs}
        bound = horizon(tracker.pending, runs, starts, self._collection_topic)
        if scope.everything:
            return bound, messages
        again = set()
        for name, ms in messages.items():
            for m in ms:
                if isinstance(m, RangeSeen) and m.end > bound.cuts.get((m.topic, m.partition), 0):
                    again.add(name)
        if again:
            log.info(
                "batch %d: %d table(s) written past the last whole source transaction; "
                "writing them again up to it",
                batch_id,
                len(again),
            )
            cut = TransactionScope(cuts=bound.cuts)
            self._write_again(spark, batch_id, spans, messages, again, cut)
        return bound, messages

    def _transaction_claim(
        self, bound: Horizon | None, scope: TransactionScope | None
    ) -> tuple[TopicPartition, LedgerRange, dict[str, str]] | None:
        tracker = self.transactions
        if tracker is None or bound is None or scope is None:
            return None
        span = tracker.claim(bound, scope)
        if span is None:
            return None
        summary = {TRANSACTION_OFFSET: str(span[1] - 1)}
        if bound.last is not None and not scope.everything:
            summary[LAST_TRANSACTION] = bound.last.txid
        return tracker.tp, LedgerRange(*span), summary

    # ------------------------------------------------------------ 1. route

    def _route(self, spans: Mapping[str, list[OffsetRange]]) -> None:
        for topic, ranges in spans.items():
            if topic in self.routes:
                continue
            outcome = self.router.route(topic)
            event = None
            if isinstance(outcome, NeedsSource | Route):
                event = first_event(self.source_options, ranges, self.format.schema_source())
                if event is None:
                    log.info("topic %s: no change event yet (only tombstones); waiting", topic)
                    continue
            if isinstance(outcome, NeedsSource):
                outcome = self.router.route(topic, event.source if event else None)
                if isinstance(outcome, NeedsSource):
                    log.warning("topic %s: its first event has no source block to route by", topic)
                    continue
            self.routes[topic] = outcome
            if isinstance(outcome, Skip):
                log.info("topic %s: skipped (%s)", topic, outcome.reason)
                continue
            assert isinstance(outcome, Route) and event is not None
            for collection in collection_names(event.source):
                self.collections.setdefault(collection, topic)
            if outcome.name not in self.tables:
                table = open_routed_table(
                    self.catalog, self.io, outcome, event, self.template, self.format
                )
                self.tables[outcome.name] = RoutedTable(
                    table,
                    Coordinator(table, self.writer_id, index_save_every=self.index_save_every),
                )
            log.info("topic %s -> table %s", topic, outcome.name)

    def _routed_table(self, topic: str) -> RoutedTable | None:
        route = self.routes.get(topic)
        return self.tables.get(route.name) if isinstance(route, Route) else None

    # ------------------------------------------------------------ 2. write

    def _write(
        self,
        spark: Any,
        batch_id: int,
        spans: Mapping[str, list[OffsetRange]],
        already_sent: frozenset[Coordinates] = frozenset(),
        together: frozenset[str] = frozenset(),
        scope: TransactionScope | None = None,
        judge: bool = True,
    ) -> dict[str, list[Message]]:
        """Run one Spark job writing ``spans``; messages by table name. The ranges of
        tables in ``together`` go to one task (their keys may span partitions). Unless
        ``judge``, a table's records that do not decode are not dead letters yet when its
        events carry a schema not checked against the table (``TablePlan.settled``)."""
        if not spans:
            return {}
        plans = self._plans(batch_id, spans, already_sent, scope, judge)
        groups: list[list[RangeRow]] = []
        joint: dict[str, list[RangeRow]] = {}
        for topic, ranges in spans.items():
            name = plans[topic].table
            for r in ranges:
                row = (r.topic, r.partition, r.start, r.end)
                if name in together:
                    joint.setdefault(name, []).append(row)
                else:
                    groups.append([row])
        groups += joint.values()
        groups = pack(groups, spark.sparkContext.defaultParallelism * TASKS_PER_CORE)
        task = many_tables_task(plans, self.source_options, self.reuse_consumer)
        blobs = (
            spark.sparkContext.parallelize(groups, len(groups))
            .mapPartitions(lambda items: task(r for group in items for r in group))
            .collect()
        )
        messages = decode_tagged(decode_task_output(blobs))
        spread = self._spread(messages)
        if spread and not together:
            for name in spread:
                log.warning(
                    "batch %d: a key of %s is in two tasks; writing it in one", batch_id, name
                )
                _forget(self.tables[name].table, ParsedMessages.of(messages.pop(name)))
            again = {t: s for t, s in spans.items() if plans[t].table in spread}
            messages.update(
                self._write(spark, batch_id, again, already_sent, frozenset(spread), scope, judge)
            )
        return messages

    def _spread(self, messages: Mapping[str, list[Message]]) -> list[str]:
        out = []
        for name, ms in messages.items():
            schema = self.tables[name].table.metadata.schema
            if schema.identifier_field_ids and keys_in_two_tasks(ParsedMessages.of(ms), schema):
                out.append(name)
        return out

    def _plans(
        self,
        batch_id: int,
        spans: Mapping[str, list[OffsetRange]],
        already_sent: frozenset[Coordinates],
        scope: TransactionScope | None = None,
        judge: bool = True,
    ) -> dict[str, TablePlan]:
        dlq = self.dead_letter_table
        if dlq is not None:
            dlq.refresh()
        target = DeadLetterTarget(
            table_metadata_json=serialize_metadata(dlq.metadata) if dlq else None,
            table_metadata_location=dlq.metadata_location if dlq else None,
            topic=self.dead_letter_topic,
            kafka_config=self.kafka_config,
            topic_max_bytes=self.dead_letter_max_bytes,
            already_sent=already_sent,
        )
        by_table: dict[str, TablePlan] = {}
        plans = {}
        for topic in spans:
            routed = self._routed_table(topic)
            assert routed is not None
            plan = by_table.get(routed.name)
            if plan is None:
                plan = by_table[routed.name] = self._plan(routed, batch_id, target, scope, judge)
            plans[topic] = plan
        return plans

    def _plan(
        self,
        routed: RoutedTable,
        batch_id: int,
        target: DeadLetterTarget,
        scope: TransactionScope | None = None,
        judge: bool = True,
    ) -> TablePlan:
        table = routed.table.refresh()
        schema = table.metadata.schema
        if routed.decoder is None or routed.decoder[0] != schema.schema_id:
            routed.decoder = (schema.schema_id, build_decoder(self.format, schema))
        safe = routed.name.replace(".", "_")
        if routed.serialized is None or routed.serialized[0] != table.metadata_location:
            routed.serialized = (table.metadata_location, serialize_metadata(table.metadata))
        task = TaskPlan(
            metadata_json=routed.serialized[1],
            metadata_location=table.metadata_location,
            decoder=routed.decoder[1],
            ledger=read_ledger(table.metadata, self.writer_id),
            file_prefix=f"{self.writer_id}-b{batch_id}-{safe}",
            dead_letters=target,
            io_properties=table.io.properties,
        )
        keyed = bool(schema.identifier_field_ids)
        settled = None
        if not judge:
            settled = frozenset(t for t, sid in routed.settled.items() if sid == schema.schema_id)
        return TablePlan(routed.name, task, keyed, routed.stopped, scope, settled)

    # ------------------------------------------------------------ 3. evolve

    def _evolve_and_rewrite(
        self,
        spark: Any,
        batch_id: int,
        spans: Mapping[str, list[OffsetRange]],
        messages: dict[str, list[Message]],
        scope: TransactionScope | None = None,
    ) -> dict[str, list[Message]]:
        again: set[str] = set()
        for name, ms in messages.items():
            routed = self.tables[name]
            # The schema the batch's files were written with (``_plan`` refreshed it).
            schema = routed.table.metadata.schema
            texts = sorted(
                {m.schema for m in ms if isinstance(m, SchemaSeen)}
                - {t for t, sid in routed.settled.items() if sid == schema.schema_id}
            )
            if any(isinstance(m, DeadLettersDeferred) for m in ms):
                again.add(name)  # judged only now that the table has followed its schemas
            if not texts or routed.stopped is not None:
                continue
            change = evolution(name, schema, texts, self.format.schema_source())
            if change.stopped is None and change.update is None:
                routed.settled.update(dict.fromkeys(texts, schema.schema_id))
            if change.stopped is not None:
                routed.stopped = change.stopped
                log.error("%s; its records go to the dead-letter destination", change.stopped)
                again.add(name)
            elif change.update is not None:
                routed.table.commit_or_raise(change.update)
                log.info("table %s: schema evolved (%s)", name, _described(change.update))
                again.add(name)
            elif change.record is not None:  # columns the source dropped: metadata only
                routed.table.commit_or_raise(change.record)
        if again:
            self._write_again(spark, batch_id, spans, messages, again, scope)
        return messages

    def _write_again(
        self,
        spark: Any,
        batch_id: int,
        spans: Mapping[str, list[OffsetRange]],
        messages: dict[str, list[Message]],
        names: set[str],
        scope: TransactionScope | None,
    ) -> None:
        """Drop the files ``names`` were written to in this batch and write them again
        (in ``messages``); dead letters already sent to the topic are not sent twice."""
        sent: set[Coordinates] = set()
        for name in names:
            parsed = ParsedMessages.of(messages.pop(name))
            sent |= parsed.dead_letters_sent
            _forget(self.tables[name].table, parsed)
        redo = {t: s for t, s in spans.items() if _name(self._routed_table(t)) in names}
        messages.update(self._write(spark, batch_id, redo, frozenset(sent), scope=scope))

    # ------------------------------------------------------------ 4. commit

    def _commit(
        self,
        batch_id: int,
        parsed: Mapping[str, ParsedMessages],
        transaction: tuple[TopicPartition, LedgerRange, dict[str, str]] | None = None,
    ) -> ManyBatchStats:
        stats = ManyBatchStats(batch_id)
        stats.stopped = {r.name: r.stopped for r in self.tables.values() if r.stopped}
        summary: dict[str, str] = {}
        if transaction is not None:
            tp, span, summary = transaction
            stats.transaction = summary.get(LAST_TRANSACTION)
            for p in parsed.values():
                if p.ranges:
                    p.ranges[tp] = span
        prepared: dict[str, PreparedBatch] = {}
        for name, p in parsed.items():
            if p.deferred:  # a broken invariant: every deferred table is written again
                raise CalvingError(f"table {name}: {p.deferred} record(s) of batch {batch_id} "
                                   "were never judged")  # fmt: skip
            prepared[name] = self.tables[name].coordinator.prepare(batch_id, p, summary)
        _label_batch(prepared)
        commits = [
            TableCommit(
                self.tables[name].table.ident,
                pb.action,
                expected_table_uuid=self.tables[name].table.metadata.table_uuid,
            )
            for name, pb in prepared.items()
            if pb.action is not None
        ]
        dead = self._dead_letter_commit(parsed)
        if dead is not None:
            commits.append(dead)
        stats.dead_letters = sum(p.dead_letters for p in parsed.values())
        started = time.monotonic()
        outcomes, stats.atomic = self._swap(commits)
        stats.commit_seconds = time.monotonic() - started
        failure: CalvingError | None = None
        for name, pb in prepared.items():
            outcome = outcomes.get(self.tables[name].table.ident)
            if outcome is None:
                stats.tables[name] = pb.stats
                continue
            try:
                stats.tables[name] = self.tables[name].coordinator.finish(pb, outcome)
            except CalvingError as err:
                failure = failure or err
        if dead is not None and failure is None:
            done_or_raise(outcomes[dead.ident], f"dead letters of batch {batch_id}")
        if failure is not None:
            raise failure
        return stats

    def _dead_letter_commit(self, parsed: Mapping[str, ParsedMessages]) -> TableCommit | None:
        dlq = self.dead_letter_table
        files = tuple(f for p in parsed.values() for f in p.dead_letter_files)
        if dlq is None or not files:
            return None
        ranges = {tp: r for p in parsed.values() for tp, r in p.ranges.items()}
        claim = LedgerClaim(self.writer_id, ranges, allow_gaps=True)
        return TableCommit(dlq.ident, FastAppend(files, ledger=claim))

    def _swap(self, commits: list[TableCommit]) -> tuple[dict[TableIdent, CommitOutcome], bool]:
        if not commits:
            return {}, False
        if self.catalog.supports_multi_table_commit and len(commits) > 1:
            return commit_tables(self.catalog, self.io, commits), True
        out: dict[TableIdent, CommitOutcome] = {}
        for c in commits:  # the dead-letter table, if any, comes last
            table = Table.load(self.catalog, c.ident, self.io)
            out[c.ident] = table.commit(c.action)
            if not isinstance(out[c.ident], Committed | Skipped):
                break  # later tables stay behind; their replay is skipped by nothing
        return out, False


#: Snapshot summary entries tying a batch's snapshots together: one token per commit
#: of a batch, and the tables that commit carries (all of them show it, or none).
BATCH_COMMIT = "calving.batch.commit"
BATCH_TABLES = "calving.batch.tables"


def _label_batch(prepared: Mapping[str, PreparedBatch]) -> None:
    names = sorted(n for n, pb in prepared.items() if pb.action is not None)
    token = uuid.uuid4().hex
    for pb in prepared.values():
        if pb.action is not None:
            label = {BATCH_COMMIT: token, BATCH_TABLES: ",".join(names)}
            pb.action = replace(pb.action, summary={**pb.action.summary, **label})


#: Tasks per core a batch's ranges are packed into: many small topics share tasks (a
#: task per topic-partition costs more than its records when tables are many).
TASKS_PER_CORE = 2


def pack(groups: list[list[RangeRow]], slots: int) -> list[list[RangeRow]]:
    """``groups`` (each kept whole) packed into at most ``slots`` tasks of about equal
    record counts (largest first, each into the lightest task)."""
    if len(groups) <= slots:
        return groups
    bins: list[list[RangeRow]] = [[] for _ in range(max(1, slots))]
    weights = [0] * len(bins)
    for group in sorted(groups, key=lambda g: -sum(r[3] - r[2] for r in g)):
        i = weights.index(min(weights))
        bins[i].extend(group)
        weights[i] += sum(r[3] - r[2] for r in group)
    return bins


def _spans(rows: Iterable[RangeRow]) -> dict[str, list[OffsetRange]]:
    out: dict[str, list[OffsetRange]] = {}
    for topic, partition, start, end in rows:
        out.setdefault(topic, []).append(OffsetRange(topic, partition, start, end))
    return out


#: Seconds between tries of a table load that failed transiently at start.
LOAD_RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)


class LedgerUnreadableError(Terminal):
    """A table of the catalog could not be loaded at start, so its ledger is unknown:
    the restart point could move past it (names the table and the cause)."""


def _load_for_ledger(catalog: Catalog, ident: TableIdent, io: FileIO) -> Table | None:
    """``ident`` loaded (retrying transient failures), None if it was dropped since it
    was listed; ``LedgerUnreadableError`` otherwise."""
    name = ".".join(ident)
    for attempt, delay in enumerate((*LOAD_RETRY_DELAYS, None)):
        try:
            return Table.load(catalog, ident, io)
        except NoSuchTableError:
            if not catalog.table_exists(ident):
                log.info("table %s was dropped since it was listed; no ledger to read", name)
                return None
            err: CalvingError = CatalogError(f"table {name} is listed but does not load")
        except Transient as transient:
            err = transient
        except CalvingError as other:
            raise LedgerUnreadableError(
                f"cannot load table {name} to read its ledger: {other}"
            ) from other
        if delay is None:
            break
        log.warning("loading table %s failed (try %d): %s; trying again", name, attempt + 1, err)
        time.sleep(delay)
    raise LedgerUnreadableError(
        f"cannot load table {name} to read its ledger after {len(LOAD_RETRY_DELAYS) + 1} "
        f"tries: {err}; the start stops so that no table's records are skipped"
    )


def _all_namespaces(catalog: Catalog) -> list[tuple[str, ...]]:
    out = []
    todo = catalog.list_namespaces()
    while todo:
        ns = todo.pop()
        out.append(ns)
        todo.extend(n for n in catalog.list_namespaces(ns) if n != ns and n not in out)
    return out


def _name(routed: RoutedTable | None) -> str | None:
    return routed.name if routed is not None else None


def _described(update: Any) -> str:
    parts = [f"add {c.name}" for c in update.add]
    parts += [f"widen {n} to {t}" for n, t in update.promote]
    parts += [f"{n} optional" for n in update.make_optional]
    return ", ".join(parts)
