"""Server-side application of updateTable requirements and updates (pure, no I/O)."""

from __future__ import annotations

import pytest

from calving.commit.errors import CommitConflictError, InvalidUpdateError, SchemaError
from calving.commit.spec.metadata import parse_metadata
from calving.commit.spec.update_json import changes_from_json as parse_changes
from calving.commit.spec.update_json import update_from_json as parse_update
from calving.ingest.serve.apply import apply_changes, empty_metadata
from calving.ingest.serve.documents import metadata_bytes
from calving.ingest.serve.errors import RestError, rest_error_of

SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "type": "long", "required": True},
        {"id": 2, "name": "day", "type": "date", "required": False},
    ],
}
SPEC = {
    "spec-id": 0,
    "fields": [{"source-id": 2, "field-id": 1000, "name": "d", "transform": "day"}],
}
ORDER = {"order-id": 1, "fields": [{"source-id": 1, "transform": "identity", "direction": "asc", "null-order": "nulls-first"}]}  # fmt: skip


def _create(version: int = 2, **extra):
    updates = [
        {"action": "assign-uuid", "uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1"},
        {"action": "upgrade-format-version", "format-version": version},
        {"action": "add-schema", "schema": SCHEMA},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": SPEC},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": ORDER},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        {"action": "set-location", "location": "file:///wh/db/t/"},
        {"action": "set-properties", "updates": {"a": "1"}},
    ]
    return apply_changes(
        empty_metadata(), [parse_update(u) for u in updates], base_location=None, now_ms=1000
    )


def _snapshot(snapshot_id: int, parent: int | None, seq: int, **extra):
    snap = {
        "snapshot-id": snapshot_id,
        "sequence-number": seq,
        "timestamp-ms": 2000 + seq,
        "manifest-list": f"file:///wh/db/t/metadata/snap-{snapshot_id}.avro",
        "summary": {"operation": "append"},
        **extra,
    }
    if parent is not None:
        snap["parent-snapshot-id"] = parent
    return {"action": "add-snapshot", "snapshot": snap}


def _main(snapshot_id: int):
    return {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id}  # fmt: skip


def _apply(base, updates, location="file:///wh/db/t/metadata/00000-a.metadata.json"):
    return apply_changes(
        base, [parse_update(u) for u in updates], base_location=location, now_ms=5000
    )


def test_a_create_transaction_resolves_last_added_ids():
    m = _create()
    assert (m.format_version, m.location, m.table_uuid) == (2, "file:///wh/db/t", "9c12d441-03fe-4693-9a96-a0705ddf69c1")  # fmt: skip
    assert (m.current_schema_id, m.default_spec_id, m.default_sort_order_id) == (0, 0, 1)
    assert (m.last_column_id, m.last_partition_id) == (2, 1000)
    assert m.properties == {"a": "1"}


def test_v2_metadata_round_trips_through_calvings_parser():
    m = _apply(_create(), [_snapshot(10, None, 1), _main(10)])
    data = metadata_bytes(m)
    assert b"next-row-id" not in data
    back = parse_metadata(data, "mem")
    assert back.format_version == 2 and back.current_snapshot_id == 10
    assert metadata_bytes(back) == data


def test_v3_snapshots_need_row_ids_and_move_next_row_id():
    base = _create(version=3)
    with pytest.raises(RestError, match="first-row-id"):
        _apply(base, [_snapshot(10, None, 1)])
    m = _apply(base, [_snapshot(10, None, 1, **{"first-row-id": 0, "added-rows": 5}), _main(10)])
    assert m.next_row_id == 5 and m.refs["main"].snapshot_id == 10
    assert parse_metadata(metadata_bytes(m), "mem").format_version == 3


def test_refs_snapshot_log_and_removals():
    m = _apply(_create(), [_snapshot(10, None, 1), _main(10), _snapshot(11, 10, 2), _main(11)])
    assert [e.snapshot_id for e in m.snapshot_log] == [10, 11]
    tagged = _apply(m, [{"action": "set-snapshot-ref", "ref-name": "t", "type": "tag", "snapshot-id": 10}])  # fmt: skip
    assert tagged.refs["t"].ref_type == "tag" and tagged.metadata_log[-1].metadata_file.endswith("a.metadata.json")  # fmt: skip
    pruned = _apply(tagged, [{"action": "remove-snapshots", "snapshot-ids": [10]}])
    assert "t" not in pruned.refs and pruned.current_snapshot_id == 11
    dropped = _apply(pruned, [{"action": "remove-snapshot-ref", "ref-name": "main"}])
    assert dropped.current_snapshot_id is None and "main" not in dropped.refs


def test_stale_or_duplicate_snapshots_are_refused():
    m = _apply(_create(), [_snapshot(10, None, 1), _main(10)])
    with pytest.raises(RestError, match="already exists"):
        _apply(m, [_snapshot(10, None, 2)])
    with pytest.raises(RestError, match="sequence number 1"):
        _apply(m, [_snapshot(11, 10, 1)])
    with pytest.raises(RestError, match="no snapshot with id 99"):
        _apply(m, [_main(99)])


def test_requirements_fail_as_conflicts():
    m = _apply(_create(), [_snapshot(10, None, 1), _main(10)])
    body = {
        "requirements": [
            {"type": "assert-table-uuid", "uuid": m.table_uuid},
            {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 10},
            {"type": "assert-ref-snapshot-id", "ref": "dev", "snapshot-id": None},
            {"type": "assert-last-assigned-partition-id", "last-assigned-partition-id": 1000},
            {"type": "assert-default-sort-order-id", "default-sort-order-id": 1},
        ],
        "updates": [],
    }
    requirements, _ = parse_changes(body)
    for r in requirements:
        r.check(m)
    body["requirements"][1]["snapshot-id"] = 9
    stale, _ = parse_changes(body)
    with pytest.raises(CommitConflictError, match="ref 'main' snapshot id is 10, expected 9"):
        stale[1].check(m)
    assert rest_error_of(CommitConflictError("x"), "r1").status == 409


def test_malformed_requests_are_400():
    for body in (
        {"requirements": [{"type": "assert-nothing"}], "updates": []},
        {"requirements": [], "updates": [{"action": "add-view-version"}]},
        {"requirements": [], "updates": [{"action": "set-current-schema"}]},
        {"requirements": {}, "updates": []},
    ):
        with pytest.raises(InvalidUpdateError) as info:
            parse_changes(body)
        assert rest_error_of(info.value, "r1").status == 400
    with pytest.raises(RestError, match="downgrade"):
        _apply(_create(version=3), [{"action": "upgrade-format-version", "format-version": 2}])
    with pytest.raises(SchemaError):
        _apply(_create(), [{"action": "set-current-schema", "schema-id": 5}])
    assert rest_error_of(SchemaError("x"), "r1").status == 400
