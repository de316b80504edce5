"""Table metadata JSON: byte-exact round trips, v1/v2 reading, typed corrupt errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.errors import CorruptFileError
from calving.commit.spec.metadata import parse_metadata, serialize_metadata, task_metadata_json
from calving.commit.spec.partition import PartitionSpec
from calving.commit.spec.snapshot import MetadataLogEntry, Snapshot, SnapshotLogEntry, SnapshotRef
from calving.commit.table.table import new_table_metadata
from tests.commit.spec.strategies import schemas

ids = st.integers(1, 2**62)
props = st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=20), max_size=4)


@st.composite
def metadata(draw):
    schema = draw(schemas())
    m = new_table_metadata(schema, "file:///w/db/t", PartitionSpec(0), properties=draw(props))
    n = draw(st.integers(0, 4))
    snap_ids = draw(st.lists(ids, min_size=n, max_size=n, unique=True))
    snaps, parent = [], None
    for i, sid in enumerate(snap_ids):
        summary = {"operation": draw(st.sampled_from(["append", "overwrite", "delete"]))}
        summary.update(draw(props))
        snaps.append(
            Snapshot(
                sid,
                parent,
                i + 1,
                1_700_000_000_000 + i,
                f"file:///w/db/t/metadata/snap-{sid}.avro",
                summary,
                schema.schema_id,
                i * 10,
                10,
            )
        )
        parent = sid
    m = m.with_changes(
        snapshots=tuple(snaps),
        current_snapshot_id=parent,
        refs={"main": SnapshotRef(parent)} if parent else {},
        last_sequence_number=n,
        next_row_id=n * 10,
        snapshot_log=tuple(SnapshotLogEntry(s.timestamp_ms, s.snapshot_id) for s in snaps),
        metadata_log=tuple(
            MetadataLogEntry(1_700_000_000_000 + i, f"file:///w/m{i}.json")
            for i in range(draw(st.integers(0, 3)))
        ),
        schemas=(schema,),
        current_schema_id=schema.schema_id,
    )
    return m


@settings(max_examples=100, deadline=None)
@given(metadata())
def test_metadata_round_trips_byte_for_byte(m):
    data = serialize_metadata(m)
    parsed = parse_metadata(data, "m.json")
    assert parsed == m
    assert serialize_metadata(parsed) == data


@settings(max_examples=150, deadline=None)
@given(metadata(), st.data())
def test_corrupt_metadata_is_a_typed_error_naming_the_file(m, data):
    raw = bytearray(serialize_metadata(m))
    cut = data.draw(st.integers(0, len(raw) - 1))
    mutated = bytes(raw[:cut])  # truncation
    try:
        parsed = parse_metadata(mutated, "file:///w/bad.metadata.json")
    except CorruptFileError as exc:
        assert "bad.metadata.json" in str(exc)
    else:
        assert parsed is not None


@pytest.mark.parametrize("version", [1, 2])
def test_reads_pyiceberg_written_older_versions(tmp_path, version):
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog("v", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    cat.create_namespace("n")
    t = cat.create_table(
        "n.t", schema=pa.schema([("a", pa.int64())]), properties={"format-version": str(version)}
    )
    t.append(pa.table({"a": [1, 2, 3]}))
    loc = cat.load_table("n.t").metadata_location
    with open(loc.replace("file://", ""), "rb") as f:
        parsed = parse_metadata(f.read(), loc)
    assert parsed.format_version == version
    assert parsed.current_snapshot.summary["added-records"] == "3"
    assert parsed.schema.find_field_by_name("a") is not None


def test_missing_required_keys_are_named():
    with pytest.raises(CorruptFileError, match="m.json: table metadata lacks"):
        parse_metadata(json.dumps({"format-version": 3, "table-uuid": "x"}).encode(), "m.json")
    with pytest.raises(CorruptFileError, match="not valid JSON"):
        parse_metadata(b"\xff\xfe", "m.json")


@settings(max_examples=100, deadline=None)
@given(metadata())
def test_task_metadata_keeps_what_writers_need_and_no_history(m):
    """What a writer task gets: the same schemas, specs, sort orders, location, properties
    and row-id counters, no snapshot, ref, statistics or log, so its size does not grow
    with the table's commits."""
    task = parse_metadata(task_metadata_json(m), "m.json")
    assert task.schema == m.schema and task.schemas == m.schemas
    assert task.spec == m.spec and task.partition_specs == m.partition_specs
    assert task.sort_orders == m.sort_orders and task.location == m.location
    assert task.properties == m.properties and task.table_uuid == m.table_uuid
    assert task.last_column_id == m.last_column_id
    assert task.current_snapshot_id is None and task.current_snapshot is None
    assert task.snapshots == () and task.refs == {} and task.snapshot_log == ()
    assert task.metadata_log == () and task.statistics == ()
    history_free = m.with_changes(
        snapshots=(), current_snapshot_id=None, refs={}, snapshot_log=(), metadata_log=()
    )
    assert task_metadata_json(m) == task_metadata_json(history_free)
