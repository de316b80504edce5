"""A calving commit as an updateTable request: the diff of two metadata versions, and
applying that request on the server gives back the metadata calving built."""

from __future__ import annotations

import dataclasses

from calving.commit.catalog.rest.diff import commit_request
from calving.commit.spec.schema import Schema
from calving.commit.spec.snapshot import Snapshot, SnapshotRef
from calving.commit.spec.types import STRING, NestedField
from calving.commit.spec.update_json import changes_from_json as parse_changes
from calving.commit.spec.updates import (
    AddSchema,
    AddSnapshot,
    RemoveProperties,
    SetCurrentSchema,
    SetProperties,
    apply_updates,
    set_main_ref,
)
from calving.commit.table.table import new_table_metadata
from calving.ingest.serve.apply import apply_changes
from tests.support.tables import EVENTS


def _snapshot(snapshot_id: int, parent: int | None, seq: int, first_row: int) -> Snapshot:
    return Snapshot(snapshot_id, parent, seq, 1000 + seq, f"file:///t/metadata/s{seq}.avro",
                    {"operation": "append"}, 0, first_row, 10)  # fmt: skip


def test_the_diff_applied_server_side_rebuilds_calvings_metadata():
    base = new_table_metadata(EVENTS, "file:///wh/db/t", properties={"gone": "x"})
    base = apply_updates(base, [AddSnapshot(_snapshot(1, None, 1, 0)), set_main_ref(1)],
                         base_location=None, now_ms=2000)  # fmt: skip
    wider = Schema((*EVENTS.fields, NestedField(5, "note", STRING)), 1, EVENTS.identifier_field_ids)
    new = apply_updates(
        base,
        [
            AddSchema(wider, 5),
            SetCurrentSchema(1),
            AddSnapshot(_snapshot(2, 1, 2, 10)),
            set_main_ref(2),
            SetProperties({"calving.ledger.w": "7"}),
            RemoveProperties(("gone",)),
        ],
        base_location="file:///wh/db/t/metadata/00001-a.metadata.json",
        now_ms=3000,
    )
    request = commit_request(base, new)
    kinds = [u["action"] for u in request["updates"]]
    assert kinds == ["add-schema", "set-current-schema", "add-snapshot", "set-snapshot-ref",
                     "set-properties", "remove-properties"]  # fmt: skip
    main = {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 1}
    assert main in request["requirements"]
    assert {"type": "assert-current-schema-id", "current-schema-id": 0} in request["requirements"]
    requirements, updates = parse_changes(request)
    for requirement in requirements:
        requirement.check(base)
    served = apply_changes(base, updates, base_location="file:///wh/db/t/metadata/00001-a.metadata.json", now_ms=3000)  # fmt: skip
    keep = ("schemas", "current_schema_id", "snapshots", "refs", "properties", "next_row_id",
            "last_column_id", "last_sequence_number", "snapshot_log", "metadata_log")  # fmt: skip
    for name in keep:
        assert getattr(served, name) == getattr(new, name), name


def test_only_changed_refs_and_statistics_are_sent():
    base = new_table_metadata(EVENTS, "file:///wh/db/t")
    base = apply_updates(base, [AddSnapshot(_snapshot(1, None, 1, 0)), set_main_ref(1)],
                         base_location=None, now_ms=2000)  # fmt: skip
    tagged = dataclasses.replace(base, refs={**base.refs, "audit": SnapshotRef(1, "tag")})
    request = commit_request(base, tagged)
    assert request["updates"] == [
        {"action": "set-snapshot-ref", "ref-name": "audit", "snapshot-id": 1, "type": "tag"}
    ]
    assert commit_request(tagged, base)["updates"] == [
        {"action": "remove-snapshot-ref", "ref-name": "audit"}
    ]
