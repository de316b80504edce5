"""Turning ``SnapshotChanges`` into files and the updates of one new snapshot.

``SnapshotProducer.produce`` runs one attempt's stages in order, each a method taking
and returning plain values:

1. ``plan_deletes``: requested deletes unioned with each file's current DV, and the
   base entries the new snapshot drops (``calving.commit.table.deletes``);
2. ``write_data_manifests``: one manifest of ADDED entries per partition spec;
3. ``write_dvs``: the new DVs in Puffin files of ``calving.dv.blobs-per-puffin`` blobs
   each (1 by default, see ``properties.DV_BLOBS_PER_PUFFIN``) and their manifests;
4. ``carry_base_manifests``: the base snapshot's manifests, unchanged or rewritten
   without the dropped entries (``calving.commit.table.carry``);
5. ``merge_manifests``: small manifests merged past
   ``commit.manifest.min-count-to-merge``, data then deletes;
6. ``assign_row_ids``: v3 first-row-ids for data manifests holding files that lack
   one (only new files: carried entries keep theirs);
7. ``write_manifest_list``: staged with the rest, then the whole batch is written
   (``after-puffin``, ``after-manifests``, ``after-manifest-list`` are hit here);
8. ``build_snapshot``: the snapshot and its summary (``calving.commit.table.summary``),
   then the table updates that add it.

Every file gets an attempt-unique name (``calving.commit.table.attempt_files``), so
cleaning one failed attempt can never touch a file another attempt or snapshot uses.
Data files are never deleted here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from pyroaring import BitMap64

from calving.commit import faults
from calving.commit.errors import FileNotFoundInTableError
from calving.commit.io import FileIO
from calving.commit.spec.data_file import (
    DataFile,
    EntryStatus,
    FileContent,
    ManifestContent,
    ManifestEntry,
    ManifestFile,
)
from calving.commit.spec.deletion_vector import referenced_file_bounds
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.properties import TableProperties
from calving.commit.spec.row_lineage import rows_to_assign
from calving.commit.spec.snapshot import Snapshot
from calving.commit.spec.updates import AddSnapshot, SetProperties, TableUpdate, set_main_ref
from calving.commit.table import scan
from calving.commit.table.attempt_files import AttemptFiles
from calving.commit.table.carry import carry_manifests, merge_if_needed, rewrite_all
from calving.commit.table.changes import SnapshotChanges
from calving.commit.table.deletes import DeletePlan, needs_live_files, plan_deletes
from calving.commit.table.summary import SummaryCounters, snapshot_summary


@dataclass
class ProducedSnapshot:
    snapshot: Snapshot
    updates: tuple[TableUpdate, ...]
    written_files: list[str]
    #: Live data files of the parent this snapshot drops (removed, or emptied by its
    #: deletes).
    removed_data_files: frozenset[str] = frozenset()


@dataclass(frozen=True)
class RowIds:
    """Stage 6's result: the manifests with first-row-ids, and the snapshot's range."""

    manifests: list[ManifestFile]
    first_row_id: int
    added_rows: int


class SnapshotProducer:
    def __init__(self, io: FileIO, base: TableMetadata, snapshot_id: int) -> None:
        self.io = io
        self.base = base
        self.snapshot_id = snapshot_id
        self.files = AttemptFiles(io, base, snapshot_id)

    @property
    def sequence_number(self) -> int:
        return self.files.sequence_number

    @property
    def written(self) -> list[str]:
        """Every file this attempt has named so far (durable or not): what a cleanup
        after a certain failure deletes."""
        return self.files.written

    # ------------------------------------------------------------ the stages, in order

    def produce(self, changes: SnapshotChanges) -> ProducedSnapshot:
        parent = self.base.current_snapshot
        base_manifests = scan.manifest_files(self.io, parent)
        counters = SummaryCounters()
        deletes = self.plan_deletes(changes, counters)
        new_manifests = self.write_data_manifests(changes.added_data_files, counters)
        new_manifests += self.write_dvs(deletes.new_dvs, counters)
        carried = self.carry_base_manifests(base_manifests, deletes)
        carried = self.merge_manifests(carried, changes.rewrite_manifests)
        row_ids = self.assign_row_ids(new_manifests + carried)
        manifest_list = self.write_manifest_list(row_ids)
        snapshot = self.build_snapshot(manifest_list, row_ids, changes, counters)
        return ProducedSnapshot(
            snapshot, snapshot_updates(snapshot, changes), self.written, deletes.removed_data
        )

    def plan_deletes(self, changes: SnapshotChanges, counters: SummaryCounters) -> DeletePlan:
        live = None
        if needs_live_files(changes):
            live = scan.live_files(self.io, self.base, self.base.current_snapshot)
        return plan_deletes(self.io, live, changes, counters)

    def write_data_manifests(
        self, added: Iterable[DataFile], counters: SummaryCounters
    ) -> list[ManifestFile]:
        manifests: list[ManifestFile] = []
        for spec_id, files in group_by_spec(added).items():
            entries = [
                ManifestEntry(EntryStatus.ADDED, self.snapshot_id, None, None, f) for f in files
            ]
            manifests.append(self.files.manifest(entries, spec_id, ManifestContent.DATA))
            for f in files:
                counters.added_data(f)
        return manifests

    def write_dvs(
        self, new_dvs: Sequence[tuple[DataFile, BitMap64]], counters: SummaryCounters
    ) -> list[ManifestFile]:
        if not new_dvs:
            return []
        per_file = TableProperties(self.base.properties).dv_blobs_per_puffin
        groups = [new_dvs[i : i + per_file] for i in range(0, len(new_dvs), per_file)]
        puffins = self.files.puffins([[(f.file_path, bm) for f, bm in group] for group in groups])
        by_spec: dict[int, list[ManifestEntry]] = {}
        for group, (location, puffin, blobs) in zip(groups, puffins):
            for (target, _), blob in zip(group, blobs):
                assert blob.referenced_data_file == target.file_path
                dv = DataFile(
                    content=FileContent.POSITION_DELETES,
                    file_path=location,
                    file_format="PUFFIN",
                    partition=target.partition,
                    record_count=blob.cardinality,
                    file_size_in_bytes=len(puffin),
                    referenced_data_file=target.file_path,
                    lower_bounds=referenced_file_bounds(target.file_path),
                    upper_bounds=referenced_file_bounds(target.file_path),
                    content_offset=blob.content_offset,
                    content_size_in_bytes=blob.content_size_in_bytes,
                    spec_id=target.spec_id,
                )
                counters.added_dv(dv)
                by_spec.setdefault(target.spec_id, []).append(
                    ManifestEntry(EntryStatus.ADDED, self.snapshot_id, None, None, dv)
                )
            counters.added_puffin(len(puffin))
        return [
            self.files.manifest(entries, spec_id, ManifestContent.DELETES)
            for spec_id, entries in sorted(by_spec.items())
        ]

    def carry_base_manifests(
        self, base_manifests: Iterable[ManifestFile], deletes: DeletePlan
    ) -> list[ManifestFile]:
        return carry_manifests(
            self.files, base_manifests, deletes.removed_data, deletes.replaced_dv_paths
        )

    def merge_manifests(self, carried: list[ManifestFile], rewrite: bool) -> list[ManifestFile]:
        merge = rewrite_all if rewrite else merge_if_needed
        carried = merge(self.files, carried, ManifestContent.DATA)
        return merge(self.files, carried, ManifestContent.DELETES)

    def assign_row_ids(self, manifests: list[ManifestFile]) -> RowIds:
        """First row ids for the data manifests whose files need them on read (new files
        have null ``first_row_id``); a manifest whose live files all carry one (carried,
        merged or rewritten entries keep theirs) gets none, so the table's next row id
        grows only by the rows of newly added files."""
        first = self.base.next_row_id or 0
        next_id = first
        out: list[ManifestFile] = []
        for mf in manifests:
            if (
                mf.content == ManifestContent.DATA
                and mf.first_row_id is None
                and not scan.known_to_assign_nothing(mf)
            ):
                entries = self._entries(mf)
                rows = rows_to_assign(entries)
                if not rows:
                    scan.remember_assigns_nothing(mf)
                else:
                    mf = replace(mf, first_row_id=next_id)
                    next_id += rows
                    if mf.added_snapshot_id == self.snapshot_id:
                        # The cache holds this attempt's entries read without the id: a
                        # later commit carrying them must see the ids they inherit.
                        scan.remember_written_manifest(mf, entries)
            out.append(mf)
        return RowIds(out, first, next_id - first)

    def _entries(self, mf: ManifestFile) -> tuple[ManifestEntry, ...]:
        try:
            return scan.manifest_entries(self.io, self.base, mf)
        except FileNotFoundInTableError:
            if mf.added_snapshot_id != self.snapshot_id:
                raise
            self.files.flush()  # still staged and no longer cached: write it, read it
            return scan.manifest_entries(self.io, self.base, mf)

    def write_manifest_list(self, row_ids: RowIds) -> str:
        """Stage the manifest list and write the attempt's whole batch of files.

        Nothing names these files until the metadata file does, so they are written
        together; all are durable before it is. The fault points then see them all."""
        parent = self.base.current_snapshot
        self.files.drop_manifests_except({m.manifest_path for m in row_ids.manifests})
        location = self.files.manifest_list(
            row_ids.manifests, parent.snapshot_id if parent else None, row_ids.first_row_id
        )
        self.files.flush()
        if self.files.wrote_dvs:
            faults.hit("after-puffin")
        faults.hit("after-manifests")
        faults.hit("after-manifest-list")
        scan.remember_written_manifest_list(location, row_ids.manifests, parent)
        return location

    def build_snapshot(
        self,
        manifest_list: str,
        row_ids: RowIds,
        changes: SnapshotChanges,
        counters: SummaryCounters,
    ) -> Snapshot:
        parent = self.base.current_snapshot
        summary = snapshot_summary(
            changes.operation, counters, parent.summary if parent else None, changes.summary
        )
        now = int(time.time() * 1000)
        return Snapshot(
            snapshot_id=self.snapshot_id,
            parent_snapshot_id=parent.snapshot_id if parent else None,
            sequence_number=self.sequence_number,
            timestamp_ms=max(now, parent.timestamp_ms + 1 if parent else now),
            manifest_list=manifest_list,
            summary=summary,
            schema_id=self.base.current_schema_id,
            first_row_id=row_ids.first_row_id,
            added_rows=row_ids.added_rows,
        )


def snapshot_updates(snapshot: Snapshot, changes: SnapshotChanges) -> tuple[TableUpdate, ...]:
    """Add the snapshot, make it main's head, and set the properties it carries."""
    updates: list[TableUpdate] = [AddSnapshot(snapshot), set_main_ref(snapshot.snapshot_id)]
    if changes.properties:
        updates.append(SetProperties(dict(changes.properties)))
    return tuple(updates)


def group_by_spec(files: Iterable[DataFile]) -> dict[int, list[DataFile]]:
    out: dict[int, list[DataFile]] = {}
    for f in files:
        out.setdefault(f.spec_id, []).append(f)
    return out
