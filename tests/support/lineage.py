"""A reference v3 row-lineage reader for tests, written from the table spec alone.

It shares no code with calving: table metadata is read with ``json``, manifest lists and
manifests with fastavro, data files with pyarrow (columns found by Parquet field id), and
deletion vectors by this module's own reading of the Puffin ``deletion-vector-v1`` blob
and the portable Roaring layout. The rules it applies are the spec's:

* a snapshot's live data files are the non-DELETED entries of its data manifests; an
  ADDED entry's null data sequence number is the manifest's ``sequence_number``
  (sequence number inheritance);
* a data file's null ``first_row_id`` is its manifest's ``first_row_id`` plus the
  ``record_count`` of the live files before it in that manifest whose ``first_row_id``
  is also null (first row id inheritance);
* a deletion vector (a delete manifest's entry naming ``referenced_data_file``) removes
  its positions from that file when its data sequence number is not below the file's;
  at most one applies per data file;
* a row's ``_row_id`` is the stored column (field id 2147483540) when not null, else the
  file's ``first_row_id`` plus the row's position; its ``_last_updated_sequence_number``
  is the stored column (2147483539) when not null, else the file's data sequence number.

``snapshot_rows`` gives every live row of a snapshot with both values and its columns
(by field id, onto the snapshot's schema; a column missing from a file reads its
``initial-default``, else null).
"""

from __future__ import annotations

import gzip
import json
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np
import pyarrow.parquet as pq

ROW_ID = 2147483540
LAST_UPDATED = 2147483539
_DV_MAGIC = b"\xd1\xd3\x39\x64"
_DELETED = 2  # manifest entry status
_ADDED = 1


class LineageError(AssertionError):
    """The table breaks a rule of the spec the reference reader relies on."""


# ---------------------------------------------------------------- files


def _local(location: str) -> str:
    return location.removeprefix("file://")


def _avro(location: str) -> list[dict[str, Any]]:
    with open(_local(location), "rb") as f:
        return list(fastavro.reader(f))  # type: ignore[arg-type]  # fastavro's reader stub wants its own file protocol; a binary file is one


def read_metadata(metadata_location: str) -> dict[str, Any]:
    """The metadata file's JSON; gzip when its name says so (``*.gz.metadata.json``, as
    Iceberg Java and pyiceberg tell it)."""
    path = _local(metadata_location)
    opener = gzip.open if path.endswith(".gz.metadata.json") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def snapshot_of(metadata: dict[str, Any], snapshot_id: int | None = None) -> dict[str, Any] | None:
    """The snapshot ``snapshot_id`` (the current one when None; None for an empty table)."""
    wanted = metadata.get("current-snapshot-id") if snapshot_id is None else snapshot_id
    if wanted is None or wanted == -1:
        return None
    for snap in metadata.get("snapshots", []):
        if snap["snapshot-id"] == wanted:
            return snap
    raise LineageError(f"snapshot {wanted} is not in the table metadata")


# ---------------------------------------------------------------- deletion vectors


def roaring32(data: bytes, at: int) -> tuple[list[int], int]:
    """One portable 32-bit Roaring bitmap at ``data[at:]``: its values and where it ends
    (RoaringFormatSpec: cookie, container headers, optional offsets, containers)."""
    base = at
    (cookie,) = struct.unpack_from("<I", data, at)
    at += 4
    if cookie & 0xFFFF == 12347:  # SERIAL_COOKIE: run containers possible
        count = (cookie >> 16) + 1
        run_flags = data[at : at + (count + 7) // 8]
        at += (count + 7) // 8
        has_offsets = count >= 4
    elif cookie == 12346:  # SERIAL_COOKIE_NO_RUNCONTAINER
        (count,) = struct.unpack_from("<I", data, at)
        at += 4
        run_flags = bytes((count + 7) // 8)
        has_offsets = True
    else:
        raise LineageError(f"not a portable Roaring bitmap (cookie {cookie:#x})")
    headers = [struct.unpack_from("<HH", data, at + 4 * i) for i in range(count)]
    at += 4 * count
    if has_offsets:
        offsets = struct.unpack_from(f"<{count}I", data, at)
        at += 4 * count
    values: list[int] = []
    for i, (key, card_minus_one) in enumerate(headers):
        if has_offsets and offsets[i] != at - base:
            raise LineageError(
                f"Roaring container {i} at {at - base}, its offset says {offsets[i]}"
            )
        high = key << 16
        if run_flags[i // 8] >> (i % 8) & 1:
            (runs,) = struct.unpack_from("<H", data, at)
            pairs = struct.unpack_from(f"<{2 * runs}H", data, at + 2)
            part = [v for s, n in zip(pairs[::2], pairs[1::2]) for v in range(s, s + n + 1)]
            at += 2 + 4 * runs
        elif card_minus_one < 4096:
            part = list(struct.unpack_from(f"<{card_minus_one + 1}H", data, at))
            at += 2 * (card_minus_one + 1)
        else:
            words = np.frombuffer(data, dtype="<u8", count=1024, offset=at)
            part = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little")).tolist()
            at += 8192
        if len(part) != card_minus_one + 1:
            raise LineageError(
                f"Roaring container {i}: {len(part)} values, header says {card_minus_one + 1}"
            )
        values.extend(high + v for v in part)
    return values, at


def dv_positions(blob: bytes) -> set[int]:
    """The row positions of a ``deletion-vector-v1`` blob (Puffin spec): big-endian
    length of magic + vector, the magic, the 64-bit portable Roaring vector (little-endian
    count, then per bitmap a little-endian key and a 32-bit portable bitmap), then a
    big-endian CRC-32 of magic + vector."""
    (length,) = struct.unpack_from(">I", blob, 0)
    body = blob[4 : 4 + length]
    if body[:4] != _DV_MAGIC:
        raise LineageError("deletion vector without its magic bytes")
    (crc,) = struct.unpack_from(">I", blob, 4 + length)
    if zlib.crc32(body) != crc:
        raise LineageError("deletion vector CRC mismatch")
    (count,) = struct.unpack_from("<Q", body, 4)
    at = 12
    out: set[int] = set()
    for _ in range(count):
        (key,) = struct.unpack_from("<I", body, at)
        values, at = roaring32(body, at + 4)
        out.update((key << 32) | v for v in values)
    if at != len(body):
        raise LineageError(f"deletion vector has {len(body) - at} trailing bytes")
    return out


def read_dv(entry_file: dict[str, Any]) -> set[int]:
    with open(_local(entry_file["file_path"]), "rb") as f:
        f.seek(entry_file["content_offset"])
        blob = f.read(entry_file["content_size_in_bytes"])
    return dv_positions(blob)


# ---------------------------------------------------------------- manifests


@dataclass(frozen=True)
class LiveFile:
    """A live data file of a snapshot with its inherited values."""

    path: str
    record_count: int
    first_row_id: int | None
    data_sequence_number: int


def _data_sequence_number(entry: dict[str, Any], manifest: dict[str, Any]) -> int:
    seq = entry["sequence_number"]
    if seq is None:
        if entry["status"] != _ADDED:
            raise LineageError(f"non-ADDED entry without sequence number in {manifest}")
        seq = manifest["sequence_number"]
    return int(seq)


def manifest_list(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    return _avro(snapshot["manifest-list"])


def data_files_of(manifest: dict[str, Any]) -> list[LiveFile]:
    """The live data files of one data manifest, first row ids inherited."""
    out = []
    next_id = manifest.get("first_row_id")
    for e in _avro(manifest["manifest_path"]):
        if e["status"] == _DELETED:
            continue
        df = e["data_file"]
        first = df.get("first_row_id")
        if first is None and next_id is not None:
            first, next_id = next_id, next_id + df["record_count"]
        out.append(
            LiveFile(df["file_path"], df["record_count"], first, _data_sequence_number(e, manifest))
        )
    return out


def live_files(snapshot: dict[str, Any] | None) -> list[LiveFile]:
    if snapshot is None:
        return []
    return [f for m in manifest_list(snapshot) if m["content"] == 0 for f in data_files_of(m)]


def deleted_positions(
    snapshot: dict[str, Any] | None, files: Sequence[LiveFile]
) -> dict[str, set[int]]:
    """Data file path -> positions its deletion vector removes."""
    if snapshot is None:
        return {}
    seqs = {f.path: f.data_sequence_number for f in files}
    out: dict[str, set[int]] = {}
    for m in manifest_list(snapshot):
        if m["content"] != 1:
            continue
        for e in _avro(m["manifest_path"]):
            if e["status"] == _DELETED:
                continue
            df = e["data_file"]
            target = df.get("referenced_data_file")
            if df["content"] != 1 or target is None:
                raise LineageError(f"{df['file_path']}: not a deletion vector")
            if target in out:
                raise LineageError(f"{target} has more than one deletion vector")
            if target in seqs and _data_sequence_number(e, m) < seqs[target]:
                continue  # older than the data file: does not apply
            out[target] = read_dv(df)
    return out


# ---------------------------------------------------------------- rows


@dataclass(frozen=True)
class RefRow:
    row_id: int | None
    last_updated: int
    file: str
    position: int
    values: dict[str, Any]


def _schema(metadata: dict[str, Any], snapshot: dict[str, Any] | None) -> dict[str, Any]:
    wanted = metadata.get("current-schema-id")
    if snapshot is not None and snapshot.get("schema-id") is not None:
        wanted = snapshot["schema-id"]
    for s in metadata["schemas"]:
        if s["schema-id"] == wanted:
            return s
    raise LineageError(f"schema {wanted} is not in the table metadata")


def _columns_by_field_id(path: str) -> tuple[Any, dict[int, int]]:
    table = pq.read_table(_local(path))
    by_id = {}
    for i, f in enumerate(table.schema):
        if f.metadata and b"PARQUET:field_id" in f.metadata:
            by_id[int(f.metadata[b"PARQUET:field_id"])] = i
    return table, by_id


def file_rows(live: LiveFile, schema: dict[str, Any], gone: Iterable[int] = ()) -> list[RefRow]:
    """The rows of one data file not in ``gone``, with lineage and values."""
    table, by_id = _columns_by_field_id(live.path)
    n = table.num_rows
    if n != live.record_count:
        raise LineageError(f"{live.path}: {n} rows, its manifest entry says {live.record_count}")

    def column(field_id: int, default: Any = None) -> list[Any]:
        at = by_id.get(field_id)
        return [default] * n if at is None else table.column(at).to_pylist()

    stored_ids = column(ROW_ID)
    stored_seqs = column(LAST_UPDATED)
    values = {f["name"]: column(f["id"], f.get("initial-default")) for f in schema["fields"]}
    skip = set(gone)
    out = []
    for pos in range(n):
        if pos in skip:
            continue
        row_id = stored_ids[pos]
        if row_id is None and live.first_row_id is not None:
            row_id = live.first_row_id + pos
        last = stored_seqs[pos]
        out.append(
            RefRow(
                row_id,
                live.data_sequence_number if last is None else last,
                live.path,
                pos,
                {name: col[pos] for name, col in values.items()},
            )
        )
    return out


def snapshot_rows(metadata_location: str, snapshot_id: int | None = None) -> list[RefRow]:
    """Every live row of a snapshot (the current one by default)."""
    metadata = read_metadata(metadata_location)
    snapshot = snapshot_of(metadata, snapshot_id)
    files = live_files(snapshot)
    deleted = deleted_positions(snapshot, files)
    schema = _schema(metadata, snapshot)
    return [r for f in files for r in file_rows(f, schema, deleted.get(f.path, ()))]


def key_of(row: RefRow, key: str | Sequence[str]) -> Any:
    if isinstance(key, str):
        return row.values[key]
    return tuple(row.values[k] for k in key)


def lineage(
    metadata_location: str, key: str | Sequence[str], snapshot_id: int | None = None
) -> dict[Any, tuple[int | None, int | None]]:
    """``key`` value -> (_row_id, _last_updated_sequence_number) of every live row."""
    out: dict[Any, tuple[int | None, int | None]] = {}
    for r in snapshot_rows(metadata_location, snapshot_id):
        k = key_of(r, key)
        if k in out:
            raise LineageError(f"key {k!r} is live twice")
        out[k] = (r.row_id, r.last_updated)
    return out


def identity_changes(metadata_location: str, key: str) -> tuple[int, int]:
    """Over the current snapshot's history: (keys live on both sides of a snapshot whose
    row was rewritten and kept its ``_row_id``, keys whose row got a new ``_row_id``).
    A rewritten row is one whose ``_last_updated_sequence_number`` moved on."""
    metadata = read_metadata(metadata_location)
    chain = []
    snap = snapshot_of(metadata)
    while snap is not None:
        chain.append(snap["snapshot-id"])
        parent = snap.get("parent-snapshot-id")
        snap = snapshot_of(metadata, parent) if parent is not None else None
    kept = new = 0
    before: dict[Any, tuple[int | None, int | None]] = {}
    for sid in reversed(chain):
        after = lineage(metadata_location, key, sid)
        for k, (row_id, last) in after.items():
            if k not in before:
                continue
            old_id, old_last = before[k]
            if row_id != old_id:
                new += 1
            elif last != old_last:
                kept += 1
        before = after
    return kept, new
