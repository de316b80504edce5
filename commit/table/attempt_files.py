"""The new files of one attempt: their names, one batch of writes, and what they hold.

Every Puffin file, manifest and the manifest list of an attempt is named with the
attempt's random id and the snapshot id, so cleaning one failed attempt can never touch
a file another attempt or snapshot uses. ``written`` lists every file of the attempt
from the moment it is named (before it is durable), in naming order: it is exactly what
a cleanup after a certain failure deletes. The files are queued and go out in one
batch of overlapping writes (``flush``), early only when a merge must read them back.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from pyroaring import BitMap64

from calving.commit.io import FileIO
from calving.commit.spec.data_file import (
    EntryStatus,
    FieldSummary,
    ManifestContent,
    ManifestEntry,
    ManifestFile,
)
from calving.commit.spec.deletion_vector import DVBlobRef, write_dv_puffin
from calving.commit.spec.manifest import write_manifest
from calving.commit.spec.manifest_list import write_manifest_list
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.properties import TableProperties
from calving.commit.spec.types import StructType
from calving.commit.spec.values import to_bytes
from calving.commit.table import scan

#: One Puffin file as staged: its location, its bytes, and where each blob landed.
StagedPuffin = tuple[str, bytes, list[DVBlobRef]]


class AttemptFiles:
    def __init__(self, io: FileIO, base: TableMetadata, snapshot_id: int) -> None:
        self.io = io
        self.base = base
        self.snapshot_id = snapshot_id
        self.sequence_number = base.last_sequence_number + 1
        self.attempt = uuid.uuid4().hex[:12]
        self.written: list[str] = []
        self.wrote_dvs = False
        self._manifest_counter = 0
        self._pending: list[tuple[str, bytes]] = []
        self._manifests: list[str] = []  # this attempt's manifest locations, in order
        self._metadata_dir = scan.manifests_directory(base.location)
        self._data_dir = TableProperties(base.properties).write_data_path or (
            base.location.rstrip("/") + "/data"
        )

    def _stage(self, location: str, data: bytes) -> None:
        self._pending.append((location, data))
        self.written.append(location)

    def drop_manifests_except(self, kept: AbstractSet[str]) -> None:
        """Forget this attempt's manifests that the manifest list will not name (merged
        into others after being written to be read back): unstage them, or delete them
        when already written, so a landed commit leaves no unreferenced manifest."""
        gone = [m for m in self._manifests if m not in kept]
        if not gone:
            return
        dropped = set(gone)
        staged = {location for location, _ in self._pending}
        self._pending = [(loc, data) for loc, data in self._pending if loc not in dropped]
        for location in gone:
            if location not in staged:
                self.io.delete(location)
        self._manifests = [m for m in self._manifests if m in kept]
        self.written = [w for w in self.written if w not in dropped]

    def flush(self) -> None:
        """Write every staged file (one batch); all are durable when this returns."""
        pending, self._pending = self._pending, []
        self.io.write_many(pending)

    def manifest(
        self, entries: Sequence[ManifestEntry], spec_id: int, content: ManifestContent
    ) -> ManifestFile:
        """Stage a manifest of ``entries`` and return its manifest-list entry."""
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
        self._stage(location, data)
        self._manifests.append(location)
        manifest = summarize_manifest(
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

    def puffins(self, groups: Sequence[Sequence[tuple[str, BitMap64]]]) -> list[StagedPuffin]:
        """Stage one Puffin file per group of (data file path, positions)."""
        staged: list[StagedPuffin] = [
            (
                f"{self._data_dir}/{self.attempt}-{self.snapshot_id}-dv-{n:05d}.puffin",
                *write_dv_puffin(list(group)),
            )
            for n, group in enumerate(groups)
        ]
        for (location, _, blobs), group in zip(staged, groups):
            for (data_file, positions), blob in zip(group, blobs):
                scan.remember_written_dv(location, blob.content_offset, positions, data_file)
        self.written.extend(location for location, _, _ in staged)
        self._pending.extend((location, data) for location, data, _ in staged)
        self.wrote_dvs = self.wrote_dvs or bool(staged)
        return staged

    def manifest_list(
        self, manifests: Sequence[ManifestFile], parent_snapshot_id: int | None, first_row_id: int
    ) -> str:
        """Stage the manifest list and return its location."""
        location = f"{self._metadata_dir}/snap-{self.snapshot_id}-{self.attempt}.avro"
        data = write_manifest_list(
            manifests,
            snapshot_id=self.snapshot_id,
            parent_snapshot_id=parent_snapshot_id,
            sequence_number=self.sequence_number,
            first_row_id=first_row_id,
        )
        self._stage(location, data)
        return location


def summarize_manifest(
    entries: Sequence[ManifestEntry],
    location: str,
    length: int,
    spec_id: int,
    content: ManifestContent,
    ptype: StructType,
    snapshot_id: int,
    sequence_number: int,
) -> ManifestFile:
    """The manifest-list entry of a manifest holding ``entries``."""
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
