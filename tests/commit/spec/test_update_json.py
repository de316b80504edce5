"""The one codec of table updates and requirements: every kind round-trips through its
JSON, and the JSON is the protocol's as pyiceberg (an independent implementation)
encodes and decodes it."""

from __future__ import annotations

import json

import pytest
from pydantic import TypeAdapter
from pyiceberg.table.update import TableRequirement as PyRequirement
from pyiceberg.table.update import TableUpdate as PyUpdate

from calving.commit.errors import InvalidUpdateError
from calving.commit.spec.partition import PartitionSpec
from calving.commit.spec.snapshot import Snapshot, SnapshotRef
from calving.commit.spec.sort_order import SortOrder
from calving.commit.spec.statistics import StatisticsBlob, StatisticsFile
from calving.commit.spec.update_json import (
    REQUIREMENT_TYPES,
    UPDATE_ACTIONS,
    requirement_from_json,
    requirement_to_json,
    update_from_json,
    update_to_json,
)
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
    SetCurrentSchema,
    SetDefaultSortOrder,
    SetDefaultSpec,
    SetLocation,
    SetProperties,
    SetSnapshotRef,
    SetStatistics,
    UpgradeFormatVersion,
    set_main_ref,
)
from tests.support.tables import EVENTS

SNAPSHOT = Snapshot(7, 6, 3, 1700000000000, "file:///t/metadata/snap-7.avro",
                    {"operation": "append"}, 0, 10, 5)  # fmt: skip
STATS = StatisticsFile(7, "file:///t/metadata/stats.puffin", 100, 20,
                       (StatisticsBlob("apache-datasketches-theta-v1", 7, 3, (1,), {"ndv": "4"}),))  # fmt: skip
UPDATES = [
    AssignUUID("9c12d441-03fe-4693-9a96-a0705ddf69c1"),
    UpgradeFormatVersion(3),
    AddSchema(EVENTS, EVENTS.highest_field_id),
    SetCurrentSchema(-1),
    AddSpec(PartitionSpec(1, ())),
    SetDefaultSpec(1),
    AddSortOrder(SortOrder(0, ())),
    SetDefaultSortOrder(0),
    AddSnapshot(SNAPSHOT),
    set_main_ref(7),
    SetSnapshotRef("audit", SnapshotRef(7, "tag", {"max-ref-age-ms": 1000})),
    RemoveSnapshotRef("audit"),
    RemoveSnapshots(frozenset({3, 4})),
    SetLocation("s3://bucket/wh/db/t"),
    SetProperties({"a": "1", "write.metadata.path": "s3://bucket/m"}),
    RemoveProperties(("a", "b")),
    SetStatistics(STATS),
    RemoveStatistics(7),
]
REQUIREMENTS = [
    AssertCreate(),
    AssertTableUUID("9c12d441-03fe-4693-9a96-a0705ddf69c1"),
    AssertRefSnapshotId("main", 7),
    AssertRefSnapshotId("dev", None),
    AssertCurrentSchemaId(0),
    AssertLastAssignedFieldId(4),
    AssertLastAssignedPartitionId(1000),
    AssertDefaultSpecId(0),
    AssertDefaultSortOrderId(0),
]


def test_every_kind_is_covered():
    assert {type(u) for u in UPDATES} == set(UPDATE_ACTIONS)
    assert {type(r) for r in REQUIREMENTS} == set(REQUIREMENT_TYPES)


@pytest.mark.parametrize("update", UPDATES, ids=lambda u: type(u).__name__)
def test_updates_round_trip_and_match_pyiceberg(update):
    obj = json.loads(json.dumps(update_to_json(update)))
    assert update_from_json(obj) == update
    theirs = TypeAdapter(PyUpdate).validate_python(obj)  # pyiceberg reads our JSON
    again = json.loads(theirs.model_dump_json(by_alias=True, exclude_none=True))
    assert update_from_json(again) == update  # and we read pyiceberg's JSON


@pytest.mark.parametrize("requirement", REQUIREMENTS, ids=lambda r: type(r).__name__)
def test_requirements_round_trip_and_match_pyiceberg(requirement):
    obj = requirement_to_json(requirement)
    assert requirement_from_json(obj) == requirement
    theirs = TypeAdapter(PyRequirement).validate_python(obj)
    again = json.loads(theirs.model_dump_json(by_alias=True))
    assert requirement_from_json(again) == requirement


@pytest.mark.parametrize(
    "obj",
    [
        {"action": "add-view-version"},
        {"action": "set-current-schema"},
        {"action": "set-current-schema", "schema-id": "1"},
        {"action": "set-current-schema", "schema-id": True},
        {"action": "remove-snapshots", "snapshot-ids": 5},
        {"action": "set-properties", "updates": {"a": 1}},
        {"action": "add-schema", "schema": {"type": "struct", "fields": [[]]}},
        ["not", "an", "object"],
    ],
)
def test_malformed_updates_are_typed_errors(obj):
    with pytest.raises(InvalidUpdateError):
        update_from_json(obj)
