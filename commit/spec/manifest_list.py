"""Manifest lists: write format versions 1-3 (calving writes 3), read 1-3. Pure: bytes
in, values out, and back byte for byte."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from calving.commit.errors import CorruptFileError, SchemaError
from calving.commit.spec.avro_file import (
    encode_record,
    read_container,
    schema_text,
    write_container,
)
from calving.commit.spec.avro_schemas import (
    FIELD_SUMMARY_FIELDS,
    FORMAT_VERSIONS,
    MANIFEST_FILE_FIELDS,
    PARTITIONS_FIELD_ID,
    RecordFields,
    manifest_file_schema,
)
from calving.commit.spec.data_file import FieldSummary, ManifestContent, ManifestFile

_MALFORMED = (
    SchemaError,
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    IndexError,
    OverflowError,
)


@dataclass(frozen=True)
class ManifestList:
    """A decoded manifest list with its Avro key-value metadata (``snapshot-id`` etc.,
    None where absent). ``parent-snapshot-id`` ``"null"`` reads as None."""

    format_version: int
    snapshot_id: int | None
    parent_snapshot_id: int | None
    sequence_number: int | None
    first_row_id: int | None
    manifests: tuple[ManifestFile, ...]
    sync_marker: bytes


# ---------------------------------------------------------------- writing


def _check_fits(manifest: ManifestFile, format_version: int) -> None:
    lost = []
    if format_version < 3 and manifest.first_row_id is not None:
        lost.append("first_row_id")
    if format_version == 1 and manifest.content != ManifestContent.DATA:
        lost.append("content (v1 lists hold data manifests only)")
    if lost:
        raise ValueError(f"{manifest.manifest_path}: a v{format_version} list cannot hold {lost}")


def _record(m: ManifestFile) -> dict[str, Any]:
    partitions = None
    if m.partitions is not None:
        partitions = [
            {
                "contains_null": s.contains_null,
                "contains_nan": s.contains_nan,
                "lower_bound": s.lower_bound,
                "upper_bound": s.upper_bound,
            }
            for s in m.partitions
        ]
    return {
        "manifest_path": m.manifest_path,
        "manifest_length": m.manifest_length,
        "partition_spec_id": m.partition_spec_id,
        "content": int(m.content),
        "sequence_number": m.sequence_number,
        "min_sequence_number": m.min_sequence_number,
        "added_snapshot_id": m.added_snapshot_id,
        "added_files_count": m.added_files_count,
        "existing_files_count": m.existing_files_count,
        "deleted_files_count": m.deleted_files_count,
        "added_rows_count": m.added_rows_count,
        "existing_rows_count": m.existing_rows_count,
        "deleted_rows_count": m.deleted_rows_count,
        "partitions": partitions,
        "key_metadata": m.key_metadata,
        "first_row_id": m.first_row_id,
    }


def write_manifest_list(
    manifests: Sequence[ManifestFile],
    *,
    snapshot_id: int,
    parent_snapshot_id: int | None,
    sequence_number: int,
    first_row_id: int | None,
    format_version: int = 3,
    sync_marker: bytes | None = None,
) -> bytes:
    """The manifest list of a snapshot, with Java's key-value metadata: ``snapshot-id``,
    ``parent-snapshot-id`` (``"null"`` for none), ``sequence-number`` (v2+),
    ``format-version`` and ``first-row-id`` (v3, when given)."""
    if format_version not in FORMAT_VERSIONS:
        raise ValueError(f"cannot write a format version {format_version} manifest list")
    for manifest in manifests:
        _check_fits(manifest, format_version)
    metadata = {
        "snapshot-id": str(snapshot_id),
        "parent-snapshot-id": "null" if parent_snapshot_id is None else str(parent_snapshot_id),
    }
    if format_version >= 2:
        metadata["sequence-number"] = str(sequence_number)
    metadata["format-version"] = str(format_version)
    if format_version >= 3 and first_row_id is not None:
        metadata["first-row-id"] = str(first_row_id)
    records = [_encoded(format_version, m) for m in manifests]
    return write_container(_list_schema_text(format_version), records, metadata, sync_marker)


@functools.lru_cache(maxsize=4096)
def _encoded(format_version: int, manifest: ManifestFile) -> bytes:
    """A manifest-list entry's Avro body: most entries are carried from one snapshot's
    list into the next unchanged, so each is encoded once."""
    return encode_record(_list_schema_text(format_version), _record(manifest))


@functools.lru_cache(maxsize=8)
def _list_schema_text(format_version: int) -> str:
    return schema_text(manifest_file_schema(format_version))


# ---------------------------------------------------------------- reading


class _ManifestFileDecoder:
    def __init__(self, schema: Any, version: int) -> None:
        self.version = version
        self.fields = RecordFields(schema, "manifest_file", MANIFEST_FILE_FIELDS)
        self.summary: RecordFields | None = None
        if self.fields.has(PARTITIONS_FIELD_ID):
            array = self.fields.type_of(PARTITIONS_FIELD_ID)
            if not isinstance(array, dict) or array.get("type") != "array":
                raise SchemaError("manifest_file partitions is not an array")
            self.summary = RecordFields(array.get("items"), "field_summary", FIELD_SUMMARY_FIELDS)

    def _summary(self, raw: Any) -> FieldSummary:
        s = self.summary
        assert s is not None
        return FieldSummary(
            contains_null=s.value(raw, 509, bool, True),
            contains_nan=s.value(raw, 518, bool, False),
            lower_bound=s.value(raw, 510, bytes, False),
            upper_bound=s.value(raw, 511, bytes, False),
        )

    def decode(self, record: dict[str, Any]) -> ManifestFile:
        f = self.fields
        v2 = self.version >= 2

        def count(field_id: int) -> int:
            # v1 counts are optional ("null = unknown"); they read as 0.
            value = f.value(record, field_id, int, v2)
            return 0 if value is None else value

        raw_partitions = f.value(record, PARTITIONS_FIELD_ID, list, False)
        content = f.value(record, 517, int, v2)
        return ManifestFile(
            manifest_path=f.value(record, 500, str, True),
            manifest_length=f.value(record, 501, int, True),
            partition_spec_id=f.value(record, 502, int, True),
            content=ManifestContent(0 if content is None else content),
            sequence_number=count(515),
            min_sequence_number=count(516),
            added_snapshot_id=f.value(record, 503, int, True),
            added_files_count=count(504),
            existing_files_count=count(505),
            deleted_files_count=count(506),
            added_rows_count=count(512),
            existing_rows_count=count(513),
            deleted_rows_count=count(514),
            partitions=None
            if raw_partitions is None
            else tuple(self._summary(p) for p in raw_partitions),
            key_metadata=f.value(record, 519, bytes, False),
            first_row_id=f.value(record, 520, int, False),
        )


def _optional_int(metadata: dict[str, str], key: str) -> int | None:
    text = metadata.get(key)
    if text is None or text == "null":
        return None
    try:
        return int(text)
    except ValueError:
        raise SchemaError(f"metadata {key}={text!r} is not an integer") from None


def read_manifest_list(
    data: bytes, source: str, *, added_snapshot_id: int | None = None
) -> ManifestList:
    """Decode a v1, v2 or v3 manifest list; corrupt bytes raise ``CorruptFileError``.
    ``added_snapshot_id``: only the manifests that snapshot added (the others are not
    decoded)."""
    container = read_container(data, source)
    meta = container.metadata
    try:
        version = _optional_int(meta, "format-version")
        version = 1 if version is None else version
        if version not in FORMAT_VERSIONS:
            raise SchemaError(f"unknown format-version {version}")
        decoder = _ManifestFileDecoder(container.schema, version)
        records = container.records
        if added_snapshot_id is not None:
            own = decoder.fields
            records = tuple(r for r in records if own.value(r, 503, int, True) == added_snapshot_id)
        manifests = tuple(decoder.decode(r) for r in records)
        result = ManifestList(
            format_version=version,
            snapshot_id=_optional_int(meta, "snapshot-id"),
            parent_snapshot_id=_optional_int(meta, "parent-snapshot-id"),
            sequence_number=_optional_int(meta, "sequence-number"),
            first_row_id=_optional_int(meta, "first-row-id"),
            manifests=manifests,
            sync_marker=container.sync_marker,
        )
    except _MALFORMED as exc:
        raise CorruptFileError(source, f"not a valid manifest list: {exc}") from None
    return result
