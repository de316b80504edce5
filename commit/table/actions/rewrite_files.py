"""Replace data files with files holding exactly the same live rows (compaction).

The rewrite was planned on some snapshot: the files it removes must still be live. Rows
of a removed file deleted after the rewrite read it (a stream's deletes) are not lost:
with the rewrite's position map the new deletes are carried to the rows' new places as
DVs on the added files, in the same snapshot; a removed file that a commit since removed
(a stream removes a file all of whose rows it deleted) has all its copied rows carried
as deleted. Without a map, the rewrite conflicts; the writers never fail because of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from pyroaring import BitMap64

from calving.commit.errors import CommitConflictError
from calving.commit.io import FileIO
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.position_map import SUMMARY_PROPERTY, PositionMap
from calving.commit.table import scan
from calving.commit.table.action import Plan
from calving.commit.table.changes import SnapshotChanges


class RewriteConflictError(CommitConflictError):
    """The rewrite of ``path`` can no longer apply (the file is gone, or its deletes
    changed in a way the position map cannot follow): a compaction gives up the group
    holding it and commits the others."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


@dataclass(frozen=True)
class RewriteFiles:
    removed: tuple[str, ...]
    added: tuple[DataFile, ...]
    # DV cardinality of each removed file when the rewrite read it (absent = no DV).
    deletes_seen: Mapping[str, int] = field(default_factory=dict)
    # Where the copied rows went, and the map file's location (named in the summary).
    position_map: PositionMap | None = None
    position_map_location: str | None = None

    def plan(self, base: TableMetadata, io: FileIO, commit_id: str) -> Plan:
        live = scan.live_files(io, base, base.current_snapshot)
        if any(f.file_path in live.data for f in self.added):
            raise CommitConflictError("rewrite: its new files are already in the table")
        live_rows = 0
        carried: dict[str, BitMap64] = {}
        gone: dict[str, str] = {}  # added file -> a removed input gone since the read
        for path in self.removed:
            entry = live.data.get(path)
            if entry is None:
                for new_path, positions in self._gone(path).items():
                    carried[new_path] = carried.get(new_path, BitMap64()) | positions
                    gone.setdefault(new_path, path)
                continue
            dv = live.dvs.get(path)
            deleted = dv.data_file.record_count if dv else 0
            seen = self.deletes_seen.get(path, 0)
            if deleted != seen:
                for new_path, positions in self._carry(io, live, path, seen, deleted).items():
                    carried[new_path] = carried.get(new_path, BitMap64()) | positions
            live_rows += entry.data_file.record_count - deleted
        self._no_dead_weight(carried, gone)
        added_rows = sum(f.record_count for f in self.added)
        carried_rows = sum(len(p) for p in carried.values())
        if added_rows - carried_rows != live_rows:
            raise CommitConflictError(
                f"rewrite must keep the same rows: removes {live_rows} live rows, adds "
                f"{added_rows} less {carried_rows} carried deletes"
            )
        summary = (
            {SUMMARY_PROPERTY: self.position_map_location} if self.position_map_location else {}
        )
        return SnapshotChanges(
            operation="replace",
            added_data_files=self.added,
            removed_data_files=tuple(p for p in self.removed if p in live.data),
            deletes=carried,
            summary=summary,
        )

    def _no_dead_weight(self, carried: Mapping[str, BitMap64], gone: Mapping[str, str]) -> None:
        """An added file every row of which is carried as deleted would be dead weight
        (its inputs were all removed since the read: another compaction took them, or
        the stream emptied them): the group holding them is given up instead."""
        for f in self.added:
            path = gone.get(f.file_path)
            if path is not None and len(carried[f.file_path]) == f.record_count:
                raise RewriteConflictError(
                    path,
                    f"rewrite: {path} is no longer live and every row the rewrite copied "
                    f"into {f.file_path} went with it",
                )

    def _gone(self, path: str) -> dict[str, BitMap64]:
        """Every row the rewrite copied from ``path``, which a commit since removed: one
        that deleted all its rows (a stream removes a file it empties) or moved them
        elsewhere. Either way that commit owns them now, so their copies are deleted."""
        if self.position_map is None or not self.position_map.covers(path):
            raise RewriteConflictError(path, f"rewrite: {path} is no longer live")
        moved = self.position_map.translate(path, self.position_map.copied(path))
        return {p: BitMap64(v.tolist()) for p, v in moved.items()}

    def _carry(
        self, io: FileIO, live: scan.LiveFiles, path: str, seen: int, deleted: int
    ) -> dict[str, BitMap64]:
        """The deletes ``path`` gained since the rewrite read it, at their new places."""
        if self.position_map is None or not self.position_map.covers(path):
            raise RewriteConflictError(
                path,
                f"rewrite: rows of {path} were deleted concurrently ({seen} -> {deleted}) "
                "and the rewrite has no position map to carry them; re-plan the rewrite",
            )
        now = live.positions_deleted(io, path)
        positions = np.fromiter(now, dtype=np.int64, count=len(now))
        moved = self.position_map.translate(path, positions, strict=False)
        if sum(len(p) for p in moved.values()) != deleted - seen:
            raise RewriteConflictError(
                path,
                f"rewrite: the deletes of {path} changed in a way its position map cannot "
                f"follow ({seen} -> {deleted}); re-plan the rewrite",
            )
        return {p: BitMap64(v.tolist()) for p, v in moved.items()}
