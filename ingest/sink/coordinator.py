"""The driver-side coordinator: one snapshot per microbatch, exactly once.

It turns the executors' commit messages into one ``RowDelta``: the new data files,
deletion vectors for every earlier version of a key the batch upserted or deleted
(found through the primary-key index), and the ledger claim for the batch's offsets,
all in a single snapshot. On v3 tables an upsert of a key the table holds keeps the old
row's ``_row_id`` (``calving.ingest.sink.lineage``). Dead letters go to their own table first, under the same
ledger claim, so a replay skips both.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
from pyroaring import BitMap64

from calving.commit import index as pk
from calving.commit.errors import CalvingError
from calving.commit.index.shard_lookup import ShardJob
from calving.commit.index.sharded import Resolved, ShardedIndex
from calving.commit.index.store import Rebuild, key_spec
from calving.commit.index.task_steps import PlacedSteps
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.properties import TableProperties
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.committer import CommitOutcome, Committed, Skipped
from calving.commit.table.ledger import LedgerClaim, OffsetRange, TopicPartition, read_ledger
from calving.commit.table.outcomes import done_or_raise
from calving.commit.table.row_ids import RowIdReader
from calving.commit.table.table import Table
from calving.ingest.sink import messages as msg
from calving.ingest.sink.driver_index import (
    IndexSave,
    IndexState,
    Rebase,
    advance_index,
    current_index,
    discard_index_file,
    index_saved,
    write_index,
)
from calving.ingest.sink.history import BatchHistory
from calving.ingest.sink.lineage import keep_row_ids

log = logging.getLogger("calving.coordinator")


@dataclass
class BatchStats:
    batch_id: int
    outcome: str  # committed | skipped (already in the ledger) | empty
    records: int = 0
    added_files: int = 0
    added_rows: int = 0
    deleted_rows: int = 0
    dv_files: int = 0
    dead_letters: int = 0
    snapshot_id: int | None = None
    ranges: dict[TopicPartition, OffsetRange] = field(default_factory=dict)
    commit_attempts: int = 0  # of the snapshot commit (attempts - 1 lost the catalog swap)
    #: Of those lost swaps, the ones lost to maintenance (retried without counting).
    swaps_yielded: int = 0
    #: Seconds of the commit stage's phases: lookup and lineage (``prepare``), commit and
    #: finish (``commit_batch`` only; a many-table commit times its tables together).
    phases: dict[str, float] = field(default_factory=dict)
    #: Sharded mode: the batch's shard steps, and those that read their shard from
    #: storage (not cached in their worker); None in driver mode.
    shard_steps: int | None = None
    shards_read: int | None = None


@dataclass
class ParsedMessages:
    """A batch's commit messages, gathered: what the coordinator commits."""

    files: list[tuple[DataFile, pa.Table | None]] = field(default_factory=list)
    delete_keys: list[pa.Table] = field(default_factory=list)
    #: Keys upserted after a delete in the batch: new rows, not updates.
    renewed_keys: list[pa.Table] = field(default_factory=list)
    dead_letter_files: list[DataFile] = field(default_factory=list)
    #: Coordinates of the dead letters sent to the dead-letter topic.
    dead_letters_sent: set[msg.Coordinates] = field(default_factory=set)
    ranges: dict[TopicPartition, OffsetRange] = field(default_factory=dict)
    unknown_fields: dict[str, set[str]] = field(default_factory=dict)
    #: Oldest and newest Kafka record timestamps (epoch ms) of the batch, if any.
    timestamp_min_ms: int | None = None
    timestamp_max_ms: int | None = None
    #: Input rows seen (the decoded-rows path; the Kafka path counts offsets).
    rows_seen: int = 0
    #: Records not yet judged (``DeadLettersDeferred``): the batch must be written again
    #: before it can be committed.
    deferred: int = 0
    #: Sharded mode: the write tasks' shard steps, placed among the batch's keys.
    shard_steps: list[PlacedSteps] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(r.end - r.start for r in self.ranges.values())

    @property
    def dead_letters(self) -> int:
        """Dead letters of the batch: rows of the dead-letter table's files, or (no
        table) the records sent to the topic."""
        if self.dead_letter_files:
            return sum(f.record_count for f in self.dead_letter_files)
        return len(self.dead_letters_sent)

    def add_timestamps(self, low: int | None = None, high: int | None = None) -> None:
        lo, hi = self.timestamp_min_ms, self.timestamp_max_ms
        if low is not None:
            self.timestamp_min_ms = low if lo is None else min(low, lo)
        if high is not None:
            self.timestamp_max_ms = high if hi is None else max(high, hi)

    def add(self, m: msg.Message) -> None:
        if isinstance(m, msg.DataFileWritten):
            self.files.append((m.file, m.keys))
        elif isinstance(m, msg.KeysDeleted):
            if m.keys.num_rows:
                self.delete_keys.append(m.keys)
        elif isinstance(m, msg.KeysRenewed):
            if m.keys.num_rows:
                self.renewed_keys.append(m.keys)
        elif isinstance(m, msg.RangeSeen):
            self.add_timestamps(m.timestamp_min_ms, m.timestamp_max_ms)
            tp = (m.topic, m.partition)
            start, end = m.start, m.end
            seen = self.ranges.get(tp)
            if seen is not None:
                start, end = min(start, seen.start), max(end, seen.end)
            self.ranges[tp] = OffsetRange(start, end)
        elif isinstance(m, msg.DeadLetterFileWritten):
            self.dead_letter_files.append(m.file)
        elif isinstance(m, msg.DeadLettersSent):
            self.dead_letters_sent.update(m.coordinates)
        elif isinstance(m, msg.UnknownFields):
            for path, kinds in m.fields.items():
                self.unknown_fields.setdefault(path, set()).update(kinds)
        elif isinstance(m, msg.RowsSeen):
            self.rows_seen += m.count
        elif isinstance(m, msg.DeadLettersDeferred):
            self.deferred += m.count
        elif isinstance(m, msg.ShardStepsTaken):
            # A task's messages arrive together, its steps after its files and keys.
            steps = m.steps
            file_rows, delete_rows = self.key_rows()
            placed = PlacedSteps(
                steps, file_rows - steps.file_rows, delete_rows - steps.delete_rows
            )
            self.shard_steps.append(placed)

    def key_rows(self) -> tuple[int, int]:
        """How many keys the batch's files hold, and how many keys it deleted (the
        two parts of ``touched_keys``)."""
        files = sum(k.num_rows for _, k in self.files if k is not None)
        return files, sum(k.num_rows for k in self.delete_keys)

    @classmethod
    def of(cls, messages: Iterable[msg.Message]) -> ParsedMessages:
        out = cls()
        for m in messages:
            out.add(m)
        return out


def parse_messages(messages: pa.Table) -> ParsedMessages:
    """The collected Arrow message rows of a batch, decoded and gathered."""
    return ParsedMessages.of(msg.decode(messages))


# ---------------------------------------------------------------- coordinator


@dataclass
class PreparedBatch:
    """A batch ready to commit: its ``RowDelta`` (None: nothing to commit) and what
    ``Coordinator.finish`` needs afterwards."""

    parsed: ParsedMessages
    stats: BatchStats
    claim: LedgerClaim
    action: RowDelta | None
    deletes: dict[str, BitMap64] = field(default_factory=dict)
    rebase: Rebase | None = None
    #: Sharded mode: what the shard tasks resolved and wrote, and the new files the
    #: commit holds under another path (row-lineage copies), old -> new.
    resolved: Resolved | None = None
    renamed: dict[str, str] = field(default_factory=dict)
    #: A saved index whose location this commit names (``save_with_next_commit``).
    index_save: IndexSave | None = None


class Coordinator:
    """Commits batches for one writer id. Keyed tables (identifier fields) keep a
    primary-key index at the table's current snapshot (``index_state``), saved with the
    table every ``index_save_every`` commits so a restart catches up instead of
    rescanning. On v3 tables updates keep their rows' ``_row_id`` unless the table
    property ``calving.row-lineage.keep-on-update`` is false."""

    def __init__(
        self,
        table: Table,
        writer_id: str,
        *,
        dead_letter_table: Table | None = None,
        index_save_every: int = 20,
        save_with_next_commit: bool = False,
    ) -> None:
        self.table = table
        self.row_ids = RowIdReader(table.io)
        self.writer_id = writer_id
        self.dead_letter_table = dead_letter_table
        self.index_save_every = index_save_every
        #: Many-table pipelines: a due index save is written, then named by the table's
        #: next batch commit (the index one commit behind; a restart catches up) instead
        #: of a commit of its own; and the first save comes after a stable number of
        #: commits between 1 and ``index_save_every`` that depends on the table, so the
        #: tables of a pipeline (all committing every batch) do not all save at once.
        self.save_with_next_commit = save_with_next_commit
        self._pending_save: IndexSave | None = None
        self._saved_once = False
        self.index_state = IndexState()
        #: How a full rebuild of the index runs (None: ``build_from_table`` on the
        #: driver); the Spark sink sets the executors' rebuild.
        self.rebuild: Rebuild | None = None
        #: Sharded mode (``calving.index.mode``): the shards and the tasks resolving
        #: them; None: the index lives in this process (``index_state``).
        self.sharded: ShardedIndex | None = None
        #: The recent batches' stats (the last ``history.KEEP``), for tests and tools.
        self.history: BatchHistory[BatchStats] = BatchHistory()

    @property
    def index(self) -> pk.PrimaryKeyIndex | None:
        return self.index_state.index

    @property
    def keyed(self) -> bool:
        return bool(self.table.metadata.schema.identifier_field_ids)

    def open_index(self) -> None:
        """Open a keyed table's primary-key index at its current snapshot, as its next
        batch would (sharded mode: the shard manifest, or the shards rebuilt)."""
        if not self.keyed:
            return
        self.table.refresh()
        metadata = self.table.metadata
        if self.sharded is not None:
            self.sharded.open(metadata)
        else:
            self.index_state = current_index(
                self.table.io, self.index_state, metadata, self.rebuild
            )

    def shard_job(self) -> ShardJob | None:
        """Sharded mode: the job the batch's write tasks step their shards with (None:
        not sharded, or the batch's keys are resolved by the separate stage)."""
        if not self.keyed or self.sharded is None:
            return None
        metadata = self.table.metadata
        deltas = TableProperties(metadata.properties).index_shard_deltas
        return self.sharded.task_job(metadata, deltas)

    def ledger(self) -> dict[TopicPartition, int]:
        self.table.refresh()
        return read_ledger(self.table.metadata, self.writer_id)

    # ------------------------------------------------------------ commit

    def commit_batch(self, batch_id: int, parsed: ParsedMessages) -> BatchStats:
        prepared = self.prepare(batch_id, parsed)
        if prepared.action is None:
            return prepared.stats
        self._commit_dead_letters(batch_id, parsed, prepared.claim)
        # From the table state the batch was prepared on: no catalog read before the
        # check-and-put, which catches (and retries) a table someone else moved on.
        started = time.monotonic()
        outcome = self.table.commit(prepared.action, from_cache=True)
        committed = time.monotonic()
        stats = self.finish(prepared, outcome)
        stats.phases["commit"] = committed - started
        stats.phases["finish"] = time.monotonic() - committed
        return stats

    def prepare(
        self, batch_id: int, parsed: ParsedMessages, summary: Mapping[str, str] | None = None
    ) -> PreparedBatch:
        """The batch's ``RowDelta`` (None: no offsets, nothing to commit), built on the
        primary-key index at the table's current snapshot. Commit it (alone, or with
        other tables' in one catalog transaction), then hand the outcome to ``finish``."""
        stats = BatchStats(
            batch_id,
            "empty",
            records=parsed.records,
            dead_letters=parsed.dead_letters,
            ranges=dict(parsed.ranges),
        )
        claim = LedgerClaim(self.writer_id, dict(parsed.ranges), allow_gaps=True)
        if not parsed.ranges:
            return PreparedBatch(parsed, stats, claim, None)
        state = self.index_state
        deletes: dict[str, BitMap64] = {}
        rebase: Rebase | None = None
        resolved: Resolved | None = None
        renamed: dict[str, str] = {}
        properties: dict[str, str] = {}
        ride: IndexSave | None = None
        if self.keyed and self.sharded is not None:
            started = time.monotonic()
            keys = _touched_keys(parsed)
            metadata = self.table.metadata
            resolved = self.sharded.from_tasks(metadata, parsed.shard_steps, *parsed.key_rows())
            if resolved is None:
                resolved = self.sharded.resolve(
                    metadata,
                    keys,
                    parsed.files,
                    TableProperties(metadata.properties).index_shard_deltas,
                )
            deletes = resolved.deletes()
            looked_up = time.monotonic()
            stats.phases["lookup"] = looked_up - started
            stats.shard_steps, stats.shards_read = resolved.steps, resolved.shards_read
            if resolved.task_seconds:
                stats.phases["task_steps"] = resolved.task_seconds
            if keys is not None and _keeps_row_ids(metadata):
                before = parsed.files
                parsed = keep_row_ids(
                    self.table.io, metadata, parsed, keys, resolved.matches, self.row_ids
                )
                renamed = {
                    a.file_path: b.file_path
                    for (a, _), (b, _) in zip(before, parsed.files)
                    if a.file_path != b.file_path
                }
                stats.phases["lineage"] = time.monotonic() - looked_up
            properties = self.sharded.naming(metadata)
            ids, _ = key_spec(metadata)
            rebase = Rebase(self.table.io, ids, keys)
        elif self.keyed:
            started = time.monotonic()
            state = current_index(self.table.io, state, self.table.metadata, self.rebuild)
            assert state.index is not None
            keys = _touched_keys(parsed)
            if keys is not None:
                matches = state.index.lookup(keys)
                deletes = matches.deletes()
                looked_up = time.monotonic()
                stats.phases["lookup"] = looked_up - started
                if _keeps_row_ids(self.table.metadata):
                    parsed = keep_row_ids(
                        self.table.io, self.table.metadata, parsed, keys, matches, self.row_ids
                    )
                    stats.phases["lineage"] = time.monotonic() - looked_up
            rebase = Rebase(self.table.io, state.index.key_field_ids, keys)
            ride, self._pending_save = self._pending_save, None
            if ride is not None:
                properties = dict(ride.action.set)
        self.index_state = state
        action = RowDelta(
            tuple(f for f, _ in parsed.files),
            deletes,
            ledger=claim,
            schema_id=self.table.metadata.current_schema_id,
            rebase=rebase,
            summary=dict(summary or {}),
            properties=properties,
        )
        return PreparedBatch(parsed, stats, claim, action, deletes, rebase, resolved, renamed, ride)

    def finish(self, prepared: PreparedBatch, outcome: CommitOutcome) -> BatchStats:
        """Account for the commit of ``prepared``: raise unless done; on success move the
        index on (saving it every ``index_save_every`` commits)."""
        stats = prepared.stats
        if prepared.index_save is not None and not isinstance(outcome, Committed):
            discard_index_file(self.table, prepared.index_save)  # never named
        done_or_raise(outcome, f"batch {stats.batch_id}")
        if isinstance(outcome, Skipped):
            stats.outcome = "skipped"
        elif isinstance(outcome, Committed):
            assert prepared.action is not None
            _committed(stats, outcome, prepared.action.added_data_files, prepared.deletes)
            if self.sharded is not None and prepared.resolved is not None:
                self.sharded.committed(outcome.metadata, prepared.resolved, prepared.renamed)
            elif prepared.rebase is not None:
                state = advance_index(
                    self.table.io,
                    self.index_state,
                    prepared.parsed.files,
                    prepared.deletes,
                    outcome.metadata,
                    prepared.rebase.rebuilt,
                    outcome.removed_data_files,
                    self.rebuild,
                )
                if prepared.index_save is not None:  # named by this commit: one behind
                    state = index_saved(self.table, state, prepared.index_save, outcome, 1)
                    self._saved_once = True
                self.index_state = state
                if state.unsaved_commits >= self._save_after():
                    if self.save_with_next_commit:
                        self._pending_save = write_index(self.table, state)
                    else:
                        self.save_index()
        self.history.append(stats)
        return stats

    def _commit_dead_letters(
        self, batch_id: int, parsed: ParsedMessages, claim: LedgerClaim
    ) -> None:
        if self.dead_letter_table is not None and parsed.dead_letter_files:
            done_or_raise(
                self.dead_letter_table.commit(
                    FastAppend(tuple(parsed.dead_letter_files), ledger=claim)
                ),
                f"dead letters of batch {batch_id}",
            )

    def save_index(self) -> str | None:
        """Save the index with the table (see ``save_index``); returns the file written.
        Sharded: name the last manifest in the table (a metadata-only commit)."""
        save = self.index_to_save()
        if save is None:
            return self.sharded.location if self.sharded is not None else None
        self.index_save_done(save, self.table.commit(save.action))
        return self.sharded.location if self.sharded is not None else save.location

    def index_to_save(self) -> IndexSave | None:
        """The first half of ``save_index``: the index file written, and the commit that
        names it in the table (to commit with other tables' in one transaction); None
        when there is nothing to save. Finish with ``index_save_done``. A save waiting
        for the next batch commit is used if the index has not moved since."""
        if self.sharded is not None:
            naming = self.sharded.naming(self.table.metadata)
            return IndexSave(UpdateProperties(naming)) if naming else None
        pending, self._pending_save = self._pending_save, None
        index = self.index_state.index
        if pending is not None:
            if index is not None and index.snapshot_id == self.table.metadata.current_snapshot_id:
                return pending
            discard_index_file(self.table, pending)
        return write_index(self.table, self.index_state)

    def index_save_done(self, save: IndexSave, outcome: CommitOutcome) -> None:
        """The second half of ``save_index``, given the outcome of ``save``'s commit."""
        self.table.adopt(outcome)
        self.index_state = index_saved(self.table, self.index_state, save, outcome)
        self._saved_once = self._saved_once or isinstance(outcome, Committed | Skipped)

    def _save_after(self) -> int:
        """Commits after which the index is saved (see ``save_with_next_commit``)."""
        every = max(1, self.index_save_every)
        if not self.save_with_next_commit or self._saved_once:
            return every
        return every - zlib.crc32(self.table.name.encode()) % every

    def evict_index(self) -> int:
        """Drop the index from memory, saved first when it holds unsaved commits; the
        next batch opens it again (the saved file caught up from the table, or rebuilt).
        Returns the bytes it held. A save that fails only makes that reopening longer."""
        if self.sharded is not None:
            self.sharded.drop()
            return 0
        index = self.index_state.index
        if index is None:
            return 0
        held = index.nbytes
        if self.index_state.unsaved_commits:
            try:
                self.save_index()
            except CalvingError as err:
                log.warning("%s: index not saved before dropping it: %s", self.table.name, err)
        self.index_state = IndexState()
        return held


def _keeps_row_ids(metadata: TableMetadata) -> bool:
    """Updates keep their rows' ``_row_id``: v3, unless the table property says no."""
    return (
        metadata.format_version >= 3
        and TableProperties(metadata.properties).row_lineage_keep_on_update
    )


def _touched_keys(parsed: ParsedMessages) -> pa.Table | None:
    """Every key the batch upserted or deleted (their earlier versions get DVs)."""
    keys = [k for _, k in parsed.files if k is not None and k.num_rows]
    keys += parsed.delete_keys
    return pa.concat_tables(keys, promote_options="default") if keys else None


def _committed(
    stats: BatchStats,
    outcome: Committed,
    added: tuple[DataFile, ...],
    deletes: Mapping[str, BitMap64],
) -> None:
    stats.outcome = "committed"
    stats.snapshot_id = outcome.snapshot_id
    stats.commit_attempts = outcome.attempts
    stats.swaps_yielded = outcome.losses_yielded
    stats.added_files = len(added)
    stats.added_rows = sum(f.record_count for f in added)
    stats.deleted_rows = sum(len(b) for b in deletes.values())
    stats.dv_files = len(deletes)
