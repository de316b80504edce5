"""Carrying the base snapshot's manifests into the new one, and merging small ones.

A base manifest is carried unchanged (fast append) unless it loses an entry (a removed
data file, or a DV the new snapshot replaces): then it is rewritten with that entry
DELETED and the others EXISTING. A manifest an earlier snapshot left with only DELETED
entries is not carried: it records that snapshot's removals, which that snapshot's own
list keeps (Iceberg Java drops them too). Once one kind (data / deletes) has more than
``commit.manifest.min-count-to-merge`` manifests, the small ones of each partition spec
are bin-packed, oldest first, into ``commit.manifest.target-size-bytes`` manifests.

An entry moved into a new manifest keeps the values it inherited from its old one:
``scan.manifest_entries`` fills them (sequence numbers, and the v3 ``first_row_id`` of
live data files), so they are written explicitly and the rows keep their ids although
the new manifest has another (or no) ``first_row_id``.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import replace

from calving.commit.io import FileIO
from calving.commit.spec.data_file import EntryStatus, ManifestContent, ManifestEntry, ManifestFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.properties import TableProperties
from calving.commit.table import scan
from calving.commit.table.attempt_files import AttemptFiles


def only_deleted_entries(mf: ManifestFile) -> bool:
    # Unknown (v1) counts read as 0 everywhere: such a manifest is kept.
    return mf.deleted_files_count > 0 and mf.added_files_count == 0 and mf.existing_files_count == 0


def carry_manifests(
    files: AttemptFiles,
    base_manifests: Iterable[ManifestFile],
    removed_data: AbstractSet[str],
    replaced_dv_paths: AbstractSet[str],
) -> list[ManifestFile]:
    """The base manifests the new snapshot keeps, rewritten where they lose entries."""
    carried: list[ManifestFile] = []
    for mf in base_manifests:
        if only_deleted_entries(mf):
            continue
        drop = removed_data if mf.content == ManifestContent.DATA else replaced_dv_paths
        if drop and _touches(files.io, files.base, mf, drop):
            rewritten = _rewrite_without(files, mf, drop)
            if rewritten is not None:
                carried.append(rewritten)
        else:
            carried.append(mf)
    return carried


def _entry_key(mf: ManifestFile, e: ManifestEntry) -> str:
    """The data file an entry is about: itself, or the one a DV references."""
    if mf.content == ManifestContent.DELETES:
        return e.data_file.referenced_data_file or e.data_file.file_path
    return e.data_file.file_path


def _touches(io: FileIO, base: TableMetadata, mf: ManifestFile, paths: AbstractSet[str]) -> bool:
    return any(
        e.status != EntryStatus.DELETED and _entry_key(mf, e) in paths
        for e in scan.manifest_entries(io, base, mf)
    )


def _rewrite_without(
    files: AttemptFiles, mf: ManifestFile, paths: AbstractSet[str]
) -> ManifestFile | None:
    """The manifest with entries for ``paths`` marked DELETED, others EXISTING."""
    entries: list[ManifestEntry] = []
    for e in scan.manifest_entries(files.io, files.base, mf):
        if e.status == EntryStatus.DELETED:
            continue
        if _entry_key(mf, e) in paths:
            entries.append(replace(e, status=EntryStatus.DELETED, snapshot_id=files.snapshot_id))
        else:
            entries.append(replace(e, status=EntryStatus.EXISTING))
    if not entries:
        return None
    return files.manifest(entries, mf.partition_spec_id, mf.content)


def merge_if_needed(
    files: AttemptFiles, manifests: list[ManifestFile], content: ManifestContent
) -> list[ManifestFile]:
    """``manifests`` with the small ones of ``content`` merged, if there are too many."""
    props = TableProperties(files.base.properties)
    if not props.manifest_merge_enabled:
        return manifests
    min_count = props.manifest_min_count_to_merge
    target = props.manifest_target_size_bytes
    of_kind = [m for m in manifests if m.content == content]
    if len(of_kind) <= min_count:
        return manifests
    files.flush()  # merging reads manifests this attempt may have just made
    keep = [m for m in manifests if m.content != content or m.manifest_length >= target]
    small = [m for m in manifests if m.content == content and m.manifest_length < target]
    merged: list[ManifestFile] = []
    for spec_id in sorted({m.partition_spec_id for m in small}):
        group = [m for m in small if m.partition_spec_id == spec_id]
        bin_: list[ManifestFile] = []
        size = 0
        for m in [*group, None]:
            if m is None or (bin_ and size + m.manifest_length > target):
                if len(bin_) == 1:
                    merged.append(bin_[0])
                elif bin_:
                    merged.append(_merge(files, bin_, spec_id, content))
                bin_, size = [], 0
            if m is not None:
                bin_.append(m)
                size += m.manifest_length
    return merged + keep


def _merge(
    files: AttemptFiles, group: list[ManifestFile], spec_id: int, content: ManifestContent
) -> ManifestFile:
    entries: list[ManifestEntry] = []
    for mf in group:
        for e in scan.manifest_entries(files.io, files.base, mf):
            if e.snapshot_id == files.snapshot_id:
                entries.append(e)  # this snapshot's own ADDED/DELETED records stay
            elif e.status == EntryStatus.DELETED:
                continue
            else:
                entries.append(replace(e, status=EntryStatus.EXISTING))
    return files.manifest(entries, spec_id, content)


def rewrite_all(
    files: AttemptFiles, manifests: list[ManifestFile], content: ManifestContent
) -> list[ManifestFile]:
    """Every manifest of ``content`` rewritten: live entries regrouped by partition spec
    and sorted by partition, cut into manifests of about the target size (estimated from
    the current manifests' bytes per entry), so a scan filtering on the partition opens
    few manifests and their count stays proportional to the table, not to its history."""
    target = TableProperties(files.base.properties).manifest_target_size_bytes
    of_kind = [m for m in manifests if m.content == content]
    others = [m for m in manifests if m.content != content]
    if not of_kind:
        return manifests
    files.flush()
    out: list[ManifestFile] = []
    for spec_id in sorted({m.partition_spec_id for m in of_kind}):
        group = [m for m in of_kind if m.partition_spec_id == spec_id]
        entries: list[ManifestEntry] = []
        total_bytes = 0
        for mf in group:
            total_bytes += mf.manifest_length
            for e in scan.manifest_entries(files.io, files.base, mf):
                if e.snapshot_id == files.snapshot_id:
                    entries.append(e)
                elif e.status != EntryStatus.DELETED:
                    entries.append(replace(e, status=EntryStatus.EXISTING))
        if not entries:
            continue
        per_manifest = max(1, target * len(entries) // max(total_bytes, 1))
        entries.sort(key=lambda e: (repr(e.data_file.partition), e.data_file.file_path))
        for start in range(0, len(entries), per_manifest):
            out.append(files.manifest(entries[start : start + per_manifest], spec_id, content))
    return out + others
