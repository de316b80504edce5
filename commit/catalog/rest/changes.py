"""``updateTable`` requirements and updates: JSON -> values.

Updates calving's own commits use are the ``calving.commit.table.updates`` values; the
rest of the protocol's table updates (create transactions, refs, specs, sort orders,
location, format version) are defined here. Unknown actions or requirement types are a
400, as the spec requires. Nested objects are parsed by ``calving.commit.spec``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from calving.commit.catalog.rest.errors import RestError, bad_request
from calving.commit.errors import CalvingError, CommitConflictError
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.partition import PartitionSpec
from calving.commit.spec.schema import Schema
from calving.commit.spec.snapshot import Snapshot, SnapshotRef
from calving.commit.spec.sort_order import SortOrder
from calving.commit.spec.statistics import statistics_from_json
from calving.commit.table.updates import (
    AddSchema,
    AddSnapshot,
    AssertCurrentSchemaId,
    AssertTableUUID,
    RemoveProperties,
    RemoveSnapshots,
    RemoveStatistics,
    SetCurrentSchema,
    SetProperties,
    SetStatistics,
    TableUpdate,
)

LAST_ADDED = (
    -1
)  # set-current-schema / set-default-spec / set-default-sort-order: "the one just added"


@dataclass(frozen=True)
class AssignUUID:
    uuid: str


@dataclass(frozen=True)
class UpgradeFormatVersion:
    format_version: int


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
class SetSnapshotRef:
    name: str
    ref: SnapshotRef


@dataclass(frozen=True)
class RemoveSnapshotRef:
    name: str


@dataclass(frozen=True)
class SetLocation:
    location: str


RestUpdate = (
    TableUpdate
    | AssignUUID
    | UpgradeFormatVersion
    | AddSpec
    | SetDefaultSpec
    | AddSortOrder
    | SetDefaultSortOrder
    | SetSnapshotRef
    | RemoveSnapshotRef
    | SetLocation
)


# ---------------------------------------------------------------- requirements


def _conflict(what: str, expected: object, found: object) -> CommitConflictError:
    return CommitConflictError(f"requirement failed: {what} is {found}, expected {expected}")


@dataclass(frozen=True)
class AssertCreate:
    """The table must not exist; checked by the service, which knows that."""

    def check(self, base: TableMetadata) -> None:
        raise CommitConflictError("requirement failed: the table already exists")


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
class AssertIntField:
    """assert-last-assigned-field-id, -last-assigned-partition-id, -default-spec-id,
    -default-sort-order-id: one integer of the metadata must equal ``expected``."""

    what: str
    attribute: str
    expected: int

    def check(self, base: TableMetadata) -> None:
        found = getattr(base, self.attribute)
        if found != self.expected:
            raise _conflict(self.what, self.expected, found)


RestRequirement = (
    AssertTableUUID | AssertCurrentSchemaId | AssertCreate | AssertRefSnapshotId | AssertIntField
)

_INT_REQUIREMENTS = {
    "assert-last-assigned-field-id": ("last-assigned-field-id", "last_column_id"),
    "assert-last-assigned-partition-id": ("last-assigned-partition-id", "last_partition_id"),
    "assert-default-spec-id": ("default-spec-id", "default_spec_id"),
    "assert-default-sort-order-id": ("default-sort-order-id", "default_sort_order_id"),
}


def parse_requirement(obj: Any) -> RestRequirement:
    kind = _kind(obj, "type", "requirement")
    try:
        if kind == "assert-create":
            return AssertCreate()
        if kind == "assert-table-uuid":
            return AssertTableUUID(str(obj["uuid"]))
        if kind == "assert-current-schema-id":
            return AssertCurrentSchemaId(int(obj["current-schema-id"]))
        if kind == "assert-ref-snapshot-id":
            snapshot_id = obj["snapshot-id"]
            return AssertRefSnapshotId(
                str(obj["ref"]), None if snapshot_id is None else int(snapshot_id)
            )
        if kind in _INT_REQUIREMENTS:
            key, attribute = _INT_REQUIREMENTS[kind]
            return AssertIntField(key, attribute, int(obj[key]))
    except (KeyError, TypeError, ValueError) as exc:
        raise bad_request(f"requirement {kind}: missing or malformed {exc}") from None
    raise bad_request(f"unknown requirement type {kind!r}")


# ---------------------------------------------------------------- updates


def _add_schema(obj: Mapping[str, Any]) -> RestUpdate:
    schema = Schema.from_json(dict(obj["schema"]))
    last = obj.get("last-column-id")
    return AddSchema(schema, schema.highest_field_id if last is None else int(last))


def _set_ref(obj: Mapping[str, Any]) -> RestUpdate:
    fields = {k: v for k, v in obj.items() if k not in ("action", "ref-name")}
    return SetSnapshotRef(str(obj["ref-name"]), SnapshotRef.from_json(fields))


def _set_statistics(obj: Mapping[str, Any]) -> RestUpdate:
    return SetStatistics(statistics_from_json(obj["statistics"], "set-statistics"))


_UPDATES: dict[str, Callable[[Mapping[str, Any]], RestUpdate]] = {
    "assign-uuid": lambda o: AssignUUID(str(o["uuid"])),
    "upgrade-format-version": lambda o: UpgradeFormatVersion(int(o["format-version"])),
    "add-schema": _add_schema,
    "set-current-schema": lambda o: SetCurrentSchema(int(o["schema-id"])),
    "add-spec": lambda o: AddSpec(PartitionSpec.from_json(_with_id(o["spec"], "spec-id", 0))),
    "set-default-spec": lambda o: SetDefaultSpec(int(o["spec-id"])),
    "add-sort-order": lambda o: AddSortOrder(
        SortOrder.from_json(
            _with_id(o["sort-order"], "order-id", 1 if o["sort-order"]["fields"] else 0)
        )
    ),
    "set-default-sort-order": lambda o: SetDefaultSortOrder(int(o["sort-order-id"])),
    "add-snapshot": lambda o: AddSnapshot(Snapshot.from_json(o["snapshot"], "add-snapshot")),
    "set-snapshot-ref": _set_ref,
    "remove-snapshots": lambda o: RemoveSnapshots(frozenset(int(i) for i in o["snapshot-ids"])),
    "remove-snapshot-ref": lambda o: RemoveSnapshotRef(str(o["ref-name"])),
    "set-location": lambda o: SetLocation(str(o["location"])),
    "set-properties": lambda o: SetProperties({str(k): str(v) for k, v in o["updates"].items()}),
    "remove-properties": lambda o: RemoveProperties(tuple(str(k) for k in o["removals"])),
    "set-statistics": _set_statistics,
    "remove-statistics": lambda o: RemoveStatistics(int(o["snapshot-id"])),
}


def _with_id(obj: Any, key: str, default: int) -> dict[str, Any]:
    """Specs and sort orders in a request may omit their id; applying them assigns a
    free one anyway (see ``apply``)."""
    out = dict(obj)
    out.setdefault(key, default)
    return out


def parse_update(obj: Any) -> RestUpdate:
    action = _kind(obj, "action", "update")
    parse = _UPDATES.get(action)
    if parse is None:
        raise bad_request(f"unknown or unsupported table update {action!r}")
    try:
        return parse(obj)
    except RestError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, CalvingError) as exc:
        raise bad_request(f"update {action}: missing or malformed {exc}") from None


def _kind(obj: Any, key: str, what: str) -> str:
    if not isinstance(obj, Mapping) or not isinstance(obj.get(key), str):
        raise bad_request(f"a {what} must be a JSON object with a string {key!r}")
    return str(obj[key])


def parse_changes(obj: Any) -> tuple[tuple[RestRequirement, ...], tuple[RestUpdate, ...]]:
    """A ``CommitTableRequest``'s requirements and updates."""
    if not isinstance(obj, Mapping):
        raise bad_request("the commit request must be a JSON object")
    requirements, updates = obj.get("requirements", []), obj.get("updates")
    if not isinstance(requirements, list) or not isinstance(updates, list):
        raise bad_request("'requirements' and 'updates' must be lists")
    return (
        tuple(parse_requirement(r) for r in requirements),
        tuple(parse_update(u) for u in updates),
    )
