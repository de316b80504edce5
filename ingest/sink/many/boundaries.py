"""Source-transaction boundaries (``[sink] transaction_topic``) around a batch's
stages: which ranges it reads and which ended transactions it may hold (before the
write), the horizon its files may reach (after the write and evolve stages: a table
written past it is written again up to it), and the transaction-topic range its
commit claims (``transactions`` has the tracker and the pure rules)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from calving.commit.table.ledger import OffsetRange as LedgerRange
from calving.commit.table.ledger import TopicPartition
from calving.ingest.config.router import Skip, TableRouter
from calving.ingest.kafka.offsets import OffsetRange
from calving.ingest.sink.many.commit import TransactionClaim
from calving.ingest.sink.many.route import Routing
from calving.ingest.sink.many.transactions import (
    LAST_TRANSACTION,
    TRANSACTION_OFFSET,
    Horizon,
    TransactionScope,
    TransactionTracker,
    horizon,
    possible,
)
from calving.ingest.sink.messages import Message, RangeSeen, TransactionRuns

log = logging.getLogger("calving.many")

Spans = Mapping[str, list[OffsetRange]]


@dataclass(frozen=True)
class Boundaries:
    """The batch stages' view of ``tracker``: topics are routed by ``routing``."""

    tracker: TransactionTracker
    routing: Routing
    router: TableRouter

    def ranges(
        self, planned: Spans, ledgers: Callable[[], Iterable[Mapping[TopicPartition, int]]]
    ) -> dict[str, list[OffsetRange]]:
        """The ranges the batch reads of ``planned`` (the tracker restored from the
        tables' ``ledgers`` first, once), the transaction topic's new markers read."""
        tracker = self.tracker
        if not tracker.restored:
            tracker.restore(ledgers())
        spans = tracker.ranges(planned)
        tracker.read_markers()
        return spans

    def scope(self, spans: Spans) -> TransactionScope:
        """The ended transactions this batch can hold, as far as their END markers' event
        counts fit in the records it reads."""
        tracker = self.tracker
        available = {t: sum(r.end - r.start for r in rs) for t, rs in spans.items()}
        return tracker.scope(possible(tracker.pending, available, self.collection_topic))

    def collection_topic(self, name: str) -> str | None:
        """The replicated topic of a transaction END's data collection, or None: the
        topic whose events' source block names it, else ``<topic_prefix>.<name>``."""
        topic = self.routing.collections.get(name) or f"{self.tracker.topic_prefix}.{name}"
        route = self.routing.routes.get(topic)
        if isinstance(route, Skip) or not self.router.subscribed(topic):
            return None
        return topic

    def horizon(
        self,
        batch_id: int,
        spans: Spans,
        messages: Mapping[str, list[Message]],
        scope: TransactionScope,
    ) -> tuple[Horizon, set[str]]:
        """The batch's horizon, and the tables whose files went past it (to be written
        again up to it: their first files are never committed)."""
        runs = [
            r
            for ms in messages.values()
            for m in ms
            if isinstance(m, TransactionRuns)
            for r in m.runs
        ]
        starts = {(r.topic, r.partition): r.start for rs in spans.values() for r in rs}
        bound = horizon(self.tracker.pending, runs, starts, self.collection_topic)
        if scope.everything:
            return bound, set()
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
        return bound, again

    def claim(self, bound: Horizon, scope: TransactionScope) -> TransactionClaim | None:
        """The transaction-topic range the batch's commit claims, None if none."""
        span = self.tracker.claim(bound, scope)
        if span is None:
            return None
        summary = {TRANSACTION_OFFSET: str(span[1] - 1)}
        if bound.last is not None and not scope.everything:
            summary[LAST_TRANSACTION] = bound.last.txid
        return self.tracker.tp, LedgerRange(*span), summary

    def committed(self, bound: Horizon, scope: TransactionScope, spans: Spans) -> int:
        """Move the tracker on after the batch's commit; the records held back."""
        read = {(r.topic, r.partition): r.end for rs in spans.values() for r in rs}
        self.tracker.committed(bound, scope, read)
        return self.tracker.held_back()
