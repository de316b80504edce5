"""pyiceberg as the oracle for manifests and manifest lists, and recorded byte vectors.

``tests/vectors/manifest/`` holds manifests and manifest lists written by pyiceberg
0.12 (format versions 1 and 2) from the inputs below, and one v3 manifest and list
written by calving. Tests read them back and compare with the inputs. Regenerate
(only after a deliberate change, then review the diff) with::

    .venv/bin/python -m tests.commit.spec.manifest_vectors
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from calving.commit.spec.data_file import (
    DataFile,
    EntryStatus,
    FieldSummary,
    FileContent,
    ManifestContent,
    ManifestEntry,
    ManifestFile,
)
from calving.commit.spec.manifest import write_manifest
from calving.commit.spec.manifest_list import write_manifest_list
from calving.commit.spec.types import (
    BOOLEAN,
    DATE,
    INT,
    STRING,
    TIMESTAMPTZ,
    UUID,
    NestedField,
    PrimitiveType,
    StructType,
    decimal,
    fixed,
)
from tests.commit.spec.value_strategies import pyiceberg_type

MANIFEST_DIR = Path(__file__).resolve().parents[2] / "vectors" / "manifest"

# ---------------------------------------------------------------- pyiceberg bridge


def pyiceberg_schema_and_spec(ptype: StructType, spec_id: int = 0) -> tuple[Any, Any]:
    """A pyiceberg table schema with one source column per partition field and an
    identity spec over them, whose partition type is ``ptype`` (ids and names)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import NestedField as PyField

    columns = [
        PyField(i + 1, f"c{i}", pyiceberg_type(_prim(f)), required=False)
        for i, f in enumerate(ptype.fields)
    ]
    schema = Schema(*columns, schema_id=0)
    spec = PartitionSpec(
        *[
            PartitionField(i + 1, f.field_id, IdentityTransform(), f.name)
            for i, f in enumerate(ptype.fields)
        ],
        spec_id=spec_id,
    )
    return schema, spec


def _prim(field: NestedField) -> PrimitiveType:
    assert isinstance(field.field_type, PrimitiveType)
    return field.field_type


def calving_schema_json(ptype: StructType) -> str:
    """The table schema JSON matching ``pyiceberg_schema_and_spec`` (schema-id 0)."""
    fields = [
        {"id": i + 1, "name": f"c{i}", "required": False, "type": str(_prim(f))}
        for i, f in enumerate(ptype.fields)
    ]
    return json.dumps({"type": "struct", "schema-id": 0, "fields": fields})


def partition_spec_json(ptype: StructType) -> str:
    return json.dumps(
        [
            {"name": f.name, "transform": "identity", "source-id": i + 1, "field-id": f.field_id}
            for i, f in enumerate(ptype.fields)
        ]
    )


def to_pyiceberg_entry(entry: ManifestEntry) -> Any:
    """The pyiceberg ``ManifestEntry`` of a calving entry (v2 fields only)."""
    from pyiceberg.manifest import DataFile as PyDataFile
    from pyiceberg.manifest import DataFileContent, FileFormat, ManifestEntryStatus
    from pyiceberg.manifest import ManifestEntry as PyEntry
    from pyiceberg.typedef import Record

    f = entry.data_file
    data_file = PyDataFile.from_args(
        content=DataFileContent(int(f.content)),
        file_path=f.file_path,
        file_format=FileFormat(f.file_format),
        partition=Record(*f.partition),
        record_count=f.record_count,
        file_size_in_bytes=f.file_size_in_bytes,
        column_sizes=f.column_sizes,
        value_counts=f.value_counts,
        null_value_counts=f.null_value_counts,
        nan_value_counts=f.nan_value_counts,
        lower_bounds=f.lower_bounds,
        upper_bounds=f.upper_bounds,
        key_metadata=f.key_metadata,
        split_offsets=None if f.split_offsets is None else list(f.split_offsets),
        equality_ids=None if f.equality_ids is None else list(f.equality_ids),
        sort_order_id=f.sort_order_id,
    )
    return PyEntry.from_args(
        status=ManifestEntryStatus(int(entry.status)),
        snapshot_id=entry.snapshot_id,
        sequence_number=entry.sequence_number,
        file_sequence_number=entry.file_sequence_number,
        data_file=data_file,
    )


def pyiceberg_write_manifest(
    path: Path, version: int, ptype: StructType, entries: Sequence[ManifestEntry], snapshot_id: int
) -> Any:
    """Write ``entries`` with pyiceberg's manifest writer; returns its ``ManifestFile``."""
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import write_manifest as py_write_manifest

    schema, spec = pyiceberg_schema_and_spec(ptype)
    output = PyArrowFileIO().new_output(str(path))
    with py_write_manifest(
        version,  # type: ignore[arg-type]  # pyiceberg types it as Literal[1, 2, 3]
        spec,
        schema,
        output,
        snapshot_id,
        "deflate",
    ) as writer:
        for entry in entries:
            writer.add_entry(to_pyiceberg_entry(entry))
    return writer.to_manifest_file()


def to_pyiceberg_manifest_file(m: ManifestFile) -> Any:
    from pyiceberg.manifest import ManifestContent as PyContent
    from pyiceberg.manifest import ManifestFile as PyManifestFile
    from pyiceberg.manifest import PartitionFieldSummary

    partitions = None
    if m.partitions is not None:
        partitions = [
            PartitionFieldSummary.from_args(
                contains_null=s.contains_null,
                contains_nan=s.contains_nan,
                lower_bound=s.lower_bound,
                upper_bound=s.upper_bound,
            )
            for s in m.partitions
        ]
    return PyManifestFile.from_args(
        manifest_path=m.manifest_path,
        manifest_length=m.manifest_length,
        partition_spec_id=m.partition_spec_id,
        content=PyContent(int(m.content)),
        sequence_number=m.sequence_number,
        min_sequence_number=m.min_sequence_number,
        added_snapshot_id=m.added_snapshot_id,
        added_files_count=m.added_files_count,
        existing_files_count=m.existing_files_count,
        deleted_files_count=m.deleted_files_count,
        added_rows_count=m.added_rows_count,
        existing_rows_count=m.existing_rows_count,
        deleted_rows_count=m.deleted_rows_count,
        partitions=partitions,
        key_metadata=m.key_metadata,
    )


def pyiceberg_write_manifest_list(
    path: Path,
    version: int,
    manifests: Sequence[ManifestFile],
    snapshot_id: int,
    parent_snapshot_id: int | None,
    sequence_number: int,
) -> None:
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import write_manifest_list as py_write_manifest_list

    output = PyArrowFileIO().new_output(str(path))
    with py_write_manifest_list(
        version,  # type: ignore[arg-type]  # pyiceberg types it as Literal[1, 2, 3]
        output,
        snapshot_id,
        parent_snapshot_id,
        sequence_number,
        "deflate",
    ) as writer:
        writer.add_manifests([to_pyiceberg_manifest_file(m) for m in manifests])


# ---------------------------------------------------------------- recorded inputs

VECTOR_PTYPE = StructType(
    (
        NestedField(1000, "id_bucket", INT),
        NestedField(1001, "amount", decimal(9, 2)),
        NestedField(1002, "region", STRING),
        NestedField(1003, "day", DATE),
        NestedField(1004, "uid", UUID),
        NestedField(1005, "ts", TIMESTAMPTZ),
        NestedField(1006, "code", fixed(3)),
        NestedField(1007, "flag", BOOLEAN),
    )
)
SNAPSHOT_ID = 4_242_424_242
PARENT_ID = 4_141_414_141
UID = uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e")


def _file(name: str, partition: tuple[Any, ...], rows: int, **extra: Any) -> DataFile:
    return DataFile(
        content=extra.pop("content", FileContent.DATA),
        file_path=f"s3://bucket/db/t/data/{name}",
        file_format=extra.pop("file_format", "PARQUET"),
        partition=partition,
        record_count=rows,
        file_size_in_bytes=rows * 10 + 7,
        **extra,
    )


FULL_PARTITION = (7, Decimal("-12.50"), "eu-west", 19_500, UID, 1_700_000_000_123_456, b"abc", True)
NULL_PARTITION = (None,) * 8

# Entries as pyiceberg is asked to write them (v2 semantics).
VECTOR_ENTRIES = (
    ManifestEntry(
        EntryStatus.ADDED,
        SNAPSHOT_ID,
        None,
        None,
        _file(
            "a.parquet",
            FULL_PARTITION,
            100,
            column_sizes={1: 40, 2: 50},
            value_counts={1: 100, 2: 100},
            null_value_counts={1: 0, 2: 3},
            nan_value_counts={},
            lower_bounds={1: b"\x01\x00\x00\x00"},
            upper_bounds={1: b"\x09\x00\x00\x00"},
            split_offsets=(4, 1000),
            sort_order_id=0,
        ),
    ),
    ManifestEntry(EntryStatus.EXISTING, PARENT_ID, 3, 2, _file("b.parquet", NULL_PARTITION, 5)),
    ManifestEntry(
        EntryStatus.DELETED,
        SNAPSHOT_ID,
        1,
        1,
        _file("c.parquet", FULL_PARTITION, 9, key_metadata=b"\x00key"),
    ),
)


def vector_entries_as_read(version: int, spec_id: int = 0) -> tuple[ManifestEntry, ...]:
    """``VECTOR_ENTRIES`` as a reader must return them from a version ``version`` file."""
    out = []
    for e in VECTOR_ENTRIES:
        f = DataFile(**{**e.data_file.__dict__, "spec_id": spec_id})
        if version == 1:  # spec: v1 sequence numbers read as 0
            e = ManifestEntry(e.status, e.snapshot_id, 0, 0, f)
        else:
            e = ManifestEntry(e.status, e.snapshot_id, e.sequence_number, e.file_sequence_number, f)
        out.append(e)
    return tuple(out)


def vector_manifest_file(path: str, length: int, version: int) -> ManifestFile:
    return ManifestFile(
        manifest_path=path,
        manifest_length=length,
        partition_spec_id=0,
        content=ManifestContent.DATA,
        sequence_number=0 if version == 1 else 4,
        min_sequence_number=0 if version == 1 else 1,
        added_snapshot_id=SNAPSHOT_ID,
        added_files_count=1,
        existing_files_count=1,
        deleted_files_count=1,
        added_rows_count=100,
        existing_rows_count=5,
        deleted_rows_count=9,
        partitions=(
            FieldSummary(True, False, b"\x07\x00\x00\x00", b"\x07\x00\x00\x00"),
            FieldSummary(True, None, b"\xfb\x1e", b"\xfb\x1e"),
        ),
        key_metadata=None,
    )


# The calving-written v3 vector: a delete manifest with a deletion vector entry and a
# data manifest, listed in a v3 manifest list with first row ids.
V3_DV_ENTRY = ManifestEntry(
    EntryStatus.ADDED,
    None,
    None,
    None,
    _file(
        "dv-1.puffin",
        FULL_PARTITION,
        3,
        content=FileContent.POSITION_DELETES,
        file_format="PUFFIN",
        referenced_data_file="s3://bucket/db/t/data/a.parquet",
        content_offset=4,
        content_size_in_bytes=42,
    ),
)
V3_DATA_ENTRIES = (
    ManifestEntry(EntryStatus.ADDED, None, None, None, _file("n.parquet", FULL_PARTITION, 10)),
    ManifestEntry(
        EntryStatus.EXISTING, PARENT_ID, 2, 2, _file("e.parquet", NULL_PARTITION, 6, first_row_id=0)
    ),
)


def v3_delete_manifest() -> bytes:
    return write_manifest(
        [V3_DV_ENTRY],
        schema_json=calving_schema_json(VECTOR_PTYPE),
        partition_spec_json=partition_spec_json(VECTOR_PTYPE),
        spec_id=0,
        partition_type=VECTOR_PTYPE,
        content=ManifestContent.DELETES,
    )


def v3_manifest_list() -> bytes:
    delete_manifest = ManifestFile(
        "s3://bucket/db/t/metadata/d.avro",
        4000,
        0,
        ManifestContent.DELETES,
        5,
        5,
        SNAPSHOT_ID,
        1,
        0,
        0,
        3,
        0,
        0,
    )
    data_manifest = ManifestFile(
        "s3://bucket/db/t/metadata/m.avro",
        5000,
        0,
        ManifestContent.DATA,
        5,
        2,
        SNAPSHOT_ID,
        1,
        1,
        0,
        10,
        6,
        0,
        partitions=(FieldSummary(True, False, b"\x07\x00\x00\x00", b"\x07\x00\x00\x00"),),
        first_row_id=600,
    )
    return write_manifest_list(
        [data_manifest, delete_manifest],
        snapshot_id=SNAPSHOT_ID,
        parent_snapshot_id=PARENT_ID,
        sequence_number=5,
        first_row_id=600,
    )


def regenerate() -> None:
    MANIFEST_DIR.mkdir(parents=True, exist_ok=True)
    for version in (1, 2):
        path = MANIFEST_DIR / f"pyiceberg-v{version}-manifest.avro"
        pyiceberg_write_manifest(path, version, VECTOR_PTYPE, VECTOR_ENTRIES, SNAPSHOT_ID)
        listed = vector_manifest_file(path.name, path.stat().st_size, version)
        pyiceberg_write_manifest_list(
            MANIFEST_DIR / f"pyiceberg-v{version}-manifest-list.avro",
            version,
            [listed],
            SNAPSHOT_ID,
            PARENT_ID if version == 2 else None,
            4,
        )
    (MANIFEST_DIR / "calving-v3-delete-manifest.avro").write_bytes(v3_delete_manifest())
    (MANIFEST_DIR / "calving-v3-manifest-list.avro").write_bytes(v3_manifest_list())


if __name__ == "__main__":
    regenerate()
