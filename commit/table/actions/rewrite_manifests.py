"""Rewrite manifests (maintenance): one replace snapshot whose manifests hold the same
live files, regrouped by partition and sized toward ``commit.manifest.target-size-bytes``.
Streaming leaves one small manifest (or more) per commit; after this, planning a scan
reads a number of manifests proportional to the table's size, not to its history.
Moved entries keep their ``first_row_id`` (written explicitly), so rows keep their
``_row_id`` and the snapshot assigns no row ids (``added-rows`` 0)."""

from __future__ import annotations

from dataclasses import dataclass

from calving.commit.io import FileIO
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.properties import TableProperties
from calving.commit.table import scan
from calving.commit.table.action import NoChange, Plan
from calving.commit.table.changes import SnapshotChanges


@dataclass(frozen=True)
class RewriteManifests:
    # Rewrite only when more manifests than this are live (of data and deletes together).
    min_manifests: int = 2

    def plan(self, base: TableMetadata, io: FileIO, commit_id: str) -> Plan:
        manifests = scan.manifest_files(io, base.current_snapshot)
        target = TableProperties(base.properties).manifest_target_size_bytes
        small: dict[tuple[int, int], int] = {}
        for m in manifests:
            if m.manifest_length < target:
                kind = (int(m.content), m.partition_spec_id)
                small[kind] = small.get(kind, 0) + 1
        if len(manifests) < self.min_manifests or max(small.values(), default=0) < 2:
            return NoChange(f"{len(manifests)} manifest(s), none to merge below the target size")
        return SnapshotChanges(operation="replace", rewrite_manifests=True)
