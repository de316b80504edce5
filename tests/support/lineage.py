"""An independent v3 row-lineage reader for tests: each live row's ``_row_id`` and
``_last_updated_sequence_number``, computed the spec's way from pyiceberg's reading of
the table metadata, fastavro's reading of the manifest list and manifests (pyiceberg
0.12 reads neither's ``first_row_id``; calving's inheritance code is not used)
and pyarrow's reading of the data files by field id. Only the DV blobs are decoded with
calving's deserializer (pyiceberg reads no v3 DVs)."""

from __future__ import annotations

from typing import Any

import fastavro
import pyarrow.parquet as pq

from calving.commit.spec.deletion_vector import deserialize_dv

ROW_ID = 2147483540
LAST_UPDATED = 2147483539


def _local(location: str) -> str:
    return location.removeprefix("file://")


def _by_field_id(table: Any, field_id: int) -> list[Any] | None:
    for i, f in enumerate(table.schema):
        if f.metadata and int(f.metadata.get(b"PARQUET:field_id", -1)) == field_id:
            return table.column(i).to_pylist()  # type: ignore[no-any-return]
    return None


def _records(location: str) -> list[dict[str, Any]]:
    with open(_local(location), "rb") as f:
        return list(fastavro.reader(f))  # type: ignore[arg-type]


def _manifests(metadata_location: str) -> list[dict[str, Any]]:
    from pyiceberg.table import StaticTable

    snapshot = StaticTable.from_metadata(metadata_location).current_snapshot()
    assert snapshot is not None
    return _records(snapshot.manifest_list)


def _entries(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The live entries of a manifest, in file order, as plain records."""
    return [e for e in _records(manifest["manifest_path"]) if e["status"] != 2]


def _dvs(manifests: list[dict[str, Any]]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for m in manifests:
        if m["content"] != 1:
            continue
        for e in _entries(m):
            df = e["data_file"]
            with open(_local(df["file_path"]), "rb") as f:
                f.seek(df["content_offset"])
                blob = f.read(df["content_size_in_bytes"])
            out[df["referenced_data_file"]] = set(deserialize_dv(blob, df["file_path"]))
    return out


def live_files(metadata_location: str) -> list[tuple[dict[str, Any], int | None, int]]:
    """(data file record, its effective first row id, its data sequence number) of
    every live data file, first row ids inherited as the spec says: a null one takes
    the manifest's ``first_row_id`` plus the rows of earlier null ones in the manifest."""
    out = []
    for m in _manifests(metadata_location):
        if m["content"] != 0:
            continue
        next_id = m["first_row_id"]
        for e in _entries(m):
            df = e["data_file"]
            first = df["first_row_id"]
            if first is None and next_id is not None:
                first, next_id = next_id, next_id + df["record_count"]
            seq = e["sequence_number"]
            if seq is None:  # ADDED entries inherit the manifest's sequence number
                assert e["status"] == 1
                seq = m["sequence_number"]
            out.append((df, first, seq))
    return out


def lineage(metadata_location: str, key: str) -> dict[Any, tuple[int | None, int | None]]:
    """``key`` value -> (_row_id, _last_updated_sequence_number) of every live row."""
    deleted = _dvs(_manifests(metadata_location))
    out: dict[Any, tuple[int | None, int | None]] = {}
    for df, first, seq in live_files(metadata_location):
        data = pq.read_table(_local(df["file_path"]))
        keys = data.column(key).to_pylist()
        stored_ids = _by_field_id(data, ROW_ID) or [None] * len(keys)
        stored_seqs = _by_field_id(data, LAST_UPDATED) or [None] * len(keys)
        gone = deleted.get(df["file_path"], set())
        for pos, k in enumerate(keys):
            if pos in gone:
                continue
            row_id = stored_ids[pos]
            if row_id is None and first is not None:
                row_id = first + pos
            last = stored_seqs[pos] if stored_seqs[pos] is not None else seq
            assert k not in out, f"key {k} is live twice"
            out[k] = (row_id, last)
    return out
