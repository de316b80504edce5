"""Turning ``SnapshotChanges`` into files and the updates of one new snapshot.

For each attempt the producer (writing every new file of the attempt, Puffin files,
manifests and the manifest list, in one batch of overlapping writes):
* carries the base snapshot's manifests over unchanged (fast append), rewriting
  only those that lose an entry (a removed data file or a replaced DV);
* unions requested deletes with each file's current DV and writes the new DVs
  into Puffin files of ``calving.dv.blobs-per-puffin`` blobs each (1 by default, see
  ``DEFAULT_DV_BLOBS_PER_PUFFIN``), marking replaced DV entries DELETED (one DV per
  data file);
* merges small manifests once there are more than
  ``commit.manifest.min-count-to-merge`` of one kind;
* writes the manifest list with v3 row-lineage ids and returns the updates.

Every file gets an attempt-unique name, so cleaning one failed attempt can never
touch a file another attempt or snapshot uses. Data files are never deleted here.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from pyroaring import BitMap64

from commit import faults
from commit.errors import CommitConflictError, InvalidTablePropertyError
from commit.io import FileIO
from commit.spec.data_file import (
    DataFile,
    EntryStatus,
    FieldSummary,
    FileContent,
    ManifestContent,
    ManifestEntry,
    ManifestFile,
)
from commit.spec.deletion_vector import write_dv_puffin
from commit.spec.manifest import write_manifest
from commit.spec.manifest_list import write_manifest_list
from commit.spec.metadata import TableMetadata
from commit.spec.snapshot import Snapshot, updated_totals
from commit.spec.types import StructType
from commit.spec.values import to_bytes
from commit.table import scan
from commit.table.changes import SnapshotChanges
from commit.table.updates import AddSnapshot, SetMainRef, SetProperties, TableUpdate

DEFAULT_MIN_COUNT_TO_MERGE = 100
#: One DV per Puffin file by default: DuckDB's iceberg extension (1.5.5) with its
#: external file cache on (its default) applies another blob's positions to a DV that
#: follows a larger blob in the same Puffin file, so multi-blob files read back wrong
#: there. Readers without that bug can take more per file (fewer, larger files).
DV_BLOBS_PER_PUFFIN_PROPERTY = "calving.dv.blobs-per-puffin"
DEFAULT_DV_BLOBS_PER_PUFFIN = 1
DEFAULT_TARGET_MANIFEST_BYTES = 8 * 1024 * 1024


def _only_deleted_entries(mf: ManifestFile) -> bool:
    # Unknown (v1) counts read as 0 everywhere: such a manifest is kept.
    return mf.deleted_files_count > 0 and mf.added_files_count == 0 and mf.existing_files_count == 0


def dv_blobs_per_puffin(properties: Mapping[str, str]) -> int:
    """How many DV blobs one Puffin file holds (``calving.dv.blobs-per-puffin``)."""
    raw = properties.get(DV_BLOBS_PER_PUFFIN_PROPERTY)
    if raw is None:
        return DEFAULT_DV_BLOBS_PER_PUFFIN
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidTablePropertyError(
            f"table property {DV_BLOBS_PER_PUFFIN_PROPERTY}={raw!r}: want a whole number >= 1"
        )
    return value


@dataclass
class ProducedSnapshot:
    snapshot: Snapshot
    updates: tuple[TableUpdate, ...]
    written_files: list[str]


class SnapshotProducer:
    def __init__(self, io: FileIO, base: TableMetadata, snapshot_id: int) -> None:
        self.io = io
        self.base = base
        self.snapshot_id = snapshot_id
        self.sequence_number = base.last_sequence_number + 1
        self.attempt = uuid.uuid4().hex[:12]
        self.written: list[str] = []
        self._manifest_counter = 0
        # Files of this attempt not yet written: every Puffin file, manifest and the
        # manifest list go out in one batch (overlapping fsyncs) before the swap.
        self._pending: list[tuple[str, bytes]] = []
        self._wrote_dvs = False
        self._metadata_dir = base.location.rstrip("/") + "/metadata"
        self._data_dir = base.properties.get("write.data.path", base.location.rstrip("/") + "/data")

    # ------------------------------------------------------------ entry point

    def produce(self, changes: SnapshotChanges) -> ProducedSnapshot:
        base = self.base
        parent = base.current_snapshot
        base_manifests = scan.manifest_files(self.io, parent)
        needs_live = bool(changes.removed_data_files or changes.deletes)
        live = scan.live_files(self.io, base, parent) if needs_live else None

        removed_data = set(changes.removed_data_files)
        added_by_path = {f.file_path: f for f in changes.added_data_files}
        counters = _Counters()

        # Deletion vectors: union with the current DV, replace its entry.
        replaced_dv_paths: set[str] = set()  # referenced data file paths whose DV entry goes
        new_dvs: list[tuple[DataFile, BitMap64]] = []  # (target data file, positions)
        if live is not None:
            for path in sorted(changes.deletes):
                positions = changes.deletes[path]
                if len(positions) == 0 or path in removed_data:
                    continue
                target = added_by_path.get(path)
                if target is None:
                    live_entry = live.data.get(path)
                    if live_entry is None:
                        raise CommitConflictError(
                            f"cannot delete rows of {path}: it is not a live data file"
                        )
                    target = live_entry.data_file
                merged = BitMap64(positions)
                if path in live.dvs:
                    old = live.positions_deleted(self.io, path)
                    if len(merged - old) == 0:
                        continue  # nothing new for this file
                    merged |= old
                    replaced_dv_paths.add(path)
                    counters.removed_dv(live.dvs[path].data_file)
                if merged.max() >= target.record_count:
                    raise CommitConflictError(
                        f"deletion vector for {path} has position {merged.max()} but the file "
                        f"has {target.record_count} rows"
                    )
                new_dvs.append((target, merged))
            for path in removed_data:
                if path in live.dvs:
                    replaced_dv_paths.add(path)
                    counters.removed_dv(live.dvs[path].data_file)
                live_entry = live.data.get(path)
                if live_entry is None:
                    raise CommitConflictError(f"cannot remove {path}: it is not a live data file")
                counters.removed_data(live_entry.data_file)

        new_manifests: list[ManifestFile] = []

        # New data manifest(s) for added files, one per partition spec.
        for spec_id, files in _group_by_spec(changes.added_data_files).items():
            entries = [
                ManifestEntry(EntryStatus.ADDED, self.snapshot_id, None, None, f) for f in files
            ]
            new_manifests.append(self._write_manifest(entries, spec_id, ManifestContent.DATA))
            for f in files:
                counters.added_data(f)

        # New DV entries, all blobs in one Puffin file.
        if new_dvs:
            new_manifests.extend(self._write_dvs(new_dvs, counters))

        # Carry base manifests over; rewrite the ones losing entries. A manifest an
        # earlier snapshot left with no live entry (only DELETED ones) is not carried:
        # it records that snapshot's removals, which that snapshot's own list keeps
        # (Iceberg Java drops them too). Without this, every CDC commit would leave one
        # more such manifest for readers to open until the next merge.
        carried: list[ManifestFile] = []
        for mf in base_manifests:
            if _only_deleted_entries(mf):
                continue
            drop = removed_data if mf.content == ManifestContent.DATA else replaced_dv_paths
            if drop and self._manifest_touches(mf, drop):
                rewritten = self._rewrite_without(mf, drop)
                if rewritten is not None:
                    carried.append(rewritten)
            else:
                carried.append(mf)

        carried = self._merge_if_needed(carried, ManifestContent.DATA)
        carried = self._merge_if_needed(carried, ManifestContent.DELETES)

        manifests = new_manifests + carried
        manifests, first_row_id, added_rows = self._assign_row_ids(manifests)
        snapshot = self._write_snapshot(manifests, changes, counters, first_row_id, added_rows)
        updates: list[TableUpdate] = [AddSnapshot(snapshot), SetMainRef(snapshot.snapshot_id)]
        if changes.properties:
            updates.append(SetProperties(dict(changes.properties)))
        return ProducedSnapshot(snapshot, tuple(updates), self.written)

    # ------------------------------------------------------------ manifests

    def _write_manifest(
        self, entries: Sequence[ManifestEntry], spec_id: int, content: ManifestContent
    ) -> ManifestFile:
        self._manifest_counter += 1
        location = (
            f"{self._metadata_dir}/{self.attempt}-{self.snapshot_id}-m{self._manifest_counter}.avro"
        )
        spec = self.base.spec_by_id(spec_id)
        schema = self.base.schema
        ptype = spec.partition_type(schema)
        data = write_manifest(
            entries,
            schema_json=json.dumps(schema.to_json(), separators=(",", ":")),
            partition_spec_json=json.dumps(spec.to_json()["fields"], separators=(",", ":")),
            spec_id=spec_id,
            partition_type=ptype,
            content=content,
        )
        self._pending.append((location, data))
        self.written.append(location)
        manifest = _summarize(
            entries,
            location,
            len(data),
            spec_id,
            content,
            ptype,
            self.snapshot_id,
            self.sequence_number,
        )
        scan.remember_written_manifest(manifest, entries)
        return manifest

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        self.io.write_many(pending)

    def _manifest_touches(self, mf: ManifestFile, paths: set[str]) -> bool:
        for e in scan.manifest_entries(self.io, self.base, mf):
            if e.status == EntryStatus.DELETED:
                continue
            key = e.data_file.file_path
            if mf.content == ManifestContent.DELETES:
                key = e.data_file.referenced_data_file or key
            if key in paths:
                return True
        return False

    def _rewrite_without(self, mf: ManifestFile, paths: set[str]) -> ManifestFile | None:
        """The manifest with entries for ``paths`` marked DELETED, others EXISTING."""
        entries: list[ManifestEntry] = []
        for e in scan.manifest_entries(self.io, self.base, mf):
            if e.status == EntryStatus.DELETED:
                continue
            key = e.data_file.file_path
            if mf.content == ManifestContent.DELETES:
                key = e.data_file.referenced_data_file or key
            if key in paths:
                entries.append(replace(e, status=EntryStatus.DELETED, snapshot_id=self.snapshot_id))
            else:
                entries.append(replace(e, status=EntryStatus.EXISTING))
        if not entries:
            return None
        return self._write_manifest(entries, mf.partition_spec_id, mf.content)

    def _merge_if_needed(
        self, manifests: list[ManifestFile], content: ManifestContent
    ) -> list[ManifestFile]:
        props = self.base.properties
        if props.get("commit.manifest-merge.enabled", "true").lower() != "true":
            return manifests
        min_count = int(props.get("commit.manifest.min-count-to-merge", DEFAULT_MIN_COUNT_TO_MERGE))
        target = int(props.get("commit.manifest.target-size-bytes", DEFAULT_TARGET_MANIFEST_BYTES))
        of_kind = [m for m in manifests if m.content == content]
        if len(of_kind) <= min_count:
            return manifests
        self._flush()  # merging reads manifests this attempt may have just made
        # Bin-pack the small manifests of each spec, oldest first, into target-size bins.
        keep = [m for m in manifests if m.content != content or m.manifest_length >= target]
        small = [m for m in manifests if m.content == content and m.manifest_length < target]
        merged: list[ManifestFile] = []
        for spec_id in sorted({m.partition_spec_id for m in small}):
            group = [m for m in small if m.partition_spec_id == spec_id]
            bin_: list[ManifestFile] = []
            size = 0
            for m in group + [None]:  # type: ignore[list-item]
                if m is None or (bin_ and size + m.manifest_length > target):
                    if len(bin_) == 1:
                        merged.append(bin_[0])
                    elif bin_:
                        merged.append(self._merge(bin_, spec_id, content))
                    bin_, size = [], 0
                if m is not None:
                    bin_.append(m)
                    size += m.manifest_length
        return merged + keep

    def _merge(
        self, group: list[ManifestFile], spec_id: int, content: ManifestContent
    ) -> ManifestFile:
        entries: list[ManifestEntry] = []
        for mf in group:
            for e in scan.manifest_entries(self.io, self.base, mf):
                if e.snapshot_id == self.snapshot_id:
                    entries.append(e)  # this snapshot's own ADDED/DELETED records stay
                elif e.status == EntryStatus.DELETED:
                    continue
                else:
                    entries.append(replace(e, status=EntryStatus.EXISTING))
        return self._write_manifest(entries, spec_id, content)

    # ------------------------------------------------------------ DVs

    def _write_dvs(
        self, new_dvs: list[tuple[DataFile, BitMap64]], counters: _Counters
    ) -> list[ManifestFile]:
        per_file = dv_blobs_per_puffin(self.base.properties)
        groups = [new_dvs[i : i + per_file] for i in range(0, len(new_dvs), per_file)]
        puffins = [
            (
                f"{self._data_dir}/{self.attempt}-{self.snapshot_id}-dv-{n:05d}.puffin",
                *write_dv_puffin([(f.file_path, bm) for f, bm in group]),
            )
            for n, group in enumerate(groups)
        ]
        self.written.extend(location for location, _, _ in puffins)
        self._pending.extend((location, data) for location, data, _ in puffins)
        self._wrote_dvs = True
        by_spec: dict[int, list[ManifestEntry]] = {}
        for group, (location, puffin, blobs) in zip(groups, puffins):
            for (target, _), blob in zip(group, blobs):
                ref, offset, length, cardinality = blob
                assert ref == target.file_path
                dv = DataFile(
                    content=FileContent.POSITION_DELETES,
                    file_path=location,
                    file_format="PUFFIN",
                    partition=target.partition,
                    record_count=cardinality,
                    file_size_in_bytes=len(puffin),
                    referenced_data_file=target.file_path,
                    content_offset=offset,
                    content_size_in_bytes=length,
                    spec_id=target.spec_id,
                )
                counters.added_dv(dv)
                by_spec.setdefault(target.spec_id, []).append(
                    ManifestEntry(EntryStatus.ADDED, self.snapshot_id, None, None, dv)
                )
            counters.added_files_size += len(puffin)
        return [
            self._write_manifest(entries, spec_id, ManifestContent.DELETES)
            for spec_id, entries in sorted(by_spec.items())
        ]

    # ------------------------------------------------------------ snapshot

    def _assign_row_ids(self, manifests: list[ManifestFile]) -> tuple[list[ManifestFile], int, int]:
        first = self.base.next_row_id or 0
        next_id = first
        out: list[ManifestFile] = []
        for mf in manifests:
            if mf.content == ManifestContent.DATA and mf.first_row_id is None:
                mf = replace(mf, first_row_id=next_id)
                next_id += mf.added_rows_count + mf.existing_rows_count
            out.append(mf)
        return out, first, next_id - first

    def _write_snapshot(
        self,
        manifests: list[ManifestFile],
        changes: SnapshotChanges,
        counters: _Counters,
        first_row_id: int,
        added_rows: int,
    ) -> Snapshot:
        parent = self.base.current_snapshot
        location = f"{self._metadata_dir}/snap-{self.snapshot_id}-{self.attempt}.avro"
        data = write_manifest_list(
            manifests,
            snapshot_id=self.snapshot_id,
            parent_snapshot_id=parent.snapshot_id if parent else None,
            sequence_number=self.sequence_number,
            first_row_id=first_row_id,
        )
        self._pending.append((location, data))
        self.written.append(location)
        # Nothing names these files until the metadata file does, so they are written
        # together; all are durable before it is. The fault points then see them all.
        self._flush()
        if self._wrote_dvs:
            faults.hit("after-puffin")
        faults.hit("after-manifests")
        faults.hit("after-manifest-list")
        scan.remember_written_manifest_list(location, manifests)
        summary: dict[str, str] = {"operation": changes.operation}
        summary.update(counters.summary())
        summary.update(updated_totals(parent.summary if parent else None, counters.total_deltas()))
        summary.update(changes.summary)
        now = int(time.time() * 1000)
        return Snapshot(
            snapshot_id=self.snapshot_id,
            parent_snapshot_id=parent.snapshot_id if parent else None,
            sequence_number=self.sequence_number,
            timestamp_ms=max(now, parent.timestamp_ms + 1 if parent else now),
            manifest_list=location,
            summary=summary,
            schema_id=self.base.current_schema_id,
            first_row_id=first_row_id,
            added_rows=added_rows,
        )


# ---------------------------------------------------------------- helpers


class _Counters:
    def __init__(self) -> None:
        self.added_data_files = 0
        self.added_records = 0
        self.added_files_size = 0
        self.removed_data_files = 0
        self.removed_records = 0
        self.removed_files_size = 0
        self.added_dvs = 0
        self.added_positions = 0
        self.removed_dvs = 0
        self.removed_positions = 0

    def added_data(self, f: DataFile) -> None:
        self.added_data_files += 1
        self.added_records += f.record_count
        self.added_files_size += f.file_size_in_bytes

    def removed_data(self, f: DataFile) -> None:
        self.removed_data_files += 1
        self.removed_records += f.record_count
        self.removed_files_size += f.file_size_in_bytes

    def added_dv(self, dv: DataFile) -> None:
        self.added_dvs += 1
        self.added_positions += dv.record_count

    def removed_dv(self, dv: DataFile) -> None:
        self.removed_dvs += 1
        self.removed_positions += dv.record_count

    def summary(self) -> dict[str, str]:
        pairs = {
            "added-data-files": self.added_data_files,
            "added-records": self.added_records,
            "added-files-size": self.added_files_size,
            "removed-data-files": self.removed_data_files,
            "deleted-records": self.removed_records,
            "removed-files-size": self.removed_files_size,
            "added-delete-files": self.added_dvs,
            "added-dvs": self.added_dvs,
            "added-position-deletes": self.added_positions,
            "removed-delete-files": self.removed_dvs,
            "removed-dvs": self.removed_dvs,
            "removed-position-deletes": self.removed_positions,
        }
        return {k: str(v) for k, v in pairs.items() if v}

    def total_deltas(self) -> dict[str, int]:
        return {
            "total-records": self.added_records - self.removed_records,
            "total-files-size": self.added_files_size - self.removed_files_size,
            "total-data-files": self.added_data_files - self.removed_data_files,
            "total-delete-files": self.added_dvs - self.removed_dvs,
            "total-position-deletes": self.added_positions - self.removed_positions,
        }


def _group_by_spec(files: Iterable[DataFile]) -> dict[int, list[DataFile]]:
    out: dict[int, list[DataFile]] = {}
    for f in files:
        out.setdefault(f.spec_id, []).append(f)
    return out


def _summarize(
    entries: Sequence[ManifestEntry],
    location: str,
    length: int,
    spec_id: int,
    content: ManifestContent,
    ptype: StructType,
    snapshot_id: int,
    sequence_number: int,
) -> ManifestFile:
    counts = {s: [0, 0] for s in EntryStatus}
    min_seq = sequence_number
    for e in entries:
        counts[e.status][0] += 1
        counts[e.status][1] += e.data_file.record_count
        if e.status != EntryStatus.DELETED and e.sequence_number is not None:
            min_seq = min(min_seq, e.sequence_number)
    return ManifestFile(
        manifest_path=location,
        manifest_length=length,
        partition_spec_id=spec_id,
        content=content,
        sequence_number=sequence_number,
        min_sequence_number=min_seq,
        added_snapshot_id=snapshot_id,
        added_files_count=counts[EntryStatus.ADDED][0],
        existing_files_count=counts[EntryStatus.EXISTING][0],
        deleted_files_count=counts[EntryStatus.DELETED][0],
        added_rows_count=counts[EntryStatus.ADDED][1],
        existing_rows_count=counts[EntryStatus.EXISTING][1],
        deleted_rows_count=counts[EntryStatus.DELETED][1],
        partitions=_partition_summaries(entries, ptype),
    )


def _partition_summaries(
    entries: Sequence[ManifestEntry], ptype: StructType
) -> tuple[FieldSummary, ...]:
    out: list[FieldSummary] = []
    for i, field in enumerate(ptype.fields):
        values = [e.data_file.partition[i] for e in entries]
        present = [v for v in values if v is not None]
        is_float = getattr(field.field_type, "name", "") in ("float", "double")
        nan = [v for v in present if is_float and math.isnan(v)]
        ordered = [v for v in present if not (is_float and math.isnan(v))]
        lower = upper = None
        if ordered:
            lower = to_bytes(field.field_type, min(ordered))  # type: ignore[arg-type]
            upper = to_bytes(field.field_type, max(ordered))  # type: ignore[arg-type]
        out.append(
            FieldSummary(
                contains_null=len(present) < len(values),
                contains_nan=bool(nan) if is_float else None,
                lower_bound=lower,
                upper_bound=upper,
            )
        )
    return tuple(out)
