"""The driver-side coordinator: one snapshot per microbatch, exactly once.

It turns the executors' commit messages into one ``RowDelta``: the new data files,
deletion vectors for every earlier version of a key the batch upserted or deleted
(found through the primary-key index), and the ledger claim for the batch's offsets
— all in a single snapshot. Dead letters go to their own table first, under the same
ledger claim, so a replay skips both.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
from pyroaring import BitMap64

from commit.errors import CommitStateUnknownError
from commit.spec.data_file import DataFile
from commit.spec.metadata import TableMetadata
from commit.table.actions.fast_append import FastAppend
from commit.table.actions.row_delta import RowDelta
from commit.table.committer import CommitOutcome, Committed, Conflicted, Skipped, Unknown
from commit.table.ledger import LedgerClaim, OffsetRange, TopicPartition, read_ledger
from commit.table.table import Table
from ingest.sink.messages import data_file_from_json, table_from_ipc

log = logging.getLogger("calving.coordinator")


@dataclass
class BatchStats:
    batch_id: int
    outcome: str
    added_files: int = 0
    added_rows: int = 0
    deleted_rows: int = 0
    dv_files: int = 0
    dead_letters: int = 0
    snapshot_id: int | None = None


@dataclass
class ParsedMessages:
    files: list[tuple[DataFile, pa.Table | None]] = field(default_factory=list)
    delete_keys: list[pa.Table] = field(default_factory=list)
    dead_letter_files: list[DataFile] = field(default_factory=list)
    dead_letters: int = 0


def parse_messages(messages: pa.Table) -> ParsedMessages:
    out = ParsedMessages()
    for kind, payload, keys, count in zip(*(messages.column(c).to_pylist()
                                            for c in ("kind", "payload", "keys", "count"))):
        if kind == "data":
            out.files.append((data_file_from_json(payload), table_from_ipc(keys)))
        elif kind == "deletes":
            t = table_from_ipc(keys)
            if t is not None and t.num_rows:
                out.delete_keys.append(t)
        elif kind == "deadletter":
            out.dead_letter_files.append(data_file_from_json(payload))
            out.dead_letters += int(count or 0)
        elif kind == "deadletter-count":
            out.dead_letters += int(count or 0)
    return out


class Coordinator:
    def __init__(self, table: Table, writer_id: str, *, index: Any | None = None,
                 dead_letter_table: Table | None = None) -> None:
        self.table = table
        self.writer_id = writer_id
        self.index = index
        self.dead_letter_table = dead_letter_table
        self.keyed = bool(table.metadata.schema.identifier_field_ids)
        self.history: list[BatchStats] = []
        self._pending_keys: pa.Table | None = None

    # ------------------------------------------------------------ ledger
    def ledger(self) -> dict[TopicPartition, int]:
        self.table.refresh()
        return read_ledger(self.table.metadata, self.writer_id)

    # ------------------------------------------------------------ commit
    def commit_batch(self, batch_id: int, messages: pa.Table,
                     ranges: Mapping[TopicPartition, OffsetRange]) -> BatchStats:
        parsed = parse_messages(messages)
        claim = LedgerClaim(self.writer_id, dict(ranges), allow_gaps=True)
        stats = BatchStats(batch_id, "skipped", dead_letters=parsed.dead_letters)
        if self.dead_letter_table is not None and parsed.dead_letter_files:
            _expect_done(self.dead_letter_table.commit(
                FastAppend(tuple(parsed.dead_letter_files), ledger=claim)), "dead letters")

        deletes: dict[str, BitMap64] = {}
        if self.keyed and self.index is not None:
            self._catch_up_index()
            keys = [k for _, k in parsed.files if k is not None and k.num_rows] + \
                parsed.delete_keys
            self._pending_keys = pa.concat_tables(keys, promote_options="default") if keys else None
            if self._pending_keys is not None:
                deletes = self.index.positions_for(self._pending_keys)
        added = tuple(f for f, _ in parsed.files)
        action = RowDelta(added, deletes, ledger=claim,
                          schema_id=self.table.metadata.current_schema_id,
                          rebase=self._rebase if self.index is not None else None)
        outcome = self.table.commit(action)
        _expect_done(outcome, f"batch {batch_id}")
        if isinstance(outcome, Committed):
            stats.outcome = "committed"
            stats.snapshot_id = outcome.snapshot_id
            stats.added_files = len(added)
            stats.added_rows = sum(f.record_count for f in added)
            stats.deleted_rows = sum(len(b) for b in deletes.values())
            stats.dv_files = len(deletes)
            if self.index is not None:
                self._apply_to_index(parsed, deletes, outcome.metadata)
        self.history.append(stats)
        return stats

    def _catch_up_index(self) -> None:
        from commit.index import catch_up

        current = self.table.metadata.current_snapshot_id
        if self.index.snapshot_id != current:
            self.index = catch_up(self.table.io, self.index, self.table.metadata)

    def _apply_to_index(self, parsed: ParsedMessages, deletes: Mapping[str, BitMap64],
                        metadata: TableMetadata) -> None:
        for path, positions in deletes.items():
            self.index.delete_positions(path, np.fromiter(positions, dtype=np.uint64))
        for f, keys in parsed.files:
            if keys is not None:
                self.index.add_file(f.file_path, keys)
        self.index.snapshot_id = metadata.current_snapshot_id

    def _rebase(self, base: TableMetadata, gone: Mapping[str, BitMap64]) -> dict[str, BitMap64]:
        """Deletes aimed at files a concurrent rewrite removed: find the keys' rows again
        in the rewritten table. Positions already requested are unioned, so returning
        every live match of the batch's keys is exact and idempotent."""
        from commit.index import build_from_table

        self.index = build_from_table(self.table.io, base, self.index.key_field_ids)
        log.info("rebuilt the primary-key index after a concurrent rewrite of %d file(s)",
                 len(gone))
        if self._pending_keys is None:
            return {}
        return self.index.positions_for(self._pending_keys)


def _expect_done(outcome: CommitOutcome, what: str) -> None:
    if isinstance(outcome, (Committed, Skipped)):
        return
    if isinstance(outcome, Conflicted):
        raise outcome.error
    if isinstance(outcome, Unknown):
        raise CommitStateUnknownError(f"{what}: {outcome.error}")
