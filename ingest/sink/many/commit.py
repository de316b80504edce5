"""Stage 5, commit: each table's ``Coordinator`` prepares its ``RowDelta`` (deletion
vectors from its own primary-key index, a ledger claim for its own topic-partitions);
the dead-letter table gets the whole batch's claim; all of them swap in one catalog
transaction (``commit_tables``). A catalog that cannot (the filesystem catalog) commits
table by table, the dead-letter table last. The batch's figures come back as
``ManyBatchStats``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from calving.commit.catalog.base import Catalog, TableIdent
from calving.commit.errors import CalvingError
from calving.commit.io import FileIO
from calving.commit.io_sync import synced_together
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.committer import Committed, Skipped
from calving.commit.table.ledger import LedgerClaim, TopicPartition
from calving.commit.table.ledger import OffsetRange as LedgerRange
from calving.commit.table.multi_commit import TableCommit, commit_tables
from calving.commit.table.outcomes import CommitOutcome, done_or_raise
from calving.commit.table.table import Table
from calving.ingest.sink.coordinator import BatchStats, ParsedMessages, PreparedBatch
from calving.ingest.sink.many.route import RoutedTable
from calving.ingest.sink.many.transactions import LAST_TRANSACTION

#: Snapshot summary entries tying a batch's snapshots together: one token per commit
#: of a batch, and the tables that commit carries (all of them show it, or none).
BATCH_COMMIT = "calving.batch.commit"
BATCH_TABLES = "calving.batch.tables"

#: The commits swapped in: each table's outcome, and True when in one catalog transaction.
Swapped = tuple[dict[TableIdent, CommitOutcome], bool]
#: With source-transaction boundaries: the transaction topic's partition, the range the
#: batch claims of it, and the snapshot summary entries naming where it stopped.
TransactionClaim = tuple[TopicPartition, LedgerRange, dict[str, str]]


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


@dataclass(frozen=True)
class BatchCommit:
    """How a batch's tables commit: ``swap`` swaps the commits in (``swap_in``, or a
    stand-in); the dead-letter table, if any, takes ``writer_id``'s claim of the batch."""

    tables: Mapping[str, RoutedTable]
    swap: Callable[[list[TableCommit]], Swapped]
    writer_id: str
    dead_letter_table: Table | None = None

    def commit(
        self,
        batch_id: int,
        parsed: Mapping[str, ParsedMessages],
        transaction: TransactionClaim | None = None,
    ) -> ManyBatchStats:
        """Commit every table ``parsed`` holds (and the dead letters) for ``batch_id``."""
        stats = ManyBatchStats(batch_id)
        stats.stopped = {r.name: r.stopped for r in self.tables.values() if r.stopped}
        summary: dict[str, str] = {}
        if transaction is not None:
            tp, span, summary = transaction
            stats.transaction = summary.get(LAST_TRANSACTION)
            for p in parsed.values():
                if p.ranges:
                    p.ranges[tp] = span
        prepared = self.prepare(batch_id, parsed, summary)
        commits = self.table_commits(prepared)
        dead = self.dead_letter_commit(parsed)
        if dead is not None:
            commits.append(dead)
        stats.dead_letters = sum(p.dead_letters for p in parsed.values())
        started = time.monotonic()
        outcomes, stats.atomic = self.swap(commits)
        stats.commit_seconds = time.monotonic() - started
        self.finish(batch_id, prepared, outcomes, dead, stats)
        return stats

    def prepare(
        self, batch_id: int, parsed: Mapping[str, ParsedMessages], summary: dict[str, str]
    ) -> dict[str, PreparedBatch]:
        """Each table's prepared commit, all labelled as one batch's."""
        prepared: dict[str, PreparedBatch] = {}
        # The tables' new files (updates' data files with their `_row_id`) are fsynced
        # together once all are written, before any commit names them.
        with synced_together():
            for name, p in parsed.items():
                if p.deferred:  # a broken invariant: every deferred table is written again
                    raise CalvingError(f"table {name}: {p.deferred} record(s) of batch "
                                       f"{batch_id} were never judged")  # fmt: skip
                prepared[name] = self.tables[name].coordinator.prepare(batch_id, p, summary)
        label_batch(prepared)
        return prepared

    def table_commits(self, prepared: Mapping[str, PreparedBatch]) -> list[TableCommit]:
        return [
            TableCommit(
                self.tables[name].table.ident,
                pb.action,
                expected_table_uuid=self.tables[name].table.metadata.table_uuid,
            )
            for name, pb in prepared.items()
            if pb.action is not None
        ]

    def dead_letter_commit(self, parsed: Mapping[str, ParsedMessages]) -> TableCommit | None:
        dlq = self.dead_letter_table
        files = tuple(f for p in parsed.values() for f in p.dead_letter_files)
        if dlq is None or not files:
            return None
        ranges = {tp: r for p in parsed.values() for tp, r in p.ranges.items()}
        claim = LedgerClaim(self.writer_id, ranges, allow_gaps=True)
        return TableCommit(dlq.ident, FastAppend(files, ledger=claim))

    def finish(
        self,
        batch_id: int,
        prepared: Mapping[str, PreparedBatch],
        outcomes: Mapping[TableIdent, CommitOutcome],
        dead: TableCommit | None,
        stats: ManyBatchStats,
    ) -> None:
        """Each table's outcome into its coordinator and ``stats``; the first failure
        (a table's, else the dead letters') raised once all are noted."""
        failure: CalvingError | None = None
        for name, pb in prepared.items():
            outcome = outcomes.get(self.tables[name].table.ident)
            if outcome is None:
                stats.tables[name] = pb.stats
                continue
            self.tables[name].table.adopt(outcome)
            try:
                stats.tables[name] = self.tables[name].coordinator.finish(pb, outcome)
            except CalvingError as err:
                failure = failure or err
        if dead is not None and failure is None:
            done_or_raise(outcomes[dead.ident], f"dead letters of batch {batch_id}")
        if failure is not None:
            raise failure


def swap_in(catalog: Catalog, io: FileIO, commits: list[TableCommit]) -> Swapped:
    """``commits`` in one catalog transaction when the catalog can, else one by one
    (stopping at the first that neither committed nor was skipped)."""
    if not commits:
        return {}, False
    if catalog.supports_multi_table_commit and len(commits) > 1:
        return commit_tables(catalog, io, commits), True
    out: dict[TableIdent, CommitOutcome] = {}
    for c in commits:  # the dead-letter table, if any, comes last
        table = Table.load(catalog, c.ident, io)
        out[c.ident] = table.commit(c.action)
        if not isinstance(out[c.ident], Committed | Skipped):
            break  # later tables stay behind; their replay is skipped by nothing
    return out, False


def label_batch(prepared: Mapping[str, PreparedBatch]) -> None:
    """Every prepared action's summary names the batch's commit token and tables."""
    names = sorted(n for n, pb in prepared.items() if pb.action is not None)
    token = uuid.uuid4().hex
    for pb in prepared.values():
        if pb.action is not None:
            label = {BATCH_COMMIT: token, BATCH_TABLES: ",".join(names)}
            pb.action = replace(pb.action, summary={**pb.action.summary, **label})
