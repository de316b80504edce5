"""What one snapshot changed, read from the manifests it wrote and nothing else.

A snapshot's own manifests are those its manifest list names with its id as
``added_snapshot_id`` (their sequence number is the snapshot's): every entry the
snapshot ADDED or DELETED is in one of them, carried manifests hold only older entries.
From them: the data files it added (first row ids and sequence numbers inherited as the
spec says), the data files it removed, the deletion vectors it added and those it
replaced (the same snapshot marks them DELETED). Only those entries are decoded.

Deletion vectors are the only row deletes read: a snapshot adding equality deletes or
v2 position delete files is refused (``ChangeFeedError``), as is one removing a data
file's deletion vector while keeping the file (rows coming back).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from calving.commit.errors import ChangeFeedError
from calving.commit.io import FileIO
from calving.commit.spec.data_file import (
    DataFile,
    EntryStatus,
    FileContent,
    ManifestContent,
    ManifestEntry,
)
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.snapshot import Snapshot
from calving.commit.table import scan


@dataclass(frozen=True)
class FileRef:
    """A data file with the values its rows inherit: ``first_row_id`` (None: the file
    has none, its rows have no ``_row_id`` unless stored) and data sequence number."""

    data_file: DataFile
    first_row_id: int | None
    sequence_number: int

    @property
    def path(self) -> str:
        return self.data_file.file_path


@dataclass
class SnapshotDelta:
    """One snapshot's changes, by data file path."""

    snapshot: Snapshot
    added: dict[str, FileRef] = field(default_factory=dict)
    removed: dict[str, FileRef | None] = field(default_factory=dict)  # None: look it up
    #: data file -> the deletion vector the snapshot added for it (all its positions).
    new_dvs: dict[str, DataFile] = field(default_factory=dict)
    #: data file -> the deletion vector the snapshot replaced or removed with the file.
    old_dvs: dict[str, DataFile] = field(default_factory=dict)

    @property
    def operation(self) -> str:
        return self.snapshot.operation


def _refuse_delete_file(snapshot: Snapshot, df: DataFile) -> None:
    if df.content == FileContent.EQUALITY_DELETES:
        kind = "equality delete files"
    elif df.referenced_data_file is None or df.content_offset is None:
        kind = "position delete files (v2)"
    else:
        return
    raise ChangeFeedError(
        f"snapshot {snapshot.snapshot_id} adds {kind} ({df.file_path}): the change feed "
        "reads deletion vectors only"
    )


def _ref(entry: ManifestEntry) -> FileRef:
    assert entry.sequence_number is not None  # filled by inheritance
    return FileRef(entry.data_file, entry.data_file.first_row_id, entry.sequence_number)


def read_delta(io: FileIO, metadata: TableMetadata, snapshot: Snapshot) -> SnapshotDelta:
    """The snapshot's added and removed data files and deletion vectors (not read)."""
    delta = SnapshotDelta(snapshot)
    sid = snapshot.snapshot_id
    for mf in scan.own_manifests(io, snapshot):
        for entry in scan.changed_entries(io, metadata, mf):
            if entry.snapshot_id != sid:
                continue
            df = entry.data_file
            added = entry.status == EntryStatus.ADDED
            if mf.content == ManifestContent.DATA:
                if added:
                    delta.added[df.file_path] = _ref(entry)
                else:
                    known = df.first_row_id is not None and entry.sequence_number is not None
                    delta.removed[df.file_path] = _ref(entry) if known else None
                continue
            if added:
                _refuse_delete_file(snapshot, df)
            if df.referenced_data_file is not None:
                (delta.new_dvs if added else delta.old_dvs)[df.referenced_data_file] = df
    for target in delta.old_dvs:
        if target not in delta.new_dvs and target not in delta.removed:
            raise ChangeFeedError(
                f"snapshot {sid} removes the deletion vector of {target} but keeps the "
                "file: the change feed cannot tell which rows came back"
            )
    return delta
