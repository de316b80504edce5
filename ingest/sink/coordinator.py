"""The driver-side coordinator: one snapshot per microbatch, exactly once.

It turns the executors' commit messages into one ``RowDelta``: the new data files,
deletion vectors for every earlier version of a key the batch upserted or deleted
(found through the primary-key index), and the ledger claim for the batch's offsets,
all in a single snapshot. Dead letters go to their own table first, under the same
ledger claim, so a replay skips both.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa
from pyroaring import BitMap64

from commit import index as pk
from commit.errors import CalvingError, CommitStateUnknownError
from commit.spec.data_file import DataFile
from commit.spec.metadata import TableMetadata
from commit.table.actions.fast_append import FastAppend
from commit.table.actions.row_delta import RowDelta
from commit.table.actions.update_properties import UpdateProperties
from commit.table.committer import CommitOutcome, Committed, Conflicted, Skipped, Unknown
from commit.table.ledger import LedgerClaim, OffsetRange, TopicPartition, read_ledger
from commit.table.table import Table
from ingest.sink.messages import data_file_from_json, table_from_ipc

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


@dataclass
class ParsedMessages:
    files: list[tuple[DataFile, pa.Table | None]] = field(default_factory=list)
    delete_keys: list[pa.Table] = field(default_factory=list)
    dead_letter_files: list[DataFile] = field(default_factory=list)
    dead_letters: int = 0
    ranges: dict[TopicPartition, OffsetRange] = field(default_factory=dict)
    unknown_fields: dict[str, set[str]] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(r.end - r.start for r in self.ranges.values())


def parse_messages(messages: pa.Table) -> ParsedMessages:
    out = ParsedMessages()
    columns = (messages.column(c).to_pylist() for c in ("kind", "payload", "keys", "count"))
    for kind, payload, keys, count in zip(*columns):
        if kind == "data":
            out.files.append((data_file_from_json(payload), table_from_ipc(keys)))
        elif kind == "deletes":
            t = table_from_ipc(keys)
            if t is not None and t.num_rows:
                out.delete_keys.append(t)
        elif kind == "range":
            topic, partition, start, end = json.loads(payload)
            tp = (topic, int(partition))
            seen = out.ranges.get(tp)
            if seen is not None:
                start, end = min(start, seen.start), max(end, seen.end)
            out.ranges[tp] = OffsetRange(int(start), int(end))
        elif kind == "deadletter":
            out.dead_letter_files.append(data_file_from_json(payload))
            out.dead_letters += int(count or 0)
        elif kind == "deadletter-count":
            out.dead_letters += int(count or 0)
        elif kind == "unknown":
            for path, kinds in json.loads(payload).items():
                out.unknown_fields.setdefault(path, set()).update(kinds)
    return out


class Coordinator:
    """Commits batches for one writer id. Keyed tables (identifier fields) keep a
    primary-key index at the table's current snapshot, saved with the table every
    ``index_save_every`` commits so a restart catches up instead of rescanning."""

    def __init__(
        self,
        table: Table,
        writer_id: str,
        *,
        dead_letter_table: Table | None = None,
        index_save_every: int = 20,
    ) -> None:
        self.table = table
        self.writer_id = writer_id
        self.dead_letter_table = dead_letter_table
        self.index_save_every = index_save_every
        self.index: pk.PrimaryKeyIndex | None = None
        self.history: list[BatchStats] = []
        self._unsaved_commits = 0
        self._pending_keys: pa.Table | None = None
        self._rebased = False

    @property
    def keyed(self) -> bool:
        return bool(self.table.metadata.schema.identifier_field_ids)

    def ledger(self) -> dict[TopicPartition, int]:
        self.table.refresh()
        return read_ledger(self.table.metadata, self.writer_id)

    # ------------------------------------------------------------ commit

    def commit_batch(self, batch_id: int, parsed: ParsedMessages) -> BatchStats:
        stats = BatchStats(
            batch_id,
            "empty",
            records=parsed.records,
            dead_letters=parsed.dead_letters,
            ranges=dict(parsed.ranges),
        )
        if not parsed.ranges:
            return stats
        claim = LedgerClaim(self.writer_id, dict(parsed.ranges), allow_gaps=True)
        if self.dead_letter_table is not None and parsed.dead_letter_files:
            _expect_done(
                self.dead_letter_table.commit(
                    FastAppend(tuple(parsed.dead_letter_files), ledger=claim)
                ),
                f"dead letters of batch {batch_id}",
            )
        deletes: dict[str, BitMap64] = {}
        index_base: int | None = None
        if self.keyed:
            index = self._current_index()
            index_base = index.snapshot_id
            keys = [k for _, k in parsed.files if k is not None and k.num_rows]
            keys += parsed.delete_keys
            self._pending_keys = pa.concat_tables(keys, promote_options="default") if keys else None
            if self._pending_keys is not None:
                deletes = index.lookup(self._pending_keys).deletes()
        added = tuple(f for f, _ in parsed.files)
        action = RowDelta(
            added,
            deletes,
            ledger=claim,
            schema_id=self.table.metadata.current_schema_id,
            rebase=self._rebase if self.keyed else None,
        )
        outcome = self.table.commit(action)
        _expect_done(outcome, f"batch {batch_id}")
        if isinstance(outcome, Skipped):
            stats.outcome = "skipped"
        elif isinstance(outcome, Committed):
            stats.outcome = "committed"
            stats.snapshot_id = outcome.snapshot_id
            stats.added_files = len(added)
            stats.added_rows = sum(f.record_count for f in added)
            stats.deleted_rows = sum(len(b) for b in deletes.values())
            stats.dv_files = len(deletes)
            if self.keyed:
                self._advance_index(parsed, deletes, outcome.metadata, index_base)
        self._pending_keys = None
        self.history.append(stats)
        return stats

    # ------------------------------------------------------------ index

    def _current_index(self) -> pk.PrimaryKeyIndex:
        metadata = self.table.metadata
        if self.index is None:
            self.index = pk.open_index(self.table.io, metadata)
        elif self.index.snapshot_id != metadata.current_snapshot_id:
            self.index = pk.catch_up(self.table.io, self.index, metadata)
        return self.index

    def _advance_index(
        self,
        parsed: ParsedMessages,
        deletes: Mapping[str, BitMap64],
        metadata: TableMetadata,
        base_snapshot: int | None,
    ) -> None:
        """Apply our own commit in memory, when it sits right on the index's snapshot;
        otherwise (other writers committed in between) catch up from the table."""
        index = self.index
        assert index is not None
        snapshot = metadata.current_snapshot
        rebased = self._rebased
        self._rebased = False
        if rebased or snapshot is None or snapshot.parent_snapshot_id != base_snapshot:
            self.index = pk.catch_up(self.table.io, index, metadata)
        else:
            for path, positions in deletes.items():
                index.delete_positions(path, positions)
            for f, keys in parsed.files:
                if keys is not None:
                    index.add_file(f.file_path, keys, row_count=f.record_count)
            index.snapshot_id = snapshot.snapshot_id
        self._unsaved_commits += 1
        if self._unsaved_commits >= self.index_save_every:
            self.save_index()

    def _rebase(self, base: TableMetadata, gone: Mapping[str, BitMap64]) -> dict[str, BitMap64]:
        """Deletes aimed at files a concurrent rewrite removed: find the keys' rows again
        in the rewritten table. Positions already requested are unioned, so returning
        every live match of the batch's keys is exact and idempotent."""
        assert self.index is not None
        self.index = pk.build_from_table(self.table.io, base, self.index.key_field_ids)
        self._rebased = True
        log.info("rebuilt the primary-key index after a rewrite of %d file(s)", len(gone))
        if self._pending_keys is None:
            return {}
        return self.index.lookup(self._pending_keys).deletes()

    def save_index(self) -> str | None:
        """Write the index and point the table at it (a metadata-only commit). An old
        index file stays until the property no longer names it, then goes."""
        if self.index is None or self.index.snapshot_id is None:
            return None
        if self.index.snapshot_id != self.table.metadata.current_snapshot_id:
            return None  # someone committed since; the next batch catches up first
        previous = self.table.metadata.properties.get(pk.INDEX_LOCATION_PROPERTY)
        location = pk.save(self.table.io, self.index, self.table.metadata.location)
        outcome = self.table.commit(UpdateProperties({pk.INDEX_LOCATION_PROPERTY: location}))
        if isinstance(outcome, Committed | Skipped):
            self._unsaved_commits = 0
            if previous and previous != location:
                _delete_quietly(self.table, previous)
        elif isinstance(outcome, Conflicted):
            _delete_quietly(self.table, location)
        return location


def _delete_quietly(table: Table, location: str) -> None:
    try:
        table.io.delete(location)
    except CalvingError as err:  # an orphan index file is harmless
        log.warning("could not delete %s: %s", location, err)


def _expect_done(outcome: CommitOutcome, what: str) -> None:
    if isinstance(outcome, Committed | Skipped):
        return
    if isinstance(outcome, Conflicted):
        raise outcome.error
    if isinstance(outcome, Unknown):
        raise CommitStateUnknownError(f"{what}: {outcome.error}")
