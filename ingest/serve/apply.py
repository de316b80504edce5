"""Applying ``updateTable`` updates to table metadata, server side (pure).

The updates calving's own commits use go through ``calving.commit.spec.updates
.apply_updates``; this module adds the rest of the protocol (create transactions,
refs other than ``main``, specs, sort orders, location, format version) and the
checks the reference implementation makes, so a bad request is a 400 and never a
broken table. ``-1`` as a schema, spec or sort order id means "the one added last in
this request".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from calving.commit.spec.metadata import MAIN_BRANCH, TableMetadata
from calving.commit.spec.updates import (
    LAST_ADDED,
    AddSchema,
    AddSnapshot,
    AddSortOrder,
    AddSpec,
    AssignUUID,
    RemoveSnapshotRef,
    RemoveSnapshots,
    SetCurrentSchema,
    SetDefaultSortOrder,
    SetDefaultSpec,
    SetLocation,
    SetSnapshotRef,
    TableUpdate,
    UpgradeFormatVersion,
    apply_updates,
)
from calving.ingest.serve.errors import bad_request

MAX_FORMAT_VERSION = 3


def empty_metadata() -> TableMetadata:
    """The base a create transaction's updates apply to: no schema, spec or order yet."""
    return TableMetadata(
        format_version=2,
        table_uuid="",
        location="",
        last_sequence_number=0,
        last_updated_ms=0,
        last_column_id=0,
        schemas=(),
        current_schema_id=LAST_ADDED,
        partition_specs=(),
        default_spec_id=LAST_ADDED,
        last_partition_id=999,
        sort_orders=(),
        default_sort_order_id=LAST_ADDED,
    )


@dataclasses.dataclass
class _Added:
    """Ids added by this request, for ``-1`` references."""

    schema: int | None = None
    spec: int | None = None
    order: int | None = None


def apply_changes(
    base: TableMetadata,
    updates: Sequence[TableUpdate],
    *,
    base_location: str | None,
    now_ms: int,
) -> TableMetadata:
    """The metadata after ``updates``; ``base_location`` (None for a new table) goes
    into the metadata log. Raises a 400 ``RestError`` for an invalid update."""
    m, added = base, _Added()
    for u in updates:
        m = _apply_one(m, u, added, now_ms)
    m = m.with_changes(last_updated_ms=base.last_updated_ms)
    m = apply_updates(m, (), base_location=base_location, now_ms=now_ms)
    check_complete(m)
    return m


def _apply_one(m: TableMetadata, u: TableUpdate, added: _Added, now_ms: int) -> TableMetadata:
    if isinstance(u, AssignUUID):
        if m.table_uuid and m.table_uuid != u.uuid:
            raise bad_request(f"cannot reassign table UUID {m.table_uuid} to {u.uuid}")
        return m.with_changes(table_uuid=u.uuid)
    if isinstance(u, UpgradeFormatVersion):
        return _upgrade(m, u.format_version)
    if isinstance(u, SetLocation):
        return m.with_changes(location=u.location.rstrip("/"))
    if isinstance(u, AddSchema):
        return _add_schema(m, u, added)
    if isinstance(u, SetCurrentSchema):
        schema_id = _resolve(u.schema_id, added.schema, "schema")
        m.schema_by_id(schema_id)  # SchemaError (400) if absent
        return m.with_changes(current_schema_id=schema_id)
    if isinstance(u, AddSpec):
        return _add_spec(m, u, added)
    if isinstance(u, SetDefaultSpec):
        spec_id = _resolve(u.spec_id, added.spec, "partition spec")
        m.spec_by_id(spec_id)
        return m.with_changes(default_spec_id=spec_id)
    if isinstance(u, AddSortOrder):
        return _add_sort_order(m, u, added)
    if isinstance(u, SetDefaultSortOrder):
        order_id = _resolve(u.order_id, added.order, "sort order")
        if all(o.order_id != order_id for o in m.sort_orders):
            raise bad_request(f"no sort order with id {order_id}")
        return m.with_changes(default_sort_order_id=order_id)
    if isinstance(u, AddSnapshot):
        _check_new_snapshot(m, u)
    elif isinstance(u, SetSnapshotRef):
        return _set_ref(m, u, now_ms)
    elif isinstance(u, RemoveSnapshotRef):
        return _remove_ref(m, u.name)
    elif isinstance(u, RemoveSnapshots):
        return _remove_snapshots(m, u, now_ms)
    try:
        return apply_updates(m, (u,), base_location=None, now_ms=now_ms)
    except ValueError as exc:
        raise bad_request(str(exc)) from None


def _resolve(requested: int, last_added: int | None, what: str) -> int:
    if requested != LAST_ADDED:
        return requested
    if last_added is None:
        raise bad_request(f"{what} id -1 (the last added) but this request added none")
    return last_added


def _upgrade(m: TableMetadata, version: int) -> TableMetadata:
    if version > MAX_FORMAT_VERSION:
        raise bad_request(f"format-version {version} is not supported (at most 3)")
    if version < m.format_version:
        raise bad_request(f"cannot downgrade format-version {m.format_version} to {version}")
    next_row_id = m.next_row_id
    if version >= 3 and next_row_id is None:
        next_row_id = 0
    return m.with_changes(format_version=version, next_row_id=next_row_id)


def _add_schema(m: TableMetadata, u: AddSchema, added: _Added) -> TableMetadata:
    schema = u.schema
    for existing in m.schemas:
        same = (existing.fields, existing.identifier_field_ids)
        if same == (schema.fields, schema.identifier_field_ids):
            added.schema = existing.schema_id
            return m
    if any(s.schema_id == schema.schema_id for s in m.schemas) or schema.schema_id < 0:
        new_id = max((s.schema_id for s in m.schemas), default=-1) + 1
        schema = dataclasses.replace(schema, schema_id=new_id)
    added.schema = schema.schema_id
    last = max(m.last_column_id, u.last_column_id, schema.highest_field_id)
    return m.with_changes(schemas=m.schemas + (schema,), last_column_id=last)


def _add_spec(m: TableMetadata, u: AddSpec, added: _Added) -> TableMetadata:
    spec = u.spec
    for existing in m.partition_specs:
        if existing.equivalent(spec):
            added.spec = existing.spec_id
            return m
    if any(s.spec_id == spec.spec_id for s in m.partition_specs) or spec.spec_id < 0:
        new_id = max((s.spec_id for s in m.partition_specs), default=-1) + 1
        spec = dataclasses.replace(spec, spec_id=new_id)
    added.spec = spec.spec_id
    last = max(m.last_partition_id, spec.last_assigned_field_id)
    return m.with_changes(partition_specs=m.partition_specs + (spec,), last_partition_id=last)


def _add_sort_order(m: TableMetadata, u: AddSortOrder, added: _Added) -> TableMetadata:
    order = u.sort_order
    for existing in m.sort_orders:
        if existing.fields == order.fields:
            added.order = existing.order_id
            return m
    if any(o.order_id == order.order_id for o in m.sort_orders):
        new_id = max((o.order_id for o in m.sort_orders), default=0) + 1
        order = dataclasses.replace(order, order_id=new_id)
    added.order = order.order_id
    return m.with_changes(sort_orders=m.sort_orders + (order,))


def _check_new_snapshot(m: TableMetadata, u: AddSnapshot) -> None:
    snap = u.snapshot
    if m.snapshot_by_id(snap.snapshot_id) is not None:
        raise bad_request(f"snapshot {snap.snapshot_id} already exists")
    stale = snap.sequence_number <= m.last_sequence_number and snap.parent_snapshot_id is not None
    if m.format_version >= 2 and stale:
        raise bad_request(
            f"snapshot {snap.snapshot_id} has sequence number {snap.sequence_number}, not "
            f"above the table's last sequence number {m.last_sequence_number}"
        )
    if m.format_version >= 3:
        if snap.first_row_id is None:
            raise bad_request(f"snapshot {snap.snapshot_id} lacks first-row-id (format v3)")
        if snap.first_row_id < (m.next_row_id or 0):
            raise bad_request(
                f"snapshot {snap.snapshot_id} first-row-id {snap.first_row_id} is below the "
                f"table's next-row-id {m.next_row_id}"
            )


def _set_ref(m: TableMetadata, u: SetSnapshotRef, now_ms: int) -> TableMetadata:
    if m.snapshot_by_id(u.ref.snapshot_id) is None:
        raise bad_request(f"ref {u.name!r}: no snapshot with id {u.ref.snapshot_id}")
    if u.ref.ref_type not in ("branch", "tag"):
        raise bad_request(f"ref {u.name!r}: type must be branch or tag, not {u.ref.ref_type!r}")
    if u.name == MAIN_BRANCH and u.ref.ref_type != "branch":
        raise bad_request("ref 'main' must be a branch")
    return apply_updates(m, (u,), base_location=None, now_ms=now_ms).with_changes(
        last_updated_ms=m.last_updated_ms
    )


def _remove_ref(m: TableMetadata, name: str) -> TableMetadata:
    refs = {k: v for k, v in m.refs.items() if k != name}
    if name == MAIN_BRANCH:
        return m.with_changes(refs=refs, current_snapshot_id=None)
    return m.with_changes(refs=refs)


def _remove_snapshots(m: TableMetadata, u: RemoveSnapshots, now_ms: int) -> TableMetadata:
    """As Iceberg: refs to removed snapshots go too (the table's ``main`` included)."""
    m = apply_updates(m, (u,), base_location=None, now_ms=now_ms)
    for name, ref in list(m.refs.items()):
        if ref.snapshot_id in u.snapshot_ids:
            m = _remove_ref(m, name)
    return m


def check_complete(m: TableMetadata) -> None:
    """What every written metadata file needs (400 otherwise)."""
    if not m.location:
        raise bad_request("the table has no location")
    if not m.table_uuid:
        raise bad_request("the table has no UUID")
    if m.format_version < 2:
        raise bad_request(f"format-version {m.format_version} is not served; use 2 or 3")
    m.schema_by_id(m.current_schema_id)
    m.spec_by_id(m.default_spec_id)
    if all(o.order_id != m.default_sort_order_id for o in m.sort_orders):
        raise bad_request(f"no sort order with id {m.default_sort_order_id}")
    for name, ref in m.refs.items():
        if m.snapshot_by_id(ref.snapshot_id) is None:
            raise bad_request(f"ref {name!r} points at missing snapshot {ref.snapshot_id}")
