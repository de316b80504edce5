"""Metadata files as the server writes and returns them.

calving's serializer writes format-version 3; the server also keeps format-version 2
tables (pyiceberg 0.12 writes only v2 data), written by the same serializer with the
v3-only key dropped: v2 and v3 metadata JSON differ only in ``next-row-id`` (snapshot
row-lineage fields are absent from v2 snapshots).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from typing import Any

from calving.commit.errors import CorruptFileError
from calving.commit.io import FileIO
from calving.commit.spec.metadata import (
    TableMetadata,
    metadata_json,
    metadata_to_json,
    parse_metadata,
    serialize_metadata,
)
from calving.commit.spec.metadata_gzip import metadata_file_bytes

_V3_ONLY_KEYS = ("next-row-id",)


def metadata_bytes(m: TableMetadata) -> bytes:
    if m.format_version == 3:
        return serialize_metadata(m)
    obj = metadata_to_json(dataclasses.replace(m, format_version=3))
    obj["format-version"] = m.format_version
    for key in _V3_ONLY_KEYS:
        obj.pop(key, None)
    for snapshot in obj["snapshots"]:
        snapshot.pop("first-row-id", None)
        snapshot.pop("added-rows", None)
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


def metadata_file(m: TableMetadata, data: bytes, codec: str) -> bytes:
    """The file of ``m``, whose JSON is ``data`` (``metadata_bytes``), under ``codec``
    (the catalog's ``metadata_codec``): format v3 through calving's writer encoding
    (gzip from pieces compressed once), an older format's JSON gzip-compressed whole."""
    if codec == "none":
        return data
    if m.format_version == 3:
        return metadata_file_bytes(m, codec)
    return gzip.compress(data, mtime=0)


def read_metadata(io: FileIO, location: str) -> tuple[TableMetadata, dict[str, Any]]:
    """The parsed metadata and its JSON object, as the file holds it."""
    data = metadata_json(io.read(location), location)
    metadata = parse_metadata(data, location)
    obj = json.loads(data.decode("utf-8"))
    if not isinstance(obj, dict):
        raise CorruptFileError(location, "table metadata JSON is not an object")
    return metadata, obj
