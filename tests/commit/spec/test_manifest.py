"""Manifests: round trips, Avro layout, inheritance, recorded vectors, corrupt input, and
pyiceberg as the oracle in both directions."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calving.commit.errors import CorruptFileError, SchemaError, UnsupportedFeatureError
from calving.commit.spec.avro_file import read_container, write_container
from calving.commit.spec.avro_schemas import decimal_required_bytes, manifest_entry_schema
from calving.commit.spec.data_file import (
    DataFile,
    EntryStatus,
    FileContent,
    ManifestContent,
    ManifestEntry,
    ManifestFile,
)
from calving.commit.spec.manifest import Manifest, inherit, read_manifest, write_manifest
from calving.commit.spec.types import (
    DATE,
    STRING,
    TIMESTAMP,
    TIMESTAMP_NS,
    TIMESTAMPTZ,
    UUID,
    NestedField,
    StructType,
    decimal,
    fixed,
)
from tests.commit.spec.manifest_strategies import (
    comparable,
    data_files,
    manifest_entries,
    partition_types,
)
from tests.commit.spec.manifest_vectors import (
    FULL_PARTITION,
    MANIFEST_DIR,
    V3_DV_ENTRY,
    VECTOR_PTYPE,
    pyiceberg_write_manifest,
    v3_delete_manifest,
    vector_entries_as_read,
)

SOURCE = "s3://bucket/t/metadata/m0.avro"
SCHEMA_JSON = '{"type":"struct","schema-id":3,"fields":[]}'
PTYPE = StructType((NestedField(1000, "day", DATE), NestedField(1001, "amount", decimal(9, 2))))


def _write(
    entries: list[ManifestEntry] | tuple[ManifestEntry, ...],
    ptype: StructType = PTYPE,
    content: ManifestContent = ManifestContent.DATA,
    **kwargs: Any,
) -> bytes:
    return write_manifest(
        entries,
        schema_json=SCHEMA_JSON,
        partition_spec_json="[]",
        spec_id=kwargs.pop("spec_id", 0),
        partition_type=ptype,
        content=content,
        **kwargs,
    )


def _rewrite(m: Manifest) -> bytes:
    return write_manifest(
        m.entries,
        schema_json=m.schema_json,
        partition_spec_json=m.partition_spec_json,
        spec_id=m.spec_id,
        partition_type=m.partition_type,
        content=m.content,
        format_version=m.format_version,
        sync_marker=m.sync_marker,
    )


def _entry(path: str = "s3://b/d/a.parquet", **changes: Any) -> ManifestEntry:
    data_file = DataFile(FileContent.DATA, path, "PARQUET", (19_000, Decimal("1.25")), 10, 1000)
    status = changes.pop("status", EntryStatus.ADDED)
    return ManifestEntry(status, 5, None, None, replace(data_file, **changes))


# ---------------------------------------------------------------- round trips


@st.composite
def manifests(draw: st.DrawFn) -> tuple[StructType, int, ManifestContent, list[ManifestEntry]]:
    ptype = draw(partition_types())
    spec_id = draw(st.integers(0, 2**31 - 1))
    entries = draw(st.lists(manifest_entries(ptype, spec_id), max_size=5))
    return ptype, spec_id, draw(st.sampled_from(ManifestContent)), entries


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests())
def test_round_trip_values_and_bytes(
    case: tuple[StructType, int, ManifestContent, list[ManifestEntry]],
) -> None:
    ptype, spec_id, content, entries = case
    data = _write(entries, ptype, content, spec_id=spec_id)
    m = read_manifest(data, SOURCE)
    assert [comparable(e) for e in m.entries] == [comparable(e) for e in entries]
    assert (m.format_version, m.content, m.spec_id) == (3, content, spec_id)
    assert m.schema_json == SCHEMA_JSON and m.partition_spec_json == "[]"
    assert [f.field_id for f in m.partition_type.fields] == [f.field_id for f in ptype.fields]
    assert [f.field_type for f in m.partition_type.fields] == [f.field_type for f in ptype.fields]
    assert _rewrite(m) == data
    # The caller's own partition type reads the same values.
    again = read_manifest(data, SOURCE, partition_type=ptype)
    assert [comparable(e) for e in again.entries] == [comparable(e) for e in entries]
    # Without metrics: everything else the same, the six metric maps None.
    bare = read_manifest(data, SOURCE, partition_type=ptype, metrics=False)
    no_metrics = dict.fromkeys(
        ("column_sizes", "value_counts", "null_value_counts", "nan_value_counts")
        + ("lower_bounds", "upper_bounds")
    )
    assert [comparable(e) for e in bare.entries] == [
        comparable(replace(e, data_file=replace(e.data_file, **no_metrics))) for e in entries
    ]


@settings(max_examples=30, deadline=None)
@given(partition_types(max_fields=3), st.data())
def test_v2_round_trip(ptype: StructType, data: st.DataObject) -> None:
    entries = data.draw(st.lists(manifest_entries(ptype, v3_fields=False), max_size=3))
    written = _write(entries, ptype, format_version=2)
    m = read_manifest(written, SOURCE)
    assert m.format_version == 2
    assert [comparable(e) for e in m.entries] == [comparable(e) for e in entries]
    assert _rewrite(m) == written


def test_v1_round_trip_reads_sequence_numbers_as_zero() -> None:
    entry = _entry()
    m = read_manifest(_write([entry], format_version=1), SOURCE)
    assert m.format_version == 1
    assert m.entries == (replace(entry, sequence_number=0, file_sequence_number=0),)
    with pytest.raises(ValueError, match="snapshot_id"):
        _write([replace(entry, snapshot_id=None)], format_version=1)
    with pytest.raises(ValueError, match="content"):
        _write([entry], content=ManifestContent.DELETES, format_version=1)


def test_older_versions_refuse_v3_fields() -> None:
    with pytest.raises(ValueError, match="first_row_id"):
        _write([_entry(first_row_id=5)], format_version=2)
    with pytest.raises(ValueError, match="format version 4"):
        _write([_entry()], format_version=4)


def test_deterministic_bytes_and_explicit_sync_marker() -> None:
    entries = [_entry(), _entry("s3://b/d/b.parquet")]
    assert _write(entries) == _write(entries)
    assert _write(entries) != _write(entries[:1])
    marker = bytes(range(16))
    data = _write(entries, sync_marker=marker)
    assert read_manifest(data, SOURCE).sync_marker == marker
    assert data.count(marker) == 2  # header and the one block


def test_many_entries_span_several_blocks() -> None:
    entries = [_entry(f"s3://b/d/{i:05}-{'x' * 100}.parquet") for i in range(2000)]
    data = _write(entries)
    m = read_manifest(data, SOURCE)
    assert m.entries == tuple(entries)
    assert data.count(m.sync_marker) > 2
    assert _rewrite(m) == data


def test_bad_partition_values_are_refused() -> None:
    with pytest.raises(SchemaError, match="amount"):
        _write([_entry(partition=(1, Decimal("123456789.5")))])
    with pytest.raises(SchemaError, match="day"):
        _write([_entry(partition=("2020-01-01", None))])
    with pytest.raises(SchemaError, match="partition has 1 values"):
        _write([_entry(partition=(1,))])


# ---------------------------------------------------------------- Avro layout


def _avro_fields(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in record["fields"]}


def test_avro_layout_matches_java() -> None:
    container = read_container(_write([_entry()], spec_id=7), SOURCE)
    assert container.codec == "deflate"
    assert container.metadata == {
        "schema": SCHEMA_JSON,
        "schema-id": "3",
        "partition-spec": "[]",
        "partition-spec-id": "7",
        "format-version": "3",
        "content": "data",
    }
    entry = container.schema
    assert entry["name"] == "manifest_entry"
    top = _avro_fields(entry)
    assert {n: f["field-id"] for n, f in top.items()} == {
        "status": 0,
        "snapshot_id": 1,
        "sequence_number": 3,
        "file_sequence_number": 4,
        "data_file": 2,
    }
    assert top["sequence_number"]["type"] == ["null", "long"]
    data_file = top["data_file"]["type"]
    assert data_file["name"] == "r2"
    fields = _avro_fields(data_file)
    assert "block_size_in_bytes" not in fields
    ids = {n: f["field-id"] for n, f in fields.items()}
    assert ids["first_row_id"] == 142 and ids["referenced_data_file"] == 143
    assert ids["content_offset"] == 144 and ids["content_size_in_bytes"] == 145
    assert fields["file_format"]["type"] == "string"
    assert fields["content"]["type"] == "int"
    sizes = fields["column_sizes"]["type"][1]
    assert sizes["logicalType"] == "map" and sizes["items"]["name"] == "k117_v118"
    assert [f["field-id"] for f in sizes["items"]["fields"]] == [117, 118]
    assert fields["split_offsets"]["type"][1]["element-id"] == 133
    assert fields["equality_ids"]["type"][1]["element-id"] == 136
    partition = fields["partition"]["type"]
    assert partition["name"] == "r102" and fields["partition"]["field-id"] == 102
    assert partition["fields"][0] == {
        "name": "day",
        "type": ["null", {"type": "int", "logicalType": "date"}],
        "default": None,
        "field-id": 1000,
    }
    assert partition["fields"][1]["type"][1] == {
        "type": "fixed",
        "name": "decimal_9_2",
        "size": 4,
        "logicalType": "decimal",
        "precision": 9,
        "scale": 2,
    }


def test_v1_layout_writes_block_size() -> None:
    schema = manifest_entry_schema(1, PTYPE)
    data_file = _avro_fields(schema)["data_file"]["type"]
    assert _avro_fields(data_file)["block_size_in_bytes"]["field-id"] == 105
    assert "content" not in _avro_fields(data_file)
    assert _avro_fields(schema)["snapshot_id"]["type"] == "long"


@pytest.mark.parametrize(
    ("ptype", "avro"),
    [
        (TIMESTAMP, {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": False}),
        (TIMESTAMPTZ, {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": True}),
        (TIMESTAMP_NS, {"type": "long", "logicalType": "timestamp-nanos", "adjust-to-utc": False}),
        (UUID, {"type": "fixed", "name": "uuid_fixed", "size": 16, "logicalType": "uuid"}),
        (fixed(5), {"type": "fixed", "name": "fixed_5", "size": 5}),
        (STRING, "string"),
    ],
)
def test_partition_avro_types(ptype: Any, avro: Any) -> None:
    schema = manifest_entry_schema(3, StructType((NestedField(1000, "p", ptype),)))
    partition = _avro_fields(_avro_fields(schema)["data_file"]["type"])["partition"]["type"]
    assert partition["fields"][0]["type"] == ["null", avro]


def test_repeated_named_types_get_unique_names_and_odd_names_are_sanitized() -> None:
    ptype = StructType(
        (
            NestedField(1000, "a-b", decimal(9, 2)),
            NestedField(1001, "1st", decimal(9, 2)),
            NestedField(1002, "u", UUID),
        )
    )
    partition = _avro_fields(_avro_fields(manifest_entry_schema(3, ptype))["data_file"]["type"])[
        "partition"
    ]["type"]
    assert [f["name"] for f in partition["fields"]] == ["a_x2Db", "_1st", "u"]
    assert [f["type"][1]["name"] for f in partition["fields"]] == [
        "decimal_9_2",
        "decimal_9_2_1001",
        "uuid_fixed",
    ]


def test_decimal_sizes_match_pyiceberg() -> None:
    from pyiceberg.utils.decimal import decimal_required_bytes as py_required_bytes

    assert [decimal_required_bytes(p) for p in range(1, 39)] == [
        py_required_bytes(p) for p in range(1, 39)
    ]


def test_reads_name_references_to_named_types() -> None:
    """Java writes a repeated named type by name; such files must read."""
    schema = manifest_entry_schema(3, StructType((NestedField(1000, "a", decimal(9, 2)),)))
    data_file = _avro_fields(schema)["data_file"]["type"]
    partition = _avro_fields(data_file)["partition"]["type"]
    partition["fields"].append(
        {"name": "b", "type": ["null", "decimal_9_2"], "default": None, "field-id": 1001}
    )
    record = {
        "status": 1,
        "data_file": {
            "content": 0,
            "file_path": "p",
            "file_format": "PARQUET",
            "record_count": 1,
            "file_size_in_bytes": 2,
            "partition": {"a": (150).to_bytes(4, "big"), "b": (-5).to_bytes(4, "big", signed=True)},
        },
    }
    meta = {"schema": "{}", "partition-spec": "[]", "format-version": "3", "content": "data"}
    m = read_manifest(write_container(schema, [record], meta), SOURCE)
    assert m.entries[0].data_file.partition == (Decimal("1.50"), Decimal("-0.05"))
    assert m.partition_type.fields[1].field_type == decimal(9, 2)


# ---------------------------------------------------------------- inheritance


def _listed(**changes: Any) -> ManifestFile:
    base = ManifestFile(
        "s3://b/m.avro",
        100,
        0,
        ManifestContent.DATA,
        9,
        9,
        77,
        0,
        0,
        0,
        0,
        0,
        0,
        first_row_id=1000,
    )
    return replace(base, **changes)


def test_inherit_sequence_numbers_and_snapshot_ids() -> None:
    added = ManifestEntry(EntryStatus.ADDED, None, None, None, _entry().data_file)
    added_explicit = ManifestEntry(EntryStatus.ADDED, 5, 3, None, _entry().data_file)
    existing = ManifestEntry(EntryStatus.EXISTING, 4, 2, 2, _entry().data_file)
    out = inherit([added, added_explicit, existing], _listed(first_row_id=None))
    assert [(e.snapshot_id, e.sequence_number, e.file_sequence_number) for e in out] == [
        (77, 9, 9),
        (5, 3, 9),
        (4, 2, 2),
    ]


def test_inherit_first_row_ids_skip_deleted_assigned_and_delete_files() -> None:
    def entry(status: EntryStatus, rows: int, **changes: Any) -> ManifestEntry:
        f = replace(_entry().data_file, record_count=rows, **changes)
        return ManifestEntry(status, 1, 1, 1, f)

    entries = [
        entry(EntryStatus.ADDED, 10),
        entry(EntryStatus.DELETED, 100),
        entry(EntryStatus.EXISTING, 20, first_row_id=5),
        entry(EntryStatus.EXISTING, 30),
        entry(EntryStatus.ADDED, 7, content=FileContent.POSITION_DELETES),
        entry(EntryStatus.ADDED, 1),
    ]
    out = inherit(entries, _listed(first_row_id=1000, partition_spec_id=4))
    assert [e.data_file.first_row_id for e in out] == [1000, None, 5, 1010, None, 1040]
    assert {e.data_file.spec_id for e in out} == {4}
    # No manifest first_row_id (v2 lists, delete manifests): nothing is assigned.
    assert [e.data_file.first_row_id for e in inherit(entries, _listed(first_row_id=None))] == [
        None,
        None,
        5,
        None,
        None,
        None,
    ]
    deletes = _listed(content=ManifestContent.DELETES)
    assert inherit(entries, deletes)[0].data_file.first_row_id is None


# ---------------------------------------------------------------- recorded vectors


@pytest.mark.parametrize("version", [1, 2])
def test_reads_recorded_pyiceberg_manifests(version: int) -> None:
    path = MANIFEST_DIR / f"pyiceberg-v{version}-manifest.avro"
    m = read_manifest(path.read_bytes(), str(path))
    assert m.format_version == version
    assert m.content == ManifestContent.DATA and m.spec_id == 0
    assert m.entries == vector_entries_as_read(version)
    assert m.partition_type == VECTOR_PTYPE
    assert json.loads(m.partition_spec_json)[1]["field-id"] == 1001
    assert json.loads(m.schema_json)["schema-id"] == 0


def test_recorded_calving_v3_delete_manifest() -> None:
    path = MANIFEST_DIR / "calving-v3-delete-manifest.avro"
    recorded = path.read_bytes()
    assert v3_delete_manifest() == recorded
    m = read_manifest(recorded, str(path))
    assert (m.format_version, m.content) == (3, ManifestContent.DELETES)
    assert m.entries == (V3_DV_ENTRY,)
    assert _rewrite(m) == recorded


# ---------------------------------------------------------------- corrupt input


def _assert_corrupt(data: bytes, match: str | None = None) -> CorruptFileError:
    with pytest.raises(CorruptFileError, match=match) as info:
        read_manifest(data, SOURCE)
    assert info.value.source == SOURCE
    return info.value


def test_garbage_and_empty_input() -> None:
    _assert_corrupt(b"", "truncated")
    _assert_corrupt(b"PAR1" + bytes(100), "bad magic")
    _assert_corrupt(json.dumps({"not": "avro"}).encode(), "bad magic")


def test_every_truncation_is_corrupt_or_a_clean_prefix() -> None:
    data = _write([_entry(), _entry("s3://b/d/b.parquet")])
    header_end = data.index(read_container(data, SOURCE).sync_marker) + 16
    for cut in range(0, len(data), 3):
        if cut == header_end:
            assert read_manifest(data[:cut], SOURCE).entries == ()
        else:
            _assert_corrupt(data[:cut])


def test_bad_sync_marker() -> None:
    data = bytearray(_write([_entry()]))
    data[-1] ^= 0xFF
    _assert_corrupt(bytes(data), "sync marker")


_FLIP_BASE = _write(
    [_entry(lower_bounds={1: b"\x01"}, split_offsets=(4,))], content=ManifestContent.DELETES
)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(_FLIP_BASE) * 8 - 1))
def test_bit_flips_never_escape_as_other_errors(bit: int) -> None:
    data = bytearray(_FLIP_BASE)
    data[bit // 8] ^= 1 << (bit % 8)
    try:
        read_manifest(bytes(data), SOURCE)
    except CorruptFileError as exc:
        assert exc.source == SOURCE


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_after_a_valid_header(tail: bytes) -> None:
    data = _write([])
    try:
        read_manifest(data + tail, SOURCE)
    except CorruptFileError:
        pass


def _container(schema: dict[str, Any], record: dict[str, Any], **meta: str) -> bytes:
    metadata = {"schema": "{}", "partition-spec": "[]", "format-version": "3", "content": "data"}
    return write_container(schema, [record], {**metadata, **meta})


def _v3_schema_with(field_name: str, new_type: Any) -> dict[str, Any]:
    schema = manifest_entry_schema(3, StructType(()))
    data_file = _avro_fields(schema)["data_file"]["type"]
    for f in data_file["fields"]:
        if f["name"] == field_name:
            f["type"] = new_type
    return schema


_DATA_FILE: dict[str, Any] = {
    "content": 0,
    "file_path": "p",
    "file_format": "PARQUET",
    "partition": {},
    "record_count": 1,
    "file_size_in_bytes": 2,
}
_RECORD: dict[str, Any] = {"status": 1, "data_file": _DATA_FILE}


def test_missing_required_fields_and_wrong_types() -> None:
    schema = manifest_entry_schema(3, StructType(()))
    data_file = _avro_fields(schema)["data_file"]["type"]
    data_file["fields"] = [f for f in data_file["fields"] if f["name"] != "file_path"]
    _assert_corrupt(_container(schema, _RECORD), "lacks required field 100")

    wrong = _v3_schema_with("file_path", "long")
    _assert_corrupt(
        _container(wrong, {**_RECORD, "data_file": {**_DATA_FILE, "file_path": 5}}),
        "field 100",
    )
    record = {**_RECORD, "status": 9}
    _assert_corrupt(_container(manifest_entry_schema(3, StructType(())), record), "9")
    _assert_corrupt(_container({"type": "string"}, "x"), "not an Avro record")  # type: ignore[arg-type]  # a bare string schema on purpose: not an Avro record


def test_bad_metadata() -> None:
    schema = manifest_entry_schema(3, StructType(()))
    _assert_corrupt(_container(schema, _RECORD, **{"format-version": "9"}), "format-version 9")
    _assert_corrupt(_container(schema, _RECORD, **{"format-version": "x"}), "not an integer")
    _assert_corrupt(_container(schema, _RECORD, content="both"), "content")
    no_schema = write_container(schema, [_RECORD], {"partition-spec": "[]"})
    _assert_corrupt(no_schema, "lacks 'schema'")


def test_unknown_and_unsupported_codecs() -> None:
    data = _write([_entry()])
    _assert_corrupt(data.replace(b"\x0edeflate", b"\x0edeflbte", 1), "unknown Avro codec")
    with pytest.raises(UnsupportedFeatureError, match="snappy"):
        read_manifest(data.replace(b"\x0edeflate", b"\x0csnappy", 1), SOURCE)


@pytest.mark.parametrize("codec", ["null", "bzip2", "xz"])
def test_other_codecs_read(codec: str) -> None:
    schema = manifest_entry_schema(3, PTYPE)
    meta = {"schema": SCHEMA_JSON, "partition-spec": "[]", "format-version": "3"}
    record = {**_RECORD, "data_file": {**_DATA_FILE, "partition": {"day": 3}}}
    m = read_manifest(write_container(schema, [record], meta, codec=codec), SOURCE)
    assert m.entries[0].data_file.partition == (3, None)


# ---------------------------------------------------------------- pyiceberg oracle


def _pyiceberg_v3_entries(path: Path) -> list[Any]:
    from pyiceberg.avro.decoder import StreamingBinaryDecoder
    from pyiceberg.avro.file import AvroFile
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import MANIFEST_ENTRY_SCHEMAS
    from pyiceberg.manifest import DataFile as PyDataFile
    from pyiceberg.manifest import ManifestEntry as PyEntry

    # pyiceberg 0.12's Cython decoder reads doubles at float precision: use its
    # pure-Python decoder.
    with (
        patch("pyiceberg.avro.file.new_decoder", StreamingBinaryDecoder),
        AvroFile[PyEntry](
            PyArrowFileIO().new_input(str(path)),
            MANIFEST_ENTRY_SCHEMAS[3],
            read_types={-1: PyEntry, 2: PyDataFile},
        ) as reader,
    ):
        return list(reader)


def _v3_field(data_file: Any, name: str) -> Any:
    from pyiceberg.manifest import DATA_FILE_TYPE

    return data_file[[f.name for f in DATA_FILE_TYPE[3].fields].index(name)]


def _assert_pyiceberg_sees(py_entry: Any, entry: ManifestEntry) -> None:
    f, pf = entry.data_file, py_entry.data_file
    assert (int(py_entry.status), py_entry.snapshot_id) == (int(entry.status), entry.snapshot_id)
    assert py_entry.sequence_number == entry.sequence_number
    assert py_entry.file_sequence_number == entry.file_sequence_number
    assert (int(pf.content), pf.file_path, getattr(pf.file_format, "value", pf.file_format)) == (
        int(f.content),
        f.file_path,
        f.file_format,
    )
    assert (pf.record_count, pf.file_size_in_bytes) == (f.record_count, f.file_size_in_bytes)
    assert comparable(tuple(pf.partition)) == comparable(f.partition)
    for name in (
        "column_sizes",
        "value_counts",
        "null_value_counts",
        "nan_value_counts",
        "lower_bounds",
        "upper_bounds",
    ):
        assert dict(getattr(pf, name) or {}) == (getattr(f, name) or {}), name
    assert pf.key_metadata == f.key_metadata and pf.sort_order_id == f.sort_order_id
    assert (pf.split_offsets or None) == (list(f.split_offsets) if f.split_offsets else None)
    assert (pf.equality_ids or None) == (list(f.equality_ids) if f.equality_ids else None)
    for name in ("first_row_id", "referenced_data_file", "content_offset", "content_size_in_bytes"):
        assert _v3_field(pf, name) == getattr(f, name), name


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_pyiceberg_reads_calving_v3_manifests(tmp_path_factory: Any, data: st.DataObject) -> None:
    ptype = data.draw(partition_types(nanos=False))
    entries = data.draw(st.lists(manifest_entries(ptype), min_size=1, max_size=4))
    path = tmp_path_factory.mktemp("m") / "m.avro"
    path.write_bytes(_write(entries, ptype))
    read = _pyiceberg_v3_entries(path)
    assert len(read) == len(entries)
    for py_entry, entry in zip(read, entries):
        _assert_pyiceberg_sees(py_entry, entry)


def test_pyiceberg_inherits_like_calving(tmp_path: Path) -> None:
    """pyiceberg's own read path (manifest list -> fetch_manifest_entry) over a
    calving-written manifest: sequence numbers and snapshot ids inherited alike."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    from tests.commit.spec.manifest_vectors import to_pyiceberg_manifest_file

    entries = [
        ManifestEntry(EntryStatus.ADDED, None, None, None, _entry().data_file),
        ManifestEntry(EntryStatus.EXISTING, 3, 2, 1, _entry("s3://b/d/x.parquet").data_file),
    ]
    path = tmp_path / "m.avro"
    path.write_bytes(_write(entries))
    listed = _listed(manifest_path=str(path), sequence_number=12)
    py_read = to_pyiceberg_manifest_file(listed).fetch_manifest_entry(
        PyArrowFileIO(), discard_deleted=False
    )
    ours = inherit(read_manifest(path.read_bytes(), str(path)).entries, listed)
    assert [(e.snapshot_id, e.sequence_number, e.file_sequence_number) for e in py_read] == [
        (e.snapshot_id, e.sequence_number, e.file_sequence_number) for e in ours
    ]


def test_pyiceberg_reads_every_partition_type_of_the_vector() -> None:
    path = MANIFEST_DIR / "calving-v3-delete-manifest.avro"
    (py_entry,) = _pyiceberg_v3_entries(path)
    assert tuple(py_entry.data_file.partition) == FULL_PARTITION
    assert _v3_field(py_entry.data_file, "referenced_data_file") == (
        V3_DV_ENTRY.data_file.referenced_data_file
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1, 2]), st.data())
def test_calving_reads_pyiceberg_manifests(
    tmp_path_factory: Any, version: int, data: st.DataObject
) -> None:
    ptype = data.draw(partition_types(nanos=False))
    snapshot_id = data.draw(st.integers(1, 2**63 - 1))

    @st.composite
    def pyiceberg_entries(draw: st.DrawFn) -> ManifestEntry:
        f = draw(data_files(ptype, v3_fields=False, datetime_range=True))
        if version == 1:
            f = replace(f, content=FileContent.DATA, equality_ids=None)
        f = replace(f, referenced_data_file=None)
        status = draw(st.sampled_from(EntryStatus))
        if status == EntryStatus.ADDED and draw(st.booleans()):
            return ManifestEntry(status, snapshot_id, None, None, f)
        seq = draw(st.integers(0, 2**62))
        return ManifestEntry(status, draw(st.integers(1, 2**63 - 1)), seq, seq, f)

    entries = data.draw(st.lists(pyiceberg_entries(), min_size=1, max_size=4))
    path = tmp_path_factory.mktemp("py") / "m.avro"
    pyiceberg_write_manifest(path, version, ptype, entries, snapshot_id)
    m = read_manifest(path.read_bytes(), str(path))
    assert m.format_version == version
    if version == 1:
        entries = [replace(e, sequence_number=0, file_sequence_number=0) for e in entries]
    assert [comparable(e) for e in m.entries] == [comparable(e) for e in entries]
    assert [(f.field_id, f.field_type) for f in m.partition_type.fields] == [
        (f.field_id, f.field_type) for f in ptype.fields
    ]


def test_reads_pyiceberg_redefinitions_of_named_types(tmp_path: Path) -> None:
    """pyiceberg defines ``uuid_fixed`` and ``decimal_9_2`` again for each field using
    them, which strict Avro parsers refuse; calving reads such files."""
    ptype = StructType(
        (
            NestedField(1000, "u1", UUID),
            NestedField(1001, "u2", UUID),
            NestedField(1002, "d1", decimal(9, 2)),
            NestedField(1003, "d2", decimal(9, 2)),
        )
    )
    partition = (uuid.uuid4(), uuid.uuid4(), Decimal("1.00"), Decimal("-2.50"))
    entry = replace(_entry(partition=partition), status=EntryStatus.EXISTING)
    entry = replace(entry, sequence_number=2, file_sequence_number=2)
    path = tmp_path / "m.avro"
    pyiceberg_write_manifest(path, 2, ptype, [entry], 5)
    assert (
        path.read_bytes().count(b'"name": "uuid_fixed"')
        + path.read_bytes().count(b'"name":"uuid_fixed"')
        == 2
    )
    m = read_manifest(path.read_bytes(), str(path))
    assert m.entries == (entry,)
    assert m.partition_type == ptype


def test_duckdb_avro_reader_reads_the_calving_v3_vector() -> None:
    """DuckDB's Avro reader, an independent implementation, decodes the same values."""
    from tests.support.oracles import duckdb_connection

    path = MANIFEST_DIR / "calving-v3-delete-manifest.avro"
    con = duckdb_connection()
    try:
        row = con.execute(
            "SELECT status, data_file.content, data_file.file_path, data_file.file_format, "
            "data_file.record_count, data_file.partition::VARCHAR, "
            "data_file.referenced_data_file, data_file.content_offset, "
            f"data_file.content_size_in_bytes FROM read_avro('{path}')"
        ).fetchall()
    finally:
        con.close()
    f = V3_DV_ENTRY.data_file
    assert row == [
        (
            1,
            1,
            f.file_path,
            "PUFFIN",
            3,
            (
                "{'id_bucket': 7, 'amount': -12.50, 'region': eu-west, 'day': 2023-05-23, "
                "'uid': 0f8fad5b-d9cb-469f-a165-70867728950e, "
                "'ts': '2023-11-14 22:13:20.123456+00', 'code': abc, 'flag': true}"
            ),
            f.referenced_data_file,
            4,
            42,
        )
    ]
