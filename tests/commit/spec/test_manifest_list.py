"""Manifest lists: round trips, Avro layout, recorded vectors, corrupt input, and
pyiceberg as the oracle in both directions."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calving.commit.errors import CorruptFileError
from calving.commit.spec.avro_file import read_container, write_container
from calving.commit.spec.avro_schemas import manifest_file_schema
from calving.commit.spec.data_file import FieldSummary, ManifestContent, ManifestFile
from calving.commit.spec.manifest_list import ManifestList, read_manifest_list, write_manifest_list
from tests.commit.spec.manifest_strategies import manifest_files
from tests.commit.spec.manifest_vectors import (
    MANIFEST_DIR,
    PARENT_ID,
    SNAPSHOT_ID,
    pyiceberg_write_manifest_list,
    v3_manifest_list,
    vector_manifest_file,
)

SOURCE = "s3://bucket/t/metadata/snap-1.avro"


def _manifest(path: str = "s3://b/m0.avro", **changes: Any) -> ManifestFile:
    base = ManifestFile(
        path,
        4000,
        0,
        ManifestContent.DATA,
        5,
        3,
        77,
        1,
        2,
        0,
        10,
        20,
        0,
        partitions=(FieldSummary(False, None, b"\x01", b"\x09"),),
        first_row_id=100,
    )
    return replace(base, **changes)


def _write(manifests: list[ManifestFile], **kwargs: Any) -> bytes:
    args: dict[str, Any] = {
        "snapshot_id": 77,
        "parent_snapshot_id": 76,
        "sequence_number": 5,
        "first_row_id": 100,
    }
    args.update(kwargs)
    return write_manifest_list(manifests, **args)


def _rewrite(ml: ManifestList) -> bytes:
    assert ml.snapshot_id is not None and ml.sequence_number is not None
    return write_manifest_list(
        ml.manifests,
        snapshot_id=ml.snapshot_id,
        parent_snapshot_id=ml.parent_snapshot_id,
        sequence_number=ml.sequence_number,
        first_row_id=ml.first_row_id,
        format_version=ml.format_version,
        sync_marker=ml.sync_marker,
    )


# ---------------------------------------------------------------- round trips


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(manifest_files(), max_size=5),
    st.integers(-(2**63), 2**63 - 1),
    st.none() | st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.none() | st.integers(0, 2**63 - 1),
)
def test_round_trip_values_and_bytes(
    manifests: list[ManifestFile],
    snapshot_id: int,
    parent: int | None,
    sequence_number: int,
    first_row_id: int | None,
) -> None:
    data = write_manifest_list(
        manifests,
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent,
        sequence_number=sequence_number,
        first_row_id=first_row_id,
    )
    ml = read_manifest_list(data, SOURCE)
    assert ml.manifests == tuple(manifests)
    assert (ml.format_version, ml.snapshot_id, ml.parent_snapshot_id) == (3, snapshot_id, parent)
    assert (ml.sequence_number, ml.first_row_id) == (sequence_number, first_row_id)
    assert _rewrite(ml) == data


@settings(max_examples=30, deadline=None)
@given(st.lists(manifest_files(v3_fields=False), max_size=3))
def test_v2_round_trip(manifests: list[ManifestFile]) -> None:
    data = _write(manifests, format_version=2, first_row_id=None)
    ml = read_manifest_list(data, SOURCE)
    assert ml.format_version == 2 and ml.manifests == tuple(manifests)
    assert ml.first_row_id is None
    assert _rewrite(ml) == data


def test_v1_round_trip_defaults_sequence_numbers_and_content() -> None:
    manifest = _manifest(first_row_id=None)
    ml = read_manifest_list(_write([manifest], format_version=1, first_row_id=None), SOURCE)
    assert ml.format_version == 1 and ml.sequence_number is None
    assert ml.manifests == (replace(manifest, sequence_number=0, min_sequence_number=0),)
    with pytest.raises(ValueError, match="content"):
        _write([_manifest(content=ManifestContent.DELETES, first_row_id=None)], format_version=1)
    with pytest.raises(ValueError, match="first_row_id"):
        _write([_manifest()], format_version=2)


def test_deterministic_bytes() -> None:
    manifests = [_manifest(), _manifest("s3://b/m1.avro", first_row_id=None)]
    assert _write(manifests) == _write(manifests)
    assert _write(manifests) != _write(manifests, sequence_number=6)


# ---------------------------------------------------------------- Avro layout


def test_metadata_and_schema_as_java_writes_them() -> None:
    container = read_container(_write([_manifest()], parent_snapshot_id=None), SOURCE)
    assert container.codec == "deflate"
    assert container.metadata == {
        "snapshot-id": "77",
        "parent-snapshot-id": "null",
        "sequence-number": "5",
        "format-version": "3",
        "first-row-id": "100",
    }
    schema = container.schema
    assert schema["name"] == "manifest_file"
    ids = {f["name"]: f["field-id"] for f in schema["fields"]}
    assert ids == {
        "manifest_path": 500,
        "manifest_length": 501,
        "partition_spec_id": 502,
        "content": 517,
        "sequence_number": 515,
        "min_sequence_number": 516,
        "added_snapshot_id": 503,
        "added_files_count": 504,
        "existing_files_count": 505,
        "deleted_files_count": 506,
        "added_rows_count": 512,
        "existing_rows_count": 513,
        "deleted_rows_count": 514,
        "partitions": 507,
        "key_metadata": 519,
        "first_row_id": 520,
    }
    partitions = next(f for f in schema["fields"] if f["name"] == "partitions")["type"][1]
    assert partitions["element-id"] == 508 and partitions["items"]["name"] == "r508"
    assert [f["field-id"] for f in partitions["items"]["fields"]] == [509, 518, 510, 511]
    first_row_id = schema["fields"][-1]
    assert first_row_id["type"] == ["null", "long"] and first_row_id["default"] is None


def test_v1_and_v2_layouts() -> None:
    v1 = {f["name"]: f for f in manifest_file_schema(1)["fields"]}
    assert "content" not in v1 and "sequence_number" not in v1
    assert v1["added_files_count"]["type"] == ["null", "int"]
    assert v1["added_snapshot_id"]["type"] == "long"
    v2 = {f["name"]: f for f in manifest_file_schema(2)["fields"]}
    assert "first_row_id" not in v2 and v2["added_files_count"]["type"] == "int"
    meta = read_container(_write([], format_version=2, first_row_id=None), SOURCE).metadata
    assert "first-row-id" not in meta and meta["format-version"] == "2"


# ---------------------------------------------------------------- recorded vectors


@pytest.mark.parametrize("version", [1, 2])
def test_reads_recorded_pyiceberg_lists(version: int) -> None:
    path = MANIFEST_DIR / f"pyiceberg-v{version}-manifest-list.avro"
    ml = read_manifest_list(path.read_bytes(), str(path))
    manifest_path = MANIFEST_DIR / f"pyiceberg-v{version}-manifest.avro"
    assert ml.format_version == version
    assert ml.snapshot_id == SNAPSHOT_ID
    assert ml.parent_snapshot_id == (PARENT_ID if version == 2 else None)
    assert ml.sequence_number == (4 if version == 2 else None)
    assert ml.manifests == (
        vector_manifest_file(manifest_path.name, manifest_path.stat().st_size, version),
    )


def test_recorded_calving_v3_list() -> None:
    path = MANIFEST_DIR / "calving-v3-manifest-list.avro"
    recorded = path.read_bytes()
    assert v3_manifest_list() == recorded
    ml = read_manifest_list(recorded, str(path))
    assert [m.first_row_id for m in ml.manifests] == [600, None]
    assert [m.content for m in ml.manifests] == [ManifestContent.DATA, ManifestContent.DELETES]
    assert (ml.first_row_id, ml.parent_snapshot_id) == (600, PARENT_ID)
    assert _rewrite(ml) == recorded


# ---------------------------------------------------------------- corrupt input


def _assert_corrupt(data: bytes, match: str | None = None) -> None:
    with pytest.raises(CorruptFileError, match=match) as info:
        read_manifest_list(data, SOURCE)
    assert info.value.source == SOURCE


def test_garbage_truncation_and_sync() -> None:
    _assert_corrupt(b"", "truncated")
    _assert_corrupt(b"\x00" * 64, "bad magic")
    data = _write([_manifest(), _manifest("s3://b/m1.avro")])
    header_end = data.index(read_container(data, SOURCE).sync_marker) + 16
    for cut in range(0, len(data), 2):
        if cut != header_end:
            _assert_corrupt(data[:cut])
    flipped = bytearray(data)
    flipped[-3] ^= 0x01
    _assert_corrupt(bytes(flipped), "sync marker")


_FLIP_BASE = _write([_manifest()])


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(_FLIP_BASE) * 8 - 1))
def test_bit_flips_never_escape_as_other_errors(bit: int) -> None:
    data = bytearray(_FLIP_BASE)
    data[bit // 8] ^= 1 << (bit % 8)
    try:
        read_manifest_list(bytes(data), SOURCE)
    except CorruptFileError as exc:
        assert exc.source == SOURCE


_RECORD = {
    "manifest_path": "m",
    "manifest_length": 1,
    "partition_spec_id": 0,
    "content": 0,
    "sequence_number": 1,
    "min_sequence_number": 1,
    "added_snapshot_id": 1,
    "added_files_count": 1,
    "existing_files_count": 0,
    "deleted_files_count": 0,
    "added_rows_count": 1,
    "existing_rows_count": 0,
    "deleted_rows_count": 0,
}


def test_missing_fields_wrong_types_and_bad_metadata() -> None:
    meta = {"format-version": "3"}
    schema = manifest_file_schema(3)
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "added_rows_count"]
    _assert_corrupt(write_container(schema, [_RECORD], meta), "lacks required field 512")

    schema = manifest_file_schema(3)
    schema["fields"][0]["type"] = "long"
    _assert_corrupt(write_container(schema, [{**_RECORD, "manifest_path": 3}], meta), "field 500")
    bad_content = write_container(manifest_file_schema(3), [{**_RECORD, "content": 5}], meta)
    _assert_corrupt(bad_content, "5")
    for key, value in (("format-version", "7"), ("snapshot-id", "abc")):
        data = write_container(manifest_file_schema(3), [_RECORD], {**meta, key: value})
        _assert_corrupt(data, value)


# ---------------------------------------------------------------- pyiceberg oracle


def _pyiceberg_v3_list(path: Path) -> list[Any]:
    from pyiceberg.avro.file import AvroFile
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import MANIFEST_LIST_FILE_SCHEMAS, PartitionFieldSummary
    from pyiceberg.manifest import ManifestFile as PyManifestFile

    with AvroFile[PyManifestFile](
        PyArrowFileIO().new_input(str(path)),
        MANIFEST_LIST_FILE_SCHEMAS[3],
        read_types={-1: PyManifestFile, 508: PartitionFieldSummary},
    ) as reader:
        return list(reader)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(manifest_files(), min_size=1, max_size=4))
def test_pyiceberg_reads_calving_v3_lists(
    tmp_path_factory: Any, manifests: list[ManifestFile]
) -> None:
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import MANIFEST_LIST_FILE_SCHEMAS
    from pyiceberg.manifest import read_manifest_list as py_read_manifest_list

    path = tmp_path_factory.mktemp("l") / "snap.avro"
    path.write_bytes(_write(manifests))
    first_row_id_pos = [f.name for f in MANIFEST_LIST_FILE_SCHEMAS[3].fields].index("first_row_id")
    v3_read = _pyiceberg_v3_list(path)
    # pyiceberg's own public read path (v2 projection) sees the same v2 fields.
    public_read = list(py_read_manifest_list(PyArrowFileIO().new_input(str(path))))
    assert len(v3_read) == len(public_read) == len(manifests)
    for py_v3, py, m in zip(v3_read, public_read, manifests):
        for p in (py_v3, py):
            assert (p.manifest_path, p.manifest_length, p.partition_spec_id) == (
                m.manifest_path,
                m.manifest_length,
                m.partition_spec_id,
            )
            assert (int(p.content), p.sequence_number, p.min_sequence_number) == (
                int(m.content),
                m.sequence_number,
                m.min_sequence_number,
            )
            assert (p.added_snapshot_id, p.added_files_count, p.existing_files_count) == (
                m.added_snapshot_id,
                m.added_files_count,
                m.existing_files_count,
            )
            assert (p.deleted_files_count, p.added_rows_count) == (
                m.deleted_files_count,
                m.added_rows_count,
            )
            assert (p.existing_rows_count, p.deleted_rows_count, p.key_metadata) == (
                m.existing_rows_count,
                m.deleted_rows_count,
                m.key_metadata,
            )
            summaries = (
                None
                if p.partitions is None
                else tuple(
                    FieldSummary(s.contains_null, s.contains_nan, s.lower_bound, s.upper_bound)
                    for s in p.partitions
                )
            )
            assert summaries == m.partitions
        assert py_v3[first_row_id_pos] == m.first_row_id


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1, 2]), st.data())
def test_calving_reads_pyiceberg_lists(
    tmp_path_factory: Any, version: int, data: st.DataObject
) -> None:
    manifests = data.draw(st.lists(manifest_files(v3_fields=False), min_size=1, max_size=3))
    if version == 1:
        manifests = [
            replace(m, content=ManifestContent.DATA, sequence_number=0, min_sequence_number=0)
            for m in manifests
        ]
    snapshot_id = data.draw(st.integers(1, 2**63 - 1))
    parent = data.draw(st.none() | st.integers(1, 2**63 - 1))
    path = tmp_path_factory.mktemp("py") / "snap.avro"
    pyiceberg_write_manifest_list(path, version, manifests, snapshot_id, parent, 9)
    ml = read_manifest_list(path.read_bytes(), str(path))
    assert ml.format_version == version
    assert (ml.snapshot_id, ml.parent_snapshot_id) == (snapshot_id, parent)
    assert ml.sequence_number == (9 if version == 2 else None)
    assert ml.manifests == tuple(manifests)


def test_duckdb_avro_reader_reads_the_calving_v3_vector() -> None:
    """DuckDB's Avro reader, an independent implementation, decodes the same values."""
    from tests.support.oracles import duckdb_connection

    path = MANIFEST_DIR / "calving-v3-manifest-list.avro"
    con = duckdb_connection()
    try:
        rows = con.execute(
            "SELECT manifest_path, content, sequence_number, min_sequence_number, "
            "added_rows_count, existing_rows_count, first_row_id, "
            f"len(partitions) FROM read_avro('{path}')"
        ).fetchall()
    finally:
        con.close()
    assert rows == [
        ("s3://bucket/db/t/metadata/m.avro", 0, 5, 2, 10, 6, 600, 1),
        ("s3://bucket/db/t/metadata/d.avro", 1, 5, 5, 3, 0, None, None),
    ]
