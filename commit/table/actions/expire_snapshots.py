"""Expire old snapshots, then delete files only they referenced.

The exactly-once ledger lives in table properties, so it survives any expiry.
Files are deleted only after the commit is known to have landed, and only those
no retained snapshot reaches.
"""

from __future__ import annotations

from dataclasses import dataclass

from commit.io import FileIO
from commit.spec.data_file import EntryStatus
from commit.spec.metadata import TableMetadata
from commit.table import scan
from commit.table.actions.base import MetadataUpdates, NoChange, Plan
from commit.table.updates import RemoveSnapshots


@dataclass(frozen=True)
class ExpireSnapshots:
    older_than_ms: int | None = None  # None: expire everything not retained
    retain_last: int = 1
    delete_files: bool = True

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
        if not gone:
            return
        reachable = _reachable(io, after, [s for s in after.snapshots])
        candidates = _reachable(io, before, gone)
        for location in sorted(candidates - reachable):
            io.delete(location)


def _reachable(io: FileIO, metadata: TableMetadata, snapshots: list) -> set[str]:
    out: set[str] = set()
    for snap in snapshots:
        out.add(snap.manifest_list)
        for mf in scan.manifest_files(io, snap):
            out.add(mf.manifest_path)
            for e in scan.manifest_entries(io, metadata, mf):
                if e.status != EntryStatus.DELETED:
                    out.add(e.data_file.file_path)
    return out
