"""The one JSON encoder and decoder of table updates and requirements: the Iceberg REST
protocol's ``TableUpdate`` (``"action"``) and ``TableRequirement`` (``"type"``) objects.

calving's REST client encodes with ``update_to_json`` / ``requirement_to_json``;
``calving catalog serve`` decodes with ``update_from_json`` / ``requirement_from_json``
(``changes_from_json`` for a whole ``CommitTableRequest``). Anything the decoder cannot
take (unknown action or type, a missing or malformed field, a nested schema that does
not parse) is an ``InvalidUpdateError`` naming the action: the server answers it 400.
Nested objects (schemas, specs, sort orders, snapshots, statistics) are parsed by their
own ``calving.commit.spec`` modules. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from calving.commit.errors import CalvingError, InvalidUpdateError
from calving.commit.spec.partition import PartitionSpec
from calving.commit.spec.schema import Schema
from calving.commit.spec.snapshot import Snapshot, SnapshotRef
from calving.commit.spec.sort_order import SortOrder
from calving.commit.spec.statistics import statistics_from_json
from calving.commit.spec.updates import (
    AddSchema,
    AddSnapshot,
    AddSortOrder,
    AddSpec,
    AssertCreate,
    AssertCurrentSchemaId,
    AssertDefaultSortOrderId,
    AssertDefaultSpecId,
    AssertLastAssignedFieldId,
    AssertLastAssignedPartitionId,
    AssertRefSnapshotId,
    AssertTableUUID,
    AssignUUID,
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

Json = dict[str, Any]

# ---------------------------------------------------------------- encoding


def update_to_json(u: TableUpdate) -> Json:
    """``u`` as the protocol's ``TableUpdate`` object."""
    return {"action": UPDATE_ACTIONS[type(u)], **_update_fields(u)}


def _update_fields(u: TableUpdate) -> Json:
    if isinstance(u, AssignUUID):
        return {"uuid": u.uuid}
    if isinstance(u, UpgradeFormatVersion):
        return {"format-version": u.format_version}
    if isinstance(u, AddSchema):
        return {"schema": u.schema.to_json(), "last-column-id": u.last_column_id}
    if isinstance(u, SetCurrentSchema):
        return {"schema-id": u.schema_id}
    if isinstance(u, AddSpec):
        return {"spec": u.spec.to_json()}
    if isinstance(u, SetDefaultSpec):
        return {"spec-id": u.spec_id}
    if isinstance(u, AddSortOrder):
        return {"sort-order": u.sort_order.to_json()}
    if isinstance(u, SetDefaultSortOrder):
        return {"sort-order-id": u.order_id}
    if isinstance(u, AddSnapshot):
        return {"snapshot": u.snapshot.to_json()}
    if isinstance(u, SetSnapshotRef):
        return {"ref-name": u.name, **u.ref.to_json()}
    if isinstance(u, RemoveSnapshotRef):
        return {"ref-name": u.name}
    if isinstance(u, RemoveSnapshots):
        return {"snapshot-ids": sorted(u.snapshot_ids)}
    if isinstance(u, SetLocation):
        return {"location": u.location}
    if isinstance(u, SetProperties):
        return {"updates": dict(u.updates)}
    if isinstance(u, RemoveProperties):
        return {"removals": list(u.keys)}
    if isinstance(u, SetStatistics):
        return {"statistics": u.statistics.to_json()}
    return {"snapshot-id": u.snapshot_id}  # RemoveStatistics, the last kind


def requirement_to_json(r: Requirement) -> Json:
    """``r`` as the protocol's ``TableRequirement`` object."""
    out: Json = {"type": REQUIREMENT_TYPES[type(r)]}
    if isinstance(r, AssertTableUUID):
        out["uuid"] = r.uuid
    elif isinstance(r, AssertRefSnapshotId):
        out.update({"ref": r.ref, "snapshot-id": r.snapshot_id})
    elif isinstance(r, AssertCurrentSchemaId):
        out["current-schema-id"] = r.schema_id
    elif isinstance(r, AssertLastAssignedFieldId):
        out["last-assigned-field-id"] = r.last_assigned_field_id
    elif isinstance(r, AssertLastAssignedPartitionId):
        out["last-assigned-partition-id"] = r.last_assigned_partition_id
    elif isinstance(r, AssertDefaultSpecId):
        out["default-spec-id"] = r.spec_id
    elif isinstance(r, AssertDefaultSortOrderId):
        out["default-sort-order-id"] = r.order_id
    return out


def changes_to_json(
    requirements: tuple[Requirement, ...] | list[Requirement],
    updates: tuple[TableUpdate, ...] | list[TableUpdate],
) -> Json:
    """A ``CommitTableRequest`` body (without the identifier)."""
    return {
        "requirements": [requirement_to_json(r) for r in requirements],
        "updates": [update_to_json(u) for u in updates],
    }


# ---------------------------------------------------------------- decoding


def _int(value: Any) -> int:
    """A JSON integer (not a bool, float or string)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    if not -(2**63) <= value < 2**63:
        raise ValueError("integer out of the 64-bit range")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _obj(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a JSON object, got {type(value).__name__}")
    return dict(value)


def _string_map(value: Any) -> dict[str, str]:
    return {_str(k): _str(v) for k, v in _obj(value).items()}


def _with_id(obj: Any, key: str, default: int) -> dict[str, Any]:
    """Specs and sort orders in a request may omit their id (the server assigns one)."""
    out = _obj(obj)
    out.setdefault(key, default)
    return out


def _add_schema(o: Mapping[str, Any]) -> TableUpdate:
    schema = Schema.from_json(_obj(o["schema"]))
    last = o.get("last-column-id")
    return AddSchema(schema, schema.highest_field_id if last is None else _int(last))


def _add_sort_order(o: Mapping[str, Any]) -> TableUpdate:
    obj = _obj(o["sort-order"])
    return AddSortOrder(SortOrder.from_json(_with_id(obj, "order-id", 1 if obj["fields"] else 0)))


def _set_ref(o: Mapping[str, Any]) -> TableUpdate:
    fields = {k: v for k, v in o.items() if k not in ("action", "ref-name")}
    _int(fields.get("snapshot-id"))
    _str(fields.get("type", "branch"))
    return SetSnapshotRef(_str(o["ref-name"]), SnapshotRef.from_json(fields))


def _snapshot_ids(o: Mapping[str, Any]) -> TableUpdate:
    ids = o["snapshot-ids"]
    if not isinstance(ids, list):
        raise TypeError("snapshot-ids must be a list")
    return RemoveSnapshots(frozenset(_int(i) for i in ids))


def _removals(o: Mapping[str, Any]) -> TableUpdate:
    keys = o["removals"]
    if not isinstance(keys, list):
        raise TypeError("removals must be a list")
    return RemoveProperties(tuple(_str(k) for k in keys))


_UPDATE_DECODERS: dict[str, Callable[[Mapping[str, Any]], TableUpdate]] = {
    "assign-uuid": lambda o: AssignUUID(_str(o["uuid"])),
    "upgrade-format-version": lambda o: UpgradeFormatVersion(_int(o["format-version"])),
    "add-schema": _add_schema,
    "set-current-schema": lambda o: SetCurrentSchema(_int(o["schema-id"])),
    "add-spec": lambda o: AddSpec(PartitionSpec.from_json(_with_id(o["spec"], "spec-id", 0))),
    "set-default-spec": lambda o: SetDefaultSpec(_int(o["spec-id"])),
    "add-sort-order": _add_sort_order,
    "set-default-sort-order": lambda o: SetDefaultSortOrder(_int(o["sort-order-id"])),
    "add-snapshot": lambda o: AddSnapshot(Snapshot.from_json(_obj(o["snapshot"]), "add-snapshot")),
    "set-snapshot-ref": _set_ref,
    "remove-snapshot-ref": lambda o: RemoveSnapshotRef(_str(o["ref-name"])),
    "remove-snapshots": _snapshot_ids,
    "set-location": lambda o: SetLocation(_str(o["location"])),
    "set-properties": lambda o: SetProperties(_string_map(o["updates"])),
    "remove-properties": _removals,
    "set-statistics": lambda o: SetStatistics(
        statistics_from_json(_obj(o["statistics"]), "set-statistics")
    ),
    "remove-statistics": lambda o: RemoveStatistics(_int(o["snapshot-id"])),
}


def _optional_int(value: Any) -> int | None:
    return None if value is None else _int(value)


_REQUIREMENT_DECODERS: dict[str, Callable[[Mapping[str, Any]], Requirement]] = {
    "assert-create": lambda o: AssertCreate(),
    "assert-table-uuid": lambda o: AssertTableUUID(_str(o["uuid"])),
    "assert-ref-snapshot-id": lambda o: AssertRefSnapshotId(
        _str(o["ref"]), _optional_int(o["snapshot-id"])
    ),
    "assert-current-schema-id": lambda o: AssertCurrentSchemaId(_int(o["current-schema-id"])),
    "assert-last-assigned-field-id": lambda o: AssertLastAssignedFieldId(
        _int(o["last-assigned-field-id"])
    ),
    "assert-last-assigned-partition-id": lambda o: AssertLastAssignedPartitionId(
        _int(o["last-assigned-partition-id"])
    ),
    "assert-default-spec-id": lambda o: AssertDefaultSpecId(_int(o["default-spec-id"])),
    "assert-default-sort-order-id": lambda o: AssertDefaultSortOrderId(
        _int(o["default-sort-order-id"])
    ),
}

UPDATE_ACTIONS: dict[type, str] = {
    AssignUUID: "assign-uuid",
    UpgradeFormatVersion: "upgrade-format-version",
    AddSchema: "add-schema",
    SetCurrentSchema: "set-current-schema",
    AddSpec: "add-spec",
    SetDefaultSpec: "set-default-spec",
    AddSortOrder: "add-sort-order",
    SetDefaultSortOrder: "set-default-sort-order",
    AddSnapshot: "add-snapshot",
    SetSnapshotRef: "set-snapshot-ref",
    RemoveSnapshotRef: "remove-snapshot-ref",
    RemoveSnapshots: "remove-snapshots",
    SetLocation: "set-location",
    SetProperties: "set-properties",
    RemoveProperties: "remove-properties",
    SetStatistics: "set-statistics",
    RemoveStatistics: "remove-statistics",
}

REQUIREMENT_TYPES: dict[type, str] = {
    AssertCreate: "assert-create",
    AssertTableUUID: "assert-table-uuid",
    AssertRefSnapshotId: "assert-ref-snapshot-id",
    AssertCurrentSchemaId: "assert-current-schema-id",
    AssertLastAssignedFieldId: "assert-last-assigned-field-id",
    AssertLastAssignedPartitionId: "assert-last-assigned-partition-id",
    AssertDefaultSpecId: "assert-default-spec-id",
    AssertDefaultSortOrderId: "assert-default-sort-order-id",
}

#: Errors a malformed nested object raises while being parsed.
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, CalvingError, RecursionError)


def _kind(obj: Any, key: str, what: str) -> str:
    if not isinstance(obj, Mapping) or not isinstance(obj.get(key), str):
        raise InvalidUpdateError(f"a {what} must be a JSON object with a string {key!r}")
    return str(obj[key])


def _decode(obj: Any, key: str, what: str, decoders: Mapping[str, Callable[[Any], Any]]) -> Any:
    kind = _kind(obj, key, what)
    decode = decoders.get(kind)
    if decode is None:
        raise InvalidUpdateError(f"unknown or unsupported {what} {kind[:64]!r}")
    try:
        return decode(obj)
    except InvalidUpdateError:
        raise
    except _MALFORMED as exc:
        detail = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise InvalidUpdateError(f"{what} {kind}: malformed: {detail[:200]}") from None


def update_from_json(obj: Any) -> TableUpdate:
    """A protocol ``TableUpdate`` object as its value (``InvalidUpdateError``)."""
    result: TableUpdate = _decode(obj, "action", "table update", _UPDATE_DECODERS)
    return result


def requirement_from_json(obj: Any) -> Requirement:
    """A protocol ``TableRequirement`` object as its value (``InvalidUpdateError``)."""
    result: Requirement = _decode(obj, "type", "requirement", _REQUIREMENT_DECODERS)
    return result


def changes_from_json(obj: Any) -> tuple[tuple[Requirement, ...], tuple[TableUpdate, ...]]:
    """A ``CommitTableRequest``'s requirements and updates."""
    if not isinstance(obj, Mapping):
        raise InvalidUpdateError("the commit request must be a JSON object")
    requirements, updates = obj.get("requirements", []), obj.get("updates")
    if not isinstance(requirements, list) or not isinstance(updates, list):
        raise InvalidUpdateError("'requirements' and 'updates' must be lists")
    return (
        tuple(requirement_from_json(r) for r in requirements),
        tuple(update_from_json(u) for u in updates),
    )
