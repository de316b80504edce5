"""A calving commit as a REST ``updateTable`` request: the difference between the
metadata a commit started from and the metadata it made, as typed requirements and
updates (``calving.commit.spec.updates``), encoded by ``spec.update_json``.

calving's commit path builds the next metadata locally (``apply_updates``); a REST
catalog wants the changes instead. Requirements pin what the local change was built
on: the table UUID and ``main``'s snapshot (the check-and-put), plus the current
schema, last column id and default spec when the change touches them.
"""

from __future__ import annotations

from typing import Any

from calving.commit.spec.metadata import MAIN_BRANCH, TableMetadata
from calving.commit.spec.update_json import changes_to_json
from calving.commit.spec.updates import (
    AddSchema,
    AddSnapshot,
    AddSortOrder,
    AddSpec,
    AssertCurrentSchemaId,
    AssertDefaultSpecId,
    AssertLastAssignedFieldId,
    AssertRefSnapshotId,
    AssertTableUUID,
    RemoveProperties,
    RemoveSnapshotRef,
    RemoveSnapshots,
    RemoveStatistics,
    Requirement,
    SetCurrentSchema,
    SetDefaultSortOrder,
    SetDefaultSpec,
    SetLocation,
    SetProperties,
    SetSnapshotRef,
    SetStatistics,
    TableUpdate,
    UpgradeFormatVersion,
)


def commit_request(base: TableMetadata, new: TableMetadata) -> dict[str, Any]:
    """The ``CommitTableRequest`` body (without identifier) turning ``base`` into ``new``."""
    return changes_to_json(requirements(base, new), updates(base, new))


def requirements(base: TableMetadata, new: TableMetadata) -> list[Requirement]:
    main = base.refs.get(MAIN_BRANCH)
    out: list[Requirement] = [
        AssertTableUUID(base.table_uuid),
        AssertRefSnapshotId(MAIN_BRANCH, None if main is None else main.snapshot_id),
    ]
    if new.schemas != base.schemas or new.current_schema_id != base.current_schema_id:
        out.append(AssertCurrentSchemaId(base.current_schema_id))
        out.append(AssertLastAssignedFieldId(base.last_column_id))
    if new.partition_specs != base.partition_specs or new.default_spec_id != base.default_spec_id:
        out.append(AssertDefaultSpecId(base.default_spec_id))
    return out


def updates(base: TableMetadata, new: TableMetadata) -> list[TableUpdate]:
    out: list[TableUpdate] = []
    if new.format_version != base.format_version:
        out.append(UpgradeFormatVersion(new.format_version))
    out += _schema_updates(base, new)
    out += _spec_and_order_updates(base, new)
    out += _snapshot_updates(base, new)
    out += _property_updates(base, new)
    out += _statistics_updates(base, new)
    if new.location != base.location:
        out.append(SetLocation(new.location))
    return out


def _schema_updates(base: TableMetadata, new: TableMetadata) -> list[TableUpdate]:
    known = {s.schema_id for s in base.schemas}
    out: list[TableUpdate] = [
        AddSchema(s, max(new.last_column_id, s.highest_field_id))
        for s in new.schemas
        if s.schema_id not in known
    ]
    if new.current_schema_id != base.current_schema_id:
        out.append(SetCurrentSchema(new.current_schema_id))
    return out


def _spec_and_order_updates(base: TableMetadata, new: TableMetadata) -> list[TableUpdate]:
    specs = {s.spec_id for s in base.partition_specs}
    orders = {o.order_id for o in base.sort_orders}
    out: list[TableUpdate] = [AddSpec(s) for s in new.partition_specs if s.spec_id not in specs]
    if new.default_spec_id != base.default_spec_id:
        out.append(SetDefaultSpec(new.default_spec_id))
    out += [AddSortOrder(o) for o in new.sort_orders if o.order_id not in orders]
    if new.default_sort_order_id != base.default_sort_order_id:
        out.append(SetDefaultSortOrder(new.default_sort_order_id))
    return out


def _snapshot_updates(base: TableMetadata, new: TableMetadata) -> list[TableUpdate]:
    before = {s.snapshot_id for s in base.snapshots}
    after = {s.snapshot_id for s in new.snapshots}
    out: list[TableUpdate] = [AddSnapshot(s) for s in new.snapshots if s.snapshot_id not in before]
    out += [
        SetSnapshotRef(name, ref) for name, ref in new.refs.items() if base.refs.get(name) != ref
    ]
    out += [RemoveSnapshotRef(name) for name in base.refs if name not in new.refs]
    removed = before - after
    if removed:
        out.append(RemoveSnapshots(frozenset(removed)))
    return out


def _property_updates(base: TableMetadata, new: TableMetadata) -> list[TableUpdate]:
    changed = {k: v for k, v in new.properties.items() if base.properties.get(k) != v}
    removed = tuple(k for k in base.properties if k not in new.properties)
    out: list[TableUpdate] = []
    if changed:
        out.append(SetProperties(changed))
    if removed:
        out.append(RemoveProperties(removed))
    return out


def _statistics_updates(base: TableMetadata, new: TableMetadata) -> list[TableUpdate]:
    before = {s.snapshot_id: s for s in base.statistics}
    after = {s.snapshot_id: s for s in new.statistics}
    out: list[TableUpdate] = [SetStatistics(s) for sid, s in after.items() if before.get(sid) != s]
    out += [RemoveStatistics(sid) for sid in before if sid not in after]
    return out
