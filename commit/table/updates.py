"""Table changes and commit requirements as values, and their pure application.

An action states what it wants (``TableUpdate`` values) and what must still hold
of the table for that to be valid (``Requirement`` values). ``apply_updates``
turns a base metadata plus updates into the next metadata; it does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from calving.commit.errors import CommitConflictError, TableIdentityChangedError
from calving.commit.spec.metadata import MAIN_BRANCH, TableMetadata
from calving.commit.spec.schema import Schema
from calving.commit.spec.snapshot import (
    MetadataLogEntry,
    Snapshot,
    SnapshotLogEntry,
    SnapshotRef,
)
from calving.commit.spec.statistics import StatisticsFile
from calving.commit.table.properties import TableProperties


@dataclass(frozen=True)
class AddSnapshot:
    snapshot: Snapshot


@dataclass(frozen=True)
class SetMainRef:
    snapshot_id: int


@dataclass(frozen=True)
class SetProperties:
    updates: Mapping[str, str]


@dataclass(frozen=True)
class RemoveProperties:
    keys: tuple[str, ...]


@dataclass(frozen=True)
class AddSchema:
    schema: Schema
    last_column_id: int


@dataclass(frozen=True)
class SetCurrentSchema:
    schema_id: int


@dataclass(frozen=True)
class RemoveSnapshots:
    snapshot_ids: frozenset[int]


@dataclass(frozen=True)
class SetStatistics:
    """Publish a statistics file for its snapshot (replacing that snapshot's earlier one)."""

    statistics: StatisticsFile


@dataclass(frozen=True)
class RemoveStatistics:
    snapshot_id: int


TableUpdate = (
    AddSnapshot
    | SetMainRef
    | SetProperties
    | RemoveProperties
    | AddSchema
    | SetCurrentSchema
    | RemoveSnapshots
    | SetStatistics
    | RemoveStatistics
)


@dataclass(frozen=True)
class AssertTableUUID:
    uuid: str

    def check(self, base: TableMetadata) -> None:
        if base.table_uuid != self.uuid:
            raise TableIdentityChangedError(
                f"table UUID changed from {self.uuid} to {base.table_uuid}: the table was "
                "dropped and recreated under the writer; refusing to commit into it"
            )


@dataclass(frozen=True)
class AssertCurrentSchemaId:
    schema_id: int

    def check(self, base: TableMetadata) -> None:
        if base.current_schema_id != self.schema_id:
            raise CommitConflictError(
                f"schema changed concurrently: expected current schema {self.schema_id}, "
                f"found {base.current_schema_id}"
            )


Requirement = AssertTableUUID | AssertCurrentSchemaId


@dataclass(frozen=True)
class MetadataChange:
    """What one commit attempt wants: updates plus the requirements that guard them."""

    updates: tuple[TableUpdate, ...]
    requirements: tuple[Requirement, ...] = ()
    written_files: tuple[str, ...] = field(default=())


def apply_updates(
    base: TableMetadata,
    updates: Sequence[TableUpdate],
    *,
    base_location: str | None,
    now_ms: int,
) -> TableMetadata:
    """The metadata that results from ``updates`` on ``base`` (pure)."""
    m = base
    for u in updates:
        if isinstance(u, AddSnapshot):
            snap = u.snapshot
            added = snap.added_rows or 0
            m = m.with_changes(
                snapshots=m.snapshots + (snap,),
                last_sequence_number=snap.sequence_number,
                next_row_id=(m.next_row_id or 0) + added,
            )
        elif isinstance(u, SetMainRef):
            ref_snap = m.snapshot_by_id(u.snapshot_id)
            refs = dict(m.refs)
            refs[MAIN_BRANCH] = SnapshotRef(u.snapshot_id)
            log = m.snapshot_log + (
                SnapshotLogEntry(ref_snap.timestamp_ms if ref_snap else now_ms, u.snapshot_id),
            )
            m = m.with_changes(current_snapshot_id=u.snapshot_id, refs=refs, snapshot_log=log)
        elif isinstance(u, SetProperties):
            props = dict(m.properties)
            props.update(u.updates)
            m = m.with_changes(properties=props)
        elif isinstance(u, RemoveProperties):
            props = {k: v for k, v in m.properties.items() if k not in u.keys}
            m = m.with_changes(properties=props)
        elif isinstance(u, AddSchema):
            m = m.with_changes(
                schemas=m.schemas + (u.schema,),
                last_column_id=max(m.last_column_id, u.last_column_id),
            )
        elif isinstance(u, SetCurrentSchema):
            m = m.with_changes(current_schema_id=u.schema_id)
        elif isinstance(u, RemoveSnapshots):
            ids = u.snapshot_ids
            m = m.with_changes(
                snapshots=tuple(s for s in m.snapshots if s.snapshot_id not in ids),
                snapshot_log=tuple(e for e in m.snapshot_log if e.snapshot_id not in ids),
                statistics=tuple(s for s in m.statistics if s.snapshot_id not in ids),
            )
        elif isinstance(u, SetStatistics):
            snapshot_id = u.statistics.snapshot_id
            if m.snapshot_by_id(snapshot_id) is None:
                raise ValueError(f"statistics for snapshot {snapshot_id}, which the table lacks")
            kept = tuple(s for s in m.statistics if s.snapshot_id != snapshot_id)
            m = m.with_changes(statistics=(*kept, u.statistics))
        elif isinstance(u, RemoveStatistics):
            m = m.with_changes(
                statistics=tuple(s for s in m.statistics if s.snapshot_id != u.snapshot_id)
            )
        else:  # pragma: no cover - the union above is closed
            raise TypeError(f"unknown table update {u!r}")

    metadata_log = m.metadata_log
    if base_location is not None:
        keep = TableProperties(m.properties).previous_versions_max
        metadata_log = metadata_log + (MetadataLogEntry(base.last_updated_ms, base_location),)
        metadata_log = metadata_log[-keep:] if keep > 0 else ()
    return m.with_changes(
        metadata_log=metadata_log, last_updated_ms=max(now_ms, base.last_updated_ms + 1)
    )
