"""Table updates and commit requirements as values, and their pure application.

One vocabulary for every table change: calving's own commits (an action states what it
wants as ``TableUpdate`` values and what must still hold of the table as requirement
values), calving's REST client (which sends them) and ``calving catalog serve`` (which
receives them) use these types; ``update_json`` is their one JSON encoder and decoder,
the Iceberg REST protocol's ``TableUpdate`` / ``TableRequirement`` objects.

``apply_updates`` turns a base metadata plus updates into the next metadata for the
updates calving's commits make; the server's stricter application of the whole set
(ids "-1", refs other than ``main``, specs, sort orders) builds on it. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from calving.commit.errors import CommitConflictError, TableIdentityChangedError
from calving.commit.spec.metadata import MAIN_BRANCH, TableMetadata
from calving.commit.spec.partition import PartitionSpec
from calving.commit.spec.properties import TableProperties
from calving.commit.spec.schema import Schema
from calving.commit.spec.snapshot import (
    MetadataLogEntry,
    Snapshot,
    SnapshotLogEntry,
    SnapshotRef,
)
from calving.commit.spec.sort_order import SortOrder
from calving.commit.spec.statistics import StatisticsFile

#: A schema, spec or sort order id of -1 in an update means "the one this request added last".
LAST_ADDED = -1

# ---------------------------------------------------------------- updates


@dataclass(frozen=True)
class AssignUUID:
    uuid: str


@dataclass(frozen=True)
class UpgradeFormatVersion:
    format_version: int


@dataclass(frozen=True)
class AddSchema:
    schema: Schema
    last_column_id: int


@dataclass(frozen=True)
class SetCurrentSchema:
    schema_id: int


@dataclass(frozen=True)
class AddSpec:
    spec: PartitionSpec


@dataclass(frozen=True)
class SetDefaultSpec:
    spec_id: int


@dataclass(frozen=True)
class AddSortOrder:
    sort_order: SortOrder


@dataclass(frozen=True)
class SetDefaultSortOrder:
    order_id: int


@dataclass(frozen=True)
class AddSnapshot:
    snapshot: Snapshot


@dataclass(frozen=True)
class SetSnapshotRef:
    """Point ref ``name`` at a snapshot; ``main`` also makes it the current snapshot."""

    name: str
    ref: SnapshotRef


@dataclass(frozen=True)
class RemoveSnapshotRef:
    name: str


@dataclass(frozen=True)
class RemoveSnapshots:
    snapshot_ids: frozenset[int]


@dataclass(frozen=True)
class SetLocation:
    location: str


@dataclass(frozen=True)
class SetProperties:
    updates: Mapping[str, str]


@dataclass(frozen=True)
class RemoveProperties:
    keys: tuple[str, ...]


@dataclass(frozen=True)
class SetStatistics:
    """Publish a statistics file for its snapshot (replacing that snapshot's earlier one)."""

    statistics: StatisticsFile


@dataclass(frozen=True)
class RemoveStatistics:
    snapshot_id: int


TableUpdate = (
    AssignUUID
    | UpgradeFormatVersion
    | AddSchema
    | SetCurrentSchema
    | AddSpec
    | SetDefaultSpec
    | AddSortOrder
    | SetDefaultSortOrder
    | AddSnapshot
    | SetSnapshotRef
    | RemoveSnapshotRef
    | RemoveSnapshots
    | SetLocation
    | SetProperties
    | RemoveProperties
    | SetStatistics
    | RemoveStatistics
)


def set_main_ref(snapshot_id: int) -> SetSnapshotRef:
    """Make ``snapshot_id`` the table's current snapshot (the ``main`` branch)."""
    return SetSnapshotRef(MAIN_BRANCH, SnapshotRef(snapshot_id))


# ---------------------------------------------------------------- requirements


def _conflict(what: str, expected: object, found: object) -> CommitConflictError:
    return CommitConflictError(f"requirement failed: {what} is {found}, expected {expected}")


@dataclass(frozen=True)
class AssertCreate:
    """The table must not exist; whoever knows the catalog checks it, not ``check``."""

    def check(self, base: TableMetadata) -> None:
        raise CommitConflictError("requirement failed: the table already exists")


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
class AssertRefSnapshotId:
    ref: str
    snapshot_id: int | None  # None: the ref must not exist

    def check(self, base: TableMetadata) -> None:
        current = base.refs.get(self.ref)
        found = None if current is None else current.snapshot_id
        if found != self.snapshot_id:
            raise _conflict(f"ref {self.ref!r} snapshot id", self.snapshot_id, found)


@dataclass(frozen=True)
class AssertCurrentSchemaId:
    schema_id: int

    def check(self, base: TableMetadata) -> None:
        if base.current_schema_id != self.schema_id:
            raise CommitConflictError(
                f"schema changed concurrently: expected current schema {self.schema_id}, "
                f"found {base.current_schema_id}"
            )


@dataclass(frozen=True)
class AssertLastAssignedFieldId:
    last_assigned_field_id: int

    def check(self, base: TableMetadata) -> None:
        if base.last_column_id != self.last_assigned_field_id:
            raise _conflict(
                "last-assigned-field-id", self.last_assigned_field_id, base.last_column_id
            )


@dataclass(frozen=True)
class AssertLastAssignedPartitionId:
    last_assigned_partition_id: int

    def check(self, base: TableMetadata) -> None:
        if base.last_partition_id != self.last_assigned_partition_id:
            raise _conflict(
                "last-assigned-partition-id",
                self.last_assigned_partition_id,
                base.last_partition_id,
            )


@dataclass(frozen=True)
class AssertDefaultSpecId:
    spec_id: int

    def check(self, base: TableMetadata) -> None:
        if base.default_spec_id != self.spec_id:
            raise _conflict("default-spec-id", self.spec_id, base.default_spec_id)


@dataclass(frozen=True)
class AssertDefaultSortOrderId:
    order_id: int

    def check(self, base: TableMetadata) -> None:
        if base.default_sort_order_id != self.order_id:
            raise _conflict("default-sort-order-id", self.order_id, base.default_sort_order_id)


Requirement = (
    AssertCreate
    | AssertTableUUID
    | AssertRefSnapshotId
    | AssertCurrentSchemaId
    | AssertLastAssignedFieldId
    | AssertLastAssignedPartitionId
    | AssertDefaultSpecId
    | AssertDefaultSortOrderId
)


@dataclass(frozen=True)
class MetadataChange:
    """What one commit attempt wants: updates plus the requirements that guard them."""

    updates: tuple[TableUpdate, ...]
    requirements: tuple[Requirement, ...] = ()
    written_files: tuple[str, ...] = field(default=())


# ---------------------------------------------------------------- application


def apply_updates(
    base: TableMetadata,
    updates: Sequence[TableUpdate],
    *,
    base_location: str | None,
    now_ms: int,
) -> TableMetadata:
    """The metadata that results from ``updates`` on ``base`` (pure). Handles the updates
    calving's own commits make; the others raise ``TypeError``."""
    m = base
    for u in updates:
        m = _apply_one(m, u, now_ms)
    metadata_log = m.metadata_log
    if base_location is not None:
        keep = TableProperties(m.properties).previous_versions_max
        metadata_log = metadata_log + (MetadataLogEntry(base.last_updated_ms, base_location),)
        metadata_log = metadata_log[-keep:] if keep > 0 else ()
    return m.with_changes(
        metadata_log=metadata_log, last_updated_ms=max(now_ms, base.last_updated_ms + 1)
    )


def _apply_one(m: TableMetadata, u: TableUpdate, now_ms: int) -> TableMetadata:
    if isinstance(u, AddSnapshot):
        snap = u.snapshot
        return m.with_changes(
            snapshots=m.snapshots + (snap,),
            last_sequence_number=snap.sequence_number,
            next_row_id=(m.next_row_id or 0) + (snap.added_rows or 0),
        )
    if isinstance(u, SetSnapshotRef):
        return _set_ref(m, u, now_ms)
    if isinstance(u, SetProperties):
        return m.with_changes(properties={**m.properties, **u.updates})
    if isinstance(u, RemoveProperties):
        return m.with_changes(properties={k: v for k, v in m.properties.items() if k not in u.keys})
    if isinstance(u, AddSchema):
        return m.with_changes(
            schemas=m.schemas + (u.schema,),
            last_column_id=max(m.last_column_id, u.last_column_id),
        )
    if isinstance(u, SetCurrentSchema):
        return m.with_changes(current_schema_id=u.schema_id)
    if isinstance(u, RemoveSnapshots):
        ids = u.snapshot_ids
        return m.with_changes(
            snapshots=tuple(s for s in m.snapshots if s.snapshot_id not in ids),
            snapshot_log=tuple(e for e in m.snapshot_log if e.snapshot_id not in ids),
            statistics=tuple(s for s in m.statistics if s.snapshot_id not in ids),
        )
    if isinstance(u, SetStatistics):
        snapshot_id = u.statistics.snapshot_id
        if m.snapshot_by_id(snapshot_id) is None:
            raise ValueError(f"statistics for snapshot {snapshot_id}, which the table lacks")
        kept = tuple(s for s in m.statistics if s.snapshot_id != snapshot_id)
        return m.with_changes(statistics=(*kept, u.statistics))
    if isinstance(u, RemoveStatistics):
        return m.with_changes(
            statistics=tuple(s for s in m.statistics if s.snapshot_id != u.snapshot_id)
        )
    raise TypeError(f"apply_updates does not apply {type(u).__name__}")


def _set_ref(m: TableMetadata, u: SetSnapshotRef, now_ms: int) -> TableMetadata:
    refs = dict(m.refs)
    refs[u.name] = u.ref
    if u.name != MAIN_BRANCH:
        return m.with_changes(refs=refs)
    snap = m.snapshot_by_id(u.ref.snapshot_id)
    entry = SnapshotLogEntry(snap.timestamp_ms if snap else now_ms, u.ref.snapshot_id)
    return m.with_changes(
        current_snapshot_id=u.ref.snapshot_id, refs=refs, snapshot_log=m.snapshot_log + (entry,)
    )
