"""Expire old snapshots, then delete files only they referenced.

The exactly-once ledger lives in table properties, so it survives any expiry.
Files are deleted only after the commit is known to have landed, and only those
no retained snapshot reaches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from calving.commit.io import FileIO
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.updates import RemoveSnapshots
from calving.commit.table import scan
from calving.commit.table.action import MetadataUpdates, NoChange, Plan


@dataclass(frozen=True)
class ExpireSnapshots:
    older_than_ms: int | None = None  # None: expire everything not retained
    retain_last: int = 1
    delete_files: bool = True
    #: Filled by ``after_commit``: the files it deleted.
    deleted: list[str] = field(default_factory=list, compare=False)

    def plan(self, base: TableMetadata, io: FileIO, commit_id: str) -> Plan:
        keep: set[int] = set()
        for snap in base.ancestors()[: max(1, self.retain_last)]:
            keep.add(snap.snapshot_id)
        keep.update(ref.snapshot_id for ref in base.refs.values())
        expire = {
            s.snapshot_id
            for s in base.snapshots
            if s.snapshot_id not in keep
            and (self.older_than_ms is None or s.timestamp_ms < self.older_than_ms)
        }
        if not expire:
            return NoChange("no snapshot to expire")
        return MetadataUpdates((RemoveSnapshots(frozenset(expire)),))

    def after_commit(self, before: TableMetadata, after: TableMetadata, io: FileIO) -> None:
        if not self.delete_files:
            return
        kept_ids = {s.snapshot_id for s in after.snapshots}
        gone = [s for s in before.snapshots if s.snapshot_id not in kept_ids]
        gone_ids = {s.snapshot_id for s in gone}
        if not gone:
            return
        reachable = scan.history_files(io, after)
        reachable.update(s.statistics_path for s in after.statistics)
        candidates = scan.files_reached(io, before, gone)
        candidates.update(s.statistics_path for s in before.statistics if s.snapshot_id in gone_ids)
        for location in sorted(candidates - reachable):
            io.delete(location)
            self.deleted.append(location)
        scan.forget(self.deleted)
