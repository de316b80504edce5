"""Replace data files with files holding exactly the same live rows (compaction).

The rewrite was planned on some snapshot: the files it removes must still be live
and must not have gained deletes since (their rows would be resurrected by the
replacement); either is a conflict for the rewrite, never for the writers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from commit.errors import CommitConflictError
from commit.io import FileIO
from commit.spec.data_file import DataFile
from commit.spec.metadata import TableMetadata
from commit.table import scan
from commit.table.actions.base import Plan
from commit.table.changes import SnapshotChanges


@dataclass(frozen=True)
class RewriteFiles:
    removed: tuple[str, ...]
    added: tuple[DataFile, ...]
    # DV cardinality of each removed file when the rewrite read it (absent = no DV).
    deletes_seen: Mapping[str, int] = field(default_factory=dict)

    def plan(self, base: TableMetadata, io: FileIO, commit_id: str) -> Plan:
        live = scan.live_files(io, base, base.current_snapshot)
        live_rows = 0
        for path in self.removed:
            entry = live.data.get(path)
            if entry is None:
                raise CommitConflictError(f"rewrite: {path} is no longer live")
            dv = live.dvs.get(path)
            deleted = dv.data_file.record_count if dv else 0
            if deleted != self.deletes_seen.get(path, 0):
                raise CommitConflictError(
                    f"rewrite: rows of {path} were deleted concurrently "
                    f"({self.deletes_seen.get(path, 0)} -> {deleted}); re-plan the rewrite"
                )
            live_rows += entry.data_file.record_count - deleted
        added_rows = sum(f.record_count for f in self.added)
        if added_rows != live_rows:
            raise CommitConflictError(
                f"rewrite must keep the same rows: removes {live_rows} live rows, adds {added_rows}"
            )
        return SnapshotChanges(
            operation="replace", added_data_files=self.added, removed_data_files=self.removed
        )
