"""The Puffin ``deletion-vector-v1`` blob: the deleted row positions of one data file.

Blob bytes: ``length`` (4 bytes big-endian, counts magic + vector), magic ``D1 D3 39 64``,
the vector in the 64-bit Roaring "portable" layout, and a CRC-32 (big-endian) of magic +
vector. The portable layout is an 8-byte little-endian count of 32-bit bitmaps, then for
each a 4-byte little-endian key (the high 32 bits of the positions) followed by a standard
portable 32-bit Roaring bitmap, keys strictly ascending.

pyroaring's ``BitMap64.serialize`` produces exactly that layout (only non-empty bitmaps),
so writing uses it after run-length optimisation, as Iceberg Java does. Reading walks the
layout itself so every malformation is reported, and accepts the empty bitmaps Java writes
for unused keys below the highest one.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from pyroaring import BitMap, BitMap64

from calving.commit.errors import CorruptFileError
from calving.commit.spec.puffin import PuffinWriter, read_blob, read_footer

DV_BLOB_TYPE = "deletion-vector-v1"
DV_MAGIC = b"\xd1\xd3\x39\x64"
# Reserved field id of the ``_pos`` metadata column; Java lists it in the blob's fields.
ROW_POSITION_FIELD_ID = 2147483645
PROPERTY_REFERENCED_DATA_FILE = "referenced-data-file"
#: Reserved field id of a position delete's ``file_path`` column. A DV's manifest entry
#: carries the referenced data file as that column's lower and upper bound (as
#: file-scoped position-delete files do), so readers that match delete files to data
#: files by those bounds (pyiceberg) apply each DV to its own data file only.
DELETE_FILE_PATH_FIELD_ID = 2147483546
PROPERTY_CARDINALITY = "cardinality"

# Positions must keep the sign bit clear (spec); Iceberg Java also caps the key at
# 2**31 - 2 and the low word at 2**31, so the writer stays within what Java can read.
MAX_KEY = 2**31 - 1
MAX_WRITE_POSITION = ((2**31 - 2) << 32) | 2**31

_LENGTH_SIZE = 4
_CRC_SIZE = 4
_COUNT_SIZE = 8
_KEY_SIZE = 4
_EMPTY_BITMAP32 = BitMap().serialize()
# Smallest serialized (key, bitmap) pair: a key and an empty 32-bit bitmap.
_MIN_ENTRY_SIZE = _KEY_SIZE + len(_EMPTY_BITMAP32)


class DVBlobRef(NamedTuple):
    """Where one DV landed in a Puffin file: the manifest entry's fields for it."""

    referenced_data_file: str
    content_offset: int
    content_size_in_bytes: int
    cardinality: int


# ---------------------------------------------------------------- writing


def to_positions(positions: BitMap64 | Iterable[int]) -> BitMap64:
    """``positions`` as a new BitMap64, checking the range Iceberg readers accept."""
    bitmap = positions.copy() if isinstance(positions, BitMap64) else BitMap64(positions)
    if bitmap and bitmap.max() > MAX_WRITE_POSITION:
        raise ValueError(f"row position {bitmap.max()} exceeds {MAX_WRITE_POSITION}")
    return bitmap


def serialize_dv(positions: BitMap64 | Iterable[int]) -> bytes:
    """The ``deletion-vector-v1`` blob bytes for ``positions`` (row positions >= 0)."""
    bitmap = to_positions(positions)
    bitmap.run_optimize()
    body = DV_MAGIC + bitmap.serialize()
    crc = zlib.crc32(body)
    return len(body).to_bytes(_LENGTH_SIZE, "big") + body + crc.to_bytes(_CRC_SIZE, "big")


def dv_blob_metadata(referenced_data_file: str, cardinality: int) -> dict[str, Any]:
    """Keyword arguments of ``PuffinWriter.add_blob`` (all but ``data``) for a DV blob."""
    return {
        "type": DV_BLOB_TYPE,
        "fields": (ROW_POSITION_FIELD_ID,),
        "snapshot_id": -1,
        "sequence_number": -1,
        "properties": {
            PROPERTY_REFERENCED_DATA_FILE: referenced_data_file,
            PROPERTY_CARDINALITY: str(cardinality),
        },
    }


def write_dv_puffin(
    dvs: Sequence[tuple[str, BitMap64 | Iterable[int]]], compress_footer: bool = False
) -> tuple[bytes, list[DVBlobRef]]:
    """One Puffin file holding a DV per referenced data file, in the given order.

    Empty position sets are refused: they delete nothing, and pyiceberg 0.12 fails to
    read them."""
    seen: set[str] = set()
    writer = PuffinWriter()
    refs: list[DVBlobRef] = []
    for data_file, positions in dvs:
        if data_file in seen:
            raise ValueError(f"two deletion vectors for data file {data_file!r}")
        seen.add(data_file)
        bitmap = to_positions(positions)
        if not bitmap:
            raise ValueError(f"empty deletion vector for data file {data_file!r}")
        blob = writer.add_blob(
            data=serialize_dv(bitmap), **dv_blob_metadata(data_file, len(bitmap))
        )
        refs.append(DVBlobRef(data_file, blob.offset, blob.length, len(bitmap)))
    return writer.finish(compress_footer=compress_footer), refs


# ---------------------------------------------------------------- reading


def deserialize_dv(blob: bytes, source: str, cardinality: int | None = None) -> BitMap64:
    """Decode ``deletion-vector-v1`` blob bytes; any malformation is a CorruptFileError.

    ``cardinality``, when known (manifest ``record_count`` or the blob's property), must
    equal the number of decoded positions."""
    blob = bytes(blob)
    minimum = _LENGTH_SIZE + len(DV_MAGIC) + _COUNT_SIZE + _CRC_SIZE
    if len(blob) < minimum:
        raise CorruptFileError(source, f"deletion vector of {len(blob)} bytes is truncated")
    declared = int.from_bytes(blob[:_LENGTH_SIZE], "big")
    actual = len(blob) - _LENGTH_SIZE - _CRC_SIZE
    if declared != actual:
        raise CorruptFileError(
            source, f"deletion vector length field says {declared} bytes, blob holds {actual}"
        )
    body = blob[_LENGTH_SIZE:-_CRC_SIZE]
    if body[: len(DV_MAGIC)] != DV_MAGIC:
        raise CorruptFileError(source, f"bad deletion vector magic {body[:4].hex()}")
    stored_crc = int.from_bytes(blob[-_CRC_SIZE:], "big")
    if zlib.crc32(body) != stored_crc:
        raise CorruptFileError(source, "deletion vector CRC-32 does not match its content")
    positions = _parse_vector(body[len(DV_MAGIC) :], source)
    if cardinality is not None and cardinality != len(positions):
        raise CorruptFileError(
            source, f"deletion vector holds {len(positions)} positions, expected {cardinality}"
        )
    return positions


def _parse_vector(vector: bytes, source: str) -> BitMap64:
    count = int.from_bytes(vector[:_COUNT_SIZE], "little")
    position = _COUNT_SIZE
    if count > (len(vector) - position) // _MIN_ENTRY_SIZE:
        raise CorruptFileError(
            source, f"deletion vector claims {count} bitmaps, more than its bytes can hold"
        )
    non_empty: list[bytes] = []
    has_empty = False
    last_key = -1
    for _ in range(count):
        if position + _KEY_SIZE > len(vector):
            raise CorruptFileError(source, "deletion vector truncated inside a bitmap key")
        key = int.from_bytes(vector[position : position + _KEY_SIZE], "little")
        if key > MAX_KEY:
            raise CorruptFileError(source, f"deletion vector key {key} sets the sign bit")
        if key <= last_key:
            raise CorruptFileError(
                source, f"deletion vector keys not ascending: {key} after {last_key}"
            )
        last_key = key
        start = position
        position += _KEY_SIZE
        size, empty = _bitmap32_size(vector, position, key, source)
        position += size
        if empty:
            has_empty = True
        else:
            non_empty.append(vector[start:position])
    if position != len(vector):
        raise CorruptFileError(
            source, f"{len(vector) - position} trailing bytes after the deletion vector"
        )
    if has_empty:
        vector = len(non_empty).to_bytes(_COUNT_SIZE, "little") + b"".join(non_empty)
    try:
        return BitMap64.deserialize(vector)
    except ValueError as exc:  # already validated part by part; kept as a safety net
        raise CorruptFileError(source, f"deletion vector does not decode: {exc}") from exc


def _bitmap32_size(vector: bytes, position: int, key: int, source: str) -> tuple[int, bool]:
    """Size and emptiness of the 32-bit bitmap starting at ``position``.

    The bytes must be exactly the canonical serialization of what they decode to: that
    checks the header's cardinalities and offsets as well as the containers."""
    rest = memoryview(vector)[position:]
    try:
        # A view, not a copy: a blob with many keys must not cost quadratic time.
        bitmap = BitMap.deserialize(rest)  # type: ignore[arg-type]
    except (ValueError, MemoryError) as exc:
        raise CorruptFileError(
            source, f"deletion vector bitmap for key {key} is malformed: {exc}"
        ) from exc
    canonical = bitmap.serialize()
    if rest[: len(canonical)] != canonical:
        raise CorruptFileError(
            source, f"deletion vector bitmap for key {key} has inconsistent headers"
        )
    return len(canonical), not bitmap


def read_dvs(puffin_bytes: bytes, source: str) -> dict[str, BitMap64]:
    """Every deletion vector of a Puffin file, keyed by referenced data file; other blob
    types are skipped."""
    puffin = read_footer(puffin_bytes, source)
    out: dict[str, BitMap64] = {}
    for blob in puffin.blobs:
        if blob.type != DV_BLOB_TYPE:
            continue
        where = f"{source} (blob at offset {blob.offset})"
        if blob.compression_codec is not None:
            raise CorruptFileError(where, "deletion vector blobs must not be compressed")
        data_file = blob.properties.get(PROPERTY_REFERENCED_DATA_FILE)
        if data_file is None:
            raise CorruptFileError(where, "deletion vector has no referenced-data-file")
        if data_file in out:
            raise CorruptFileError(where, f"second deletion vector for {data_file!r}")
        declared = blob.properties.get(PROPERTY_CARDINALITY)
        if declared is not None and not (declared.isascii() and declared.isdigit()):
            raise CorruptFileError(where, f"deletion vector cardinality {declared!r}")
        out[data_file] = deserialize_dv(
            read_blob(puffin_bytes, blob, source),
            where,
            None if declared is None else int(declared),
        )
    return out


def referenced_file_bounds(data_file_path: str) -> dict[int, bytes]:
    """The ``file_path`` bound of a DV's manifest entry (lower = upper, the path's UTF-8
    bytes: Iceberg's single-value serialization of a string)."""
    return {DELETE_FILE_PATH_FIELD_ID: data_file_path.encode("utf-8")}
