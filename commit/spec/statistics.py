"""Table statistics files (the table metadata's ``statistics`` list): typed values and
their JSON form.

A statistics file is a Puffin file of blobs about one snapshot, e.g. one
``apache-datasketches-theta-v1`` sketch per column with its ``ndv`` estimate. The table
metadata lists at most one per snapshot. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from calving.commit.errors import CorruptFileError

THETA_BLOB_TYPE = "apache-datasketches-theta-v1"
NDV_PROPERTY = "ndv"


@dataclass(frozen=True)
class StatisticsBlob:
    """One blob's entry in ``blob-metadata``."""

    type: str
    snapshot_id: int
    sequence_number: int
    fields: tuple[int, ...]
    properties: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "snapshot-id": self.snapshot_id,
            "sequence-number": self.sequence_number,
            "fields": list(self.fields),
        }
        if self.properties:
            out["properties"] = dict(self.properties)
        return out


@dataclass(frozen=True)
class StatisticsFile:
    """One entry of the table metadata's ``statistics`` list."""

    snapshot_id: int
    statistics_path: str
    file_size_in_bytes: int
    file_footer_size_in_bytes: int
    blob_metadata: tuple[StatisticsBlob, ...]
    key_metadata: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "snapshot-id": self.snapshot_id,
            "statistics-path": self.statistics_path,
            "file-size-in-bytes": self.file_size_in_bytes,
            "file-footer-size-in-bytes": self.file_footer_size_in_bytes,
            "blob-metadata": [b.to_json() for b in self.blob_metadata],
        }
        if self.key_metadata is not None:
            out["key-metadata"] = self.key_metadata
        return out


def statistics_from_json(obj: Any, source: str) -> StatisticsFile:
    """Parse one ``statistics`` entry; a malformed one is a ``CorruptFileError``."""
    if not isinstance(obj, Mapping):
        raise CorruptFileError(source, f"statistics entry is {type(obj).__name__}, not an object")
    try:
        blobs = tuple(_blob_from_json(b) for b in obj.get("blob-metadata") or ())
        return StatisticsFile(
            snapshot_id=_long(obj["snapshot-id"]),
            statistics_path=str(obj["statistics-path"]),
            file_size_in_bytes=_long(obj["file-size-in-bytes"]),
            file_footer_size_in_bytes=_long(obj["file-footer-size-in-bytes"]),
            blob_metadata=blobs,
            key_metadata=obj.get("key-metadata"),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise CorruptFileError(source, f"statistics entry is malformed: {err!r}") from None


def _blob_from_json(obj: Mapping[str, Any]) -> StatisticsBlob:
    props = obj.get("properties") or {}
    return StatisticsBlob(
        type=str(obj["type"]),
        snapshot_id=_long(obj["snapshot-id"]),
        sequence_number=_long(obj["sequence-number"]),
        fields=tuple(_long(f) for f in obj["fields"]),
        properties={str(k): str(v) for k, v in props.items()},
    )


def _long(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not a whole number")
    return value
