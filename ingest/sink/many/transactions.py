"""Source-transaction boundaries (Debezium ``provide.transaction.metadata``).

Debezium writes a ``BEGIN`` and an ``END`` record per source transaction to
``<prefix>.transaction``; the ``END`` counts the transaction's events per data collection
(``data_collections``: ``schema.table``, ``db.table`` ... by connector), and every change
event names its transaction (``transaction.id``). A data collection is the topic whose
events' ``source`` block names it (``collection_names``); one no event named yet is
``<topic.prefix>.<collection>`` (``[sink] topic_prefix``). With ``[sink] transaction_topic`` a batch commits a prefix of the
source's transactions, in ``END`` order, whose events are all in hand:

1. the driver reads the transaction topic's new markers (``TransactionTracker``);
2. tasks read each topic-partition from the first uncommitted offset, stop at the first
   event of a transaction without an ``END`` yet (``TransactionScope.cut``) and report
   the runs of consecutive events per transaction (``RunBuilder``);
3. ``horizon`` takes the longest prefix of ended transactions whose events (for every
   replicated table) were all read, and the offset up to which each topic-partition may
   be committed; a table whose files went past that is written again up to it;
4. the commit claims only what is inside the horizon, records the transaction topic's
   position in every committed table's ledger, and names the last transaction in the
   snapshot summary. What lies beyond waits for the next batch.

An event without a transaction block (a snapshot read) is committed with what precedes it
in its partition. A transaction that stays incomplete past ``transaction_timeout`` is
given up: the next batch commits everything it reads, with a warning naming it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from calving.commit.table.ledger import TopicPartition
from calving.ingest.decode.avro_confluent import ConfluentAvroReader
from calving.ingest.decode.batch import Reject
from calving.ingest.decode.connect_envelope import is_connect_envelope
from calving.ingest.kafka.offsets import OffsetRange
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.sink.messages import TransactionRun, TransactionRuns

log = logging.getLogger("calving.many.transactions")

#: Snapshot summary entries naming the source position a commit reflects.
LAST_TRANSACTION = "calving.source.transaction-id"
TRANSACTION_OFFSET = "calving.source.transaction-offset"

_TXN_ID = re.compile(rb'"transaction":\{"id":"((?:[^"\\]|\\.)*)"')


def transaction_ids(
    values: Iterable[bytes | None], avro: ConfluentAvroReader | None = None
) -> list[str | None]:
    """Each change event's ``transaction.id`` (None: no block, a tombstone). ``avro``:
    values framed as Confluent Avro (``debezium-avro``) are read with their writer
    schemas; the others are read as JSON."""
    return [
        _avro_id(v, avro) if avro is not None and v is not None and v[:1] == b"\x00"
        else _json_id(v)
        for v in values
    ]  # fmt: skip


def _json_id(v: bytes | None) -> str | None:
    if v is None:
        return None
    at = v.rfind(b'"transaction":')
    if at < 0:
        return None
    m = _TXN_ID.match(v, at)
    if m is not None:
        return str(json.loads(b'"' + m.group(1) + b'"'))
    if v.startswith(b'"transaction":null', at):
        return None
    return _parsed_id(v)


def _avro_id(value: bytes | None, avro: ConfluentAvroReader) -> str | None:
    """An Avro change event's ``transaction.id``; None for a tombstone, an event without
    the block, or bytes that do not decode (the decode stage dead-letters those)."""
    if value is None:
        return None
    try:
        _, record = avro.read(value)
    except Reject:
        return None
    block = record.get("transaction") if isinstance(record, dict) else None
    return str(block["id"]) if isinstance(block, dict) and "id" in block else None


def _parsed_id(value: bytes) -> str | None:
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    payload = doc.get("payload", doc) if isinstance(doc, dict) else None
    block = payload.get("transaction") if isinstance(payload, dict) else None
    return str(block["id"]) if isinstance(block, dict) and "id" in block else None


@dataclass(frozen=True)
class TransactionScope:
    """What a task may write: events of ``ended`` transactions (and events without
    one), up to the first other event; ``cuts`` (second pass) fixes each
    topic-partition's end; ``everything`` (after a timeout) writes all."""

    ended: frozenset[str] = frozenset()
    cuts: Mapping[TopicPartition, int] = field(default_factory=dict)
    everything: bool = False

    def cut(self, tp: TopicPartition, offsets: Sequence[int], ids: Sequence[str | None]) -> int:
        """Index of the first record (of these, in offset order) not to write."""
        if self.everything:
            return len(offsets)
        if self.cuts:
            end = self.cuts.get(tp)
            if end is None:
                return 0
            return next((i for i, o in enumerate(offsets) if o >= end), len(offsets))
        return next(
            (i for i, x in enumerate(ids) if x is not None and x not in self.ended), len(ids)
        )


class RunBuilder:
    """Runs of consecutive records of one transaction, per topic-partition."""

    def __init__(self) -> None:
        self.runs: dict[TopicPartition, list[list[Any]]] = {}

    def add(self, tp: TopicPartition, offsets: Sequence[int], ids: Sequence[str | None]) -> None:
        runs = self.runs.setdefault(tp, [])
        for offset, txid in zip(offsets, ids):
            if runs and runs[-1][0] == txid:
                runs[-1][2] = offset
                runs[-1][3] += 1
            else:
                runs.append([txid, offset, offset, 1])

    def message(self) -> TransactionRuns:
        return TransactionRuns(
            tuple((t, p, x, a, b, n) for (t, p), rs in self.runs.items() for x, a, b, n in rs)
        )


@dataclass(frozen=True)
class EndMarker:
    txid: str
    #: Offset of the END record in the transaction topic.
    offset: int
    #: Events per table topic.
    counts: Mapping[str, int]


def end_marker(
    offset: int, value: bytes | None, avro: ConfluentAvroReader | None = None
) -> EndMarker | None:
    """An ``END`` record of the transaction topic, or None (``BEGIN``, anything else).
    ``avro``: Confluent Avro markers (Debezium's Avro converter) are read with it."""
    doc: Any
    if value is not None and avro is not None and value[:1] == b"\x00":
        try:
            _, doc = avro.read(value)
        except Reject:
            return None
    else:
        try:
            doc = json.loads(value) if value is not None else None
        except ValueError:
            return None
    if is_connect_envelope(doc):
        doc = doc["payload"]
    if not isinstance(doc, dict) or doc.get("status") != "END":
        return None
    counts = {
        str(c["data_collection"]): int(c["event_count"])
        for c in doc.get("data_collections") or ()
        if isinstance(c, dict)
    }
    return EndMarker(str(doc.get("id")), offset, counts)


def collection_names(source: Mapping[str, Any] | None) -> list[str]:
    """The names an END marker may give the data collection of a change event with this
    ``source`` block: ``schema.table`` (PostgreSQL), ``db.table`` (MySQL),
    ``db.schema.table`` (SQL Server, Oracle), ``db.collection`` (MongoDB)."""
    if not source:
        return []
    db, schema = source.get("db"), source.get("schema")
    table = source.get("table") or source.get("collection")
    if not table:
        return []
    parts = [(schema, table), (db, table), (db, schema, table)]
    out = [".".join(map(str, p)) for p in parts if all(p)]
    return list(dict.fromkeys(out))


def bounded(spans: Mapping[str, list[OffsetRange]], limit: int) -> dict[str, list[OffsetRange]]:
    """``spans`` cut to at most ``limit`` records in all: each range keeps its first
    offsets, in proportion to its length (largest remainders first)."""
    ranges = [r for rs in spans.values() for r in rs]
    total = sum(r.end - r.start for r in ranges)
    if total <= limit:
        return {t: list(rs) for t, rs in spans.items()}
    keep = [(r.end - r.start) * limit // total for r in ranges]
    by_remainder = sorted(
        range(len(ranges)), key=lambda i: -((ranges[i].end - ranges[i].start) * limit % total)
    )
    for i in by_remainder[: limit - sum(keep)]:
        keep[i] += 1
    out: dict[str, list[OffsetRange]] = {}
    for r, n in zip(ranges, keep):
        if n > 0:
            out.setdefault(r.topic, []).append(
                OffsetRange(r.topic, r.partition, r.start, r.start + n)
            )
    return out


def possible(
    pending: Sequence[EndMarker],
    available: Mapping[str, int],
    collection: Callable[[str], str | None],
) -> frozenset[str]:
    """The ended transactions a batch can commit, as far as the END markers tell: the
    longest prefix of ``pending`` whose events, added up per topic, fit in the records
    ``available`` per topic. Events of later ones are not written (they would be written
    again up to the horizon)."""
    need: dict[str, int] = {}
    out = set()
    for end in pending:
        for name, n in end.counts.items():
            topic = collection(name)
            if topic is not None:
                need[topic] = need.get(topic, 0) + n
        if any(n > available.get(t, 0) for t, n in need.items()):
            break
        out.add(end.txid)
    return frozenset(out)


@dataclass(frozen=True)
class Horizon:
    """What a batch commits: the ended transactions inside it, the last of them, and
    per topic-partition the offset up to which it may be committed."""

    included: frozenset[str]
    last: EndMarker | None
    cuts: dict[TopicPartition, int]
    #: The first transaction that holds the rest back (for logs), if any.
    blocked_by: str | None = None


def horizon(
    pending: Sequence[EndMarker],
    runs: Iterable[TransactionRun],
    starts: Mapping[TopicPartition, int],
    collection: Callable[[str], str | None],
) -> Horizon:
    """The longest prefix of ``pending`` (END order) whose events were all read.

    ``collection(name)`` maps an END's data-collection name to the topic replicated
    for it (None: not replicated, its events are not waited for). ``starts``: each
    topic-partition's first offset read."""
    by_tp: dict[TopicPartition, list[TransactionRun]] = {}
    counts: dict[tuple[str | None, str], int] = {}
    for run in runs:
        run_topic, partition, run_txid, _, _, n = run
        by_tp.setdefault((run_topic, partition), []).append(run)
        counts[(run_txid, run_topic)] = counts.get((run_txid, run_topic), 0) + n
    included: set[str] = set()
    last = None
    blocked = None
    for end in pending:
        wanted: dict[str, int] = {}
        for name, n in end.counts.items():
            target = collection(name)
            if target is not None:
                wanted[target] = wanted.get(target, 0) + n
        if any(counts.get((end.txid, t), 0) < n for t, n in wanted.items()):
            blocked = end.txid
            break
        included.add(end.txid)
        last = end
    cuts = {}
    for tp, rs in by_tp.items():
        cut = starts.get(tp, min(r[3] for r in rs))
        for _, _, txid, first, end_offset, _ in sorted(rs, key=lambda r: r[3]):
            if txid is not None and txid not in included:
                blocked = blocked or txid
                break
            cut = end_offset + 1
        cuts[tp] = cut
    return Horizon(frozenset(included), last, cuts, blocked)


class TransactionTracker:
    """The driver's view of the transaction topic and of what each topic-partition has
    committed (``floor``) and been planned up to (``ceiling``)."""

    def __init__(
        self,
        topic: str,
        options: KafkaSourceOptions,
        timeout_s: float,
        topic_prefix: str | None = None,
        avro: ConfluentAvroReader | None = None,
    ) -> None:
        self.topic = topic
        #: Reads Confluent Avro markers (``debezium-avro``); JSON ones are read either way.
        self.avro = avro
        #: Debezium's ``topic.prefix``: a data collection no event named yet is topic
        #: ``<topic_prefix>.<collection>`` (``[sink] topic_prefix``, or the transaction
        #: topic's name without ``.transaction``).
        self.topic_prefix = topic_prefix or topic.removesuffix(".transaction")
        self.options = options
        self.timeout_s = timeout_s
        #: Next transaction-topic offset not committed (None: from its earliest).
        self.position: int | None = None
        self.read_to: int | None = None
        self.pending: list[EndMarker] = []
        self.floor: dict[TopicPartition, int] = {}
        self.ceiling: dict[TopicPartition, int] = {}
        self.blocked_since: float | None = None
        self.blocked_by: str | None = None
        self.gave_up: list[str] = []
        self.restored = False
        #: The records a batch may read (``max_offsets_per_trigger``, doubled while
        #: batches that were cut complete no transaction).
        self.bound: int | None = None
        #: The last batch was cut by the bound / completed no transaction.
        self.truncated = False
        self.stalled = False

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, 0)

    def restore(self, ledgers: Iterable[Mapping[TopicPartition, int]]) -> None:
        """After a (re)start: the transaction topic's position is the furthest any table
        committed (a batch commits its tables together); a topic-partition's floor is
        the lowest next offset of the tables holding it."""
        for ledger in ledgers:
            for tp, offset in ledger.items():
                if tp == self.tp:
                    self.position = max(offset, self.position or 0)
                else:
                    self.floor[tp] = min(offset, self.floor.get(tp, offset))
        self.read_to = self.position
        self.restored = True
        if self.options.starting_offsets == "earliest":
            # A partition no table has committed from yet may have had events held
            # back before a restart, beyond where the stream resumes: read it again.
            from calving.ingest.kafka.source import BrokerView

            view = BrokerView(self.options)
            fresh = [tp for tp in view.partitions() if tp not in self.floor and tp != self.tp]
            for tp, offset in view.earliest(fresh).items():
                self.floor[tp] = offset

    def ranges(self, planned: Mapping[str, list[OffsetRange]]) -> dict[str, list[OffsetRange]]:
        """Each topic-partition from its floor to its ceiling: what the stream planned
        now plus what earlier batches left uncommitted."""
        from calving.ingest.kafka.source import BrokerView

        for spans in planned.values():
            for r in spans:
                tp = (r.topic, r.partition)
                if r.topic == self.topic:
                    continue  # subscribed only so that new markers start a batch
                self.ceiling[tp] = max(r.end, self.ceiling.get(tp, r.end))
                self.floor.setdefault(tp, r.start)
        unknown = [tp for tp in self.floor if tp not in self.ceiling and tp != self.tp]
        if unknown:  # after a restart: held-back events the stream will not plan again
            self.ceiling.update(BrokerView(self.options).latest(unknown))
        out: dict[str, list[OffsetRange]] = {}
        for tp, end in self.ceiling.items():
            start = self.floor.get(tp, end)
            if start < end:
                out.setdefault(tp[0], []).append(OffsetRange(tp[0], tp[1], start, end))
        return self._bounded(out)

    def _bounded(self, spans: dict[str, list[OffsetRange]]) -> dict[str, list[OffsetRange]]:
        """``spans`` within ``max_offsets_per_trigger`` (each topic-partition keeps its
        first offsets). A batch that was cut and completed no transaction doubles the
        bound for the next, so a transaction larger than the cap is still read whole."""
        cap = self.options.max_offsets_per_trigger
        if cap is None:
            self.truncated = False
            return spans
        if self.stalled and self.truncated:
            self.bound = max(self.bound or cap, cap) * 2
            log.info(
                "the last batch completed no source transaction within %d records: reading "
                "up to %d (max_offsets_per_trigger = %d)",
                self.bound // 2,
                self.bound,
                cap,
            )
        elif not self.stalled:
            self.bound = cap
        limit = self.bound or cap
        out = bounded(spans, limit)
        self.truncated = out != spans
        return out

    def read_markers(self) -> None:
        """The transaction topic's records from where it was read up to now: new END
        markers join ``pending``."""
        from calving.ingest.kafka.range_reader import read_range
        from calving.ingest.kafka.source import BrokerView, kafka_arrow_schema

        view = BrokerView(self.options)
        latest = view.latest([self.tp])[self.tp]
        start = self.read_to if self.read_to is not None else view.earliest([self.tp])[self.tp]
        if self.position is None:
            self.position = start
        if start >= latest:
            return
        schema = kafka_arrow_schema(False)
        span = OffsetRange(self.topic, 0, start, latest)
        for rb in read_range(self.options, span, schema):
            offsets = rb.column("offset").to_pylist()
            for offset, value in zip(offsets, rb.column("value").to_pylist()):
                marker = end_marker(offset, value, self.avro)
                if marker is not None:
                    self.pending.append(marker)
        self.read_to = latest

    def scope(self, ended: frozenset[str] | None = None) -> TransactionScope:
        """What tasks may write: ``ended`` (default: every pending END), or everything
        after the timeout."""
        now = time.monotonic()
        if self.blocked_since is not None and now - self.blocked_since > self.timeout_s:
            log.warning(
                "source transaction %s has been incomplete for more than %.0fs: committing "
                "the events held back behind it as they are",
                self.blocked_by,
                self.timeout_s,
            )
            self.gave_up.append(self.blocked_by or "?")
            return TransactionScope(everything=True)
        if ended is None:
            ended = frozenset(m.txid for m in self.pending)
        return TransactionScope(ended=ended)

    def committed(
        self, h: Horizon, scope: TransactionScope, read: Mapping[TopicPartition, int]
    ) -> None:
        """Move on after the batch's commit: floors to the cuts, ENDs inside the horizon
        done, the transaction topic's position after the last of them."""
        if scope.everything:
            self.stalled = False
            self.pending = []
            self.position = self.read_to
            for tp, end in read.items():
                self.floor[tp] = end
            self.blocked_since = None
            self.blocked_by = None
            return
        self.floor.update(h.cuts)
        self.stalled = h.last is None
        self.pending = [m for m in self.pending if m.txid not in h.included]
        if h.last is not None:
            self.position = max(self.position or 0, h.last.offset + 1)
        if self.held_back() == 0:
            self.blocked_since = None
            self.blocked_by = None
        elif self.blocked_since is None or h.last is not None:
            # Events wait behind an incomplete transaction; the clock restarts whenever
            # the horizon moves.
            self.blocked_since = time.monotonic()
            self.blocked_by = h.blocked_by or "(a transaction without its END marker yet)"

    def held_back(self) -> int:
        """Records read but left for a later batch."""
        return sum(max(0, end - self.floor.get(tp, end)) for tp, end in self.ceiling.items())

    def claim(self, h: Horizon, scope: TransactionScope) -> tuple[int, int] | None:
        """The transaction-topic offsets ``[from, to)`` this batch's commit covers (its
        tables' ledgers record them), or None if the horizon did not move."""
        start = self.position or 0
        end = self.read_to if scope.everything else (h.last.offset + 1 if h.last else None)
        if end is None or end <= start:
            return None
        return start, end
