"""A calving commit as a REST ``updateTable`` request: the difference between the
metadata a commit started from and the metadata it made, as requirements + updates.

calving's commit path builds the next metadata locally (``apply_updates``); a REST
catalog wants the changes instead. Requirements pin what the local change was built
on: the table UUID and ``main``'s snapshot (the check-and-put), plus the current
schema, last column id and default spec when the change touches them.
"""

from __future__ import annotations

from typing import Any

from calving.commit.spec.metadata import MAIN_BRANCH, TableMetadata


def commit_request(base: TableMetadata, new: TableMetadata) -> dict[str, Any]:
    return {"requirements": requirements(base, new), "updates": updates(base, new)}


def requirements(base: TableMetadata, new: TableMetadata) -> list[dict[str, Any]]:
    main = base.refs.get(MAIN_BRANCH)
    out: list[dict[str, Any]] = [
        {"type": "assert-table-uuid", "uuid": base.table_uuid},
        {
            "type": "assert-ref-snapshot-id",
            "ref": MAIN_BRANCH,
            "snapshot-id": None if main is None else main.snapshot_id,
        },
    ]
    if new.schemas != base.schemas or new.current_schema_id != base.current_schema_id:
        out.append(
            {"type": "assert-current-schema-id", "current-schema-id": base.current_schema_id}
        )
        out.append(
            {"type": "assert-last-assigned-field-id", "last-assigned-field-id": base.last_column_id}
        )
    if new.partition_specs != base.partition_specs or new.default_spec_id != base.default_spec_id:
        out.append({"type": "assert-default-spec-id", "default-spec-id": base.default_spec_id})
    return out


def updates(base: TableMetadata, new: TableMetadata) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if new.format_version != base.format_version:
        out.append({"action": "upgrade-format-version", "format-version": new.format_version})
    out += _schema_updates(base, new)
    out += _spec_and_order_updates(base, new)
    out += _snapshot_updates(base, new)
    out += _property_updates(base, new)
    out += _statistics_updates(base, new)
    if new.location != base.location:
        out.append({"action": "set-location", "location": new.location})
    return out


def _schema_updates(base: TableMetadata, new: TableMetadata) -> list[dict[str, Any]]:
    known = {s.schema_id for s in base.schemas}
    out: list[dict[str, Any]] = [
        {"action": "add-schema", "schema": s.to_json()}
        for s in new.schemas
        if s.schema_id not in known
    ]
    if new.current_schema_id != base.current_schema_id:
        out.append({"action": "set-current-schema", "schema-id": new.current_schema_id})
    return out


def _spec_and_order_updates(base: TableMetadata, new: TableMetadata) -> list[dict[str, Any]]:
    specs = {s.spec_id for s in base.partition_specs}
    orders = {o.order_id for o in base.sort_orders}
    out: list[dict[str, Any]] = [
        {"action": "add-spec", "spec": s.to_json()}
        for s in new.partition_specs
        if s.spec_id not in specs
    ]
    if new.default_spec_id != base.default_spec_id:
        out.append({"action": "set-default-spec", "spec-id": new.default_spec_id})
    out += [
        {"action": "add-sort-order", "sort-order": o.to_json()}
        for o in new.sort_orders
        if o.order_id not in orders
    ]
    if new.default_sort_order_id != base.default_sort_order_id:
        out.append({"action": "set-default-sort-order", "sort-order-id": new.default_sort_order_id})
    return out


def _snapshot_updates(base: TableMetadata, new: TableMetadata) -> list[dict[str, Any]]:
    before = {s.snapshot_id for s in base.snapshots}
    after = {s.snapshot_id for s in new.snapshots}
    out: list[dict[str, Any]] = [
        {"action": "add-snapshot", "snapshot": s.to_json()}
        for s in new.snapshots
        if s.snapshot_id not in before
    ]
    for name, ref in new.refs.items():
        if base.refs.get(name) != ref:
            out.append({"action": "set-snapshot-ref", "ref-name": name, **ref.to_json()})
    out += [
        {"action": "remove-snapshot-ref", "ref-name": name}
        for name in base.refs
        if name not in new.refs
    ]
    removed = sorted(before - after)
    if removed:
        out.append({"action": "remove-snapshots", "snapshot-ids": removed})
    return out


def _property_updates(base: TableMetadata, new: TableMetadata) -> list[dict[str, Any]]:
    changed = {k: v for k, v in new.properties.items() if base.properties.get(k) != v}
    removed = [k for k in base.properties if k not in new.properties]
    out: list[dict[str, Any]] = []
    if changed:
        out.append({"action": "set-properties", "updates": changed})
    if removed:
        out.append({"action": "remove-properties", "removals": removed})
    return out


def _statistics_updates(base: TableMetadata, new: TableMetadata) -> list[dict[str, Any]]:
    before = {s.snapshot_id: s for s in base.statistics}
    after = {s.snapshot_id: s for s in new.statistics}
    out: list[dict[str, Any]] = [
        {"action": "set-statistics", "statistics": s.to_json()}
        for sid, s in after.items()
        if before.get(sid) != s
    ]
    out += [
        {"action": "remove-statistics", "snapshot-id": sid} for sid in before if sid not in after
    ]
    return out
