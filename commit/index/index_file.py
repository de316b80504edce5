"""The index file format, shared by the saved index (``store``) and its shards (``shards``).

Format 2:

* a 20-byte header: the magic ``CALVIDX\\0``, the format version (uint32 LE, 2) and the
  payload length (uint64 LE);
* the payload: an Arrow IPC file (its buffers zstd- or lz4-compressed, or not at all:
  ``Compression``) with columns ``key`` (int64 for a one-column
  integer key, else the canonical key bytes as large_binary), ``file`` (uint32, into the
  file table) and ``position`` (uint32), and schema metadata: ``calving.index.format``,
  ``calving.table-uuid``, ``calving.snapshot-id``, ``calving.key-field-ids`` and
  ``calving.key-types`` (JSON), and ``calving.files`` (JSON ``[[path, row count], ...]``);
* a CRC-32 (zlib, uint32 LE) of header and payload.

The checksum is verified before anything else is parsed, so no corruption a CRC-32
detects (every error in up to 32 consecutive bits) is ever read as entries. Hashes are not
stored: they are recomputed on load, so a file never depends on the hash function of the
writer. Format 1 files (a bare Arrow IPC file, no checksum) are not read: the index is
rebuilt from the table.

``frame`` and ``unframe`` put the same header and checksum around any payload (the shard
manifest's JSON uses them with its own magic).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from calving.commit.errors import (
    CalvingError,
    CorruptFileError,
    FileIOError,
    FileNotFoundInTableError,
    SchemaError,
)
from calving.commit.index.keys import ByteKeys, IntKeys, Keys
from calving.commit.io import FileIO
from calving.commit.spec.types import PrimitiveType, primitive_from_string

FORMAT_VERSION = 2
_MAGIC = b"CALVIDX\0"
_HEADER = struct.Struct("<8sIQ")  # magic, format version, payload length
_CHECKSUM = struct.Struct("<I")  # CRC-32 of header and payload
_ARROW_MAGIC = b"ARROW1"  # a format 1 file: a bare Arrow IPC file
_MD_FORMAT = b"calving.index.format"
_MD_UUID = b"calving.table-uuid"
_MD_SNAPSHOT = b"calving.snapshot-id"
_MD_KEY_IDS = b"calving.key-field-ids"
_MD_KEY_TYPES = b"calving.key-types"
_MD_FILES = b"calving.files"


class Compression:
    """The payload's buffer compression, by how long a file lives and how often it is
    read. A reader takes any (Arrow IPC names the codec of every buffer)."""

    #: The saved index: written once every few commits, kept, read at a restart.
    SAVED = "zstd"
    #: A shard's base: written once a chain is long, read by every worker that lacks
    #: it. zstd took 59 ms to write 500k entries where lz4 took 12 (7 MB against 5).
    BASE = "lz4"
    #: A shard's delta, or a rebuild's piece: small, read once or twice, then dropped.
    #: Either codec cost 0.4-0.6 ms to write 6k entries and 0.2-0.4 to read, none
    #: 0.03-0.04, for 98 KB against 63-86 (int keys; string keys: 205 KB against 60).
    TRANSIENT = None


class UnreadableIndexError(CorruptFileError):
    """The index file cannot be trusted: unreadable, truncated, of an older or unknown
    format, failing its checksum, or malformed. Rebuild the index from the table
    (``open_index`` does)."""


def file_header(
    table_uuid: str,
    snapshot_id: int | None,
    key_field_ids: Sequence[int],
    key_types: Sequence[PrimitiveType],
    files: Sequence[tuple[str, int]],
) -> dict[bytes, str]:
    """The schema metadata of an index file (``IndexHeader`` parses it)."""
    return {
        _MD_FORMAT: str(FORMAT_VERSION),
        _MD_UUID: table_uuid,
        _MD_SNAPSHOT: "" if snapshot_id is None else str(snapshot_id),
        _MD_KEY_IDS: json.dumps(list(key_field_ids)),
        _MD_KEY_TYPES: json.dumps([str(t) for t in key_types]),
        _MD_FILES: json.dumps([[p, int(n)] for p, n in files]),
    }


def write_entries(
    io: FileIO,
    location: str,
    header: dict[bytes, str],
    keys: Keys,
    file_index: np.ndarray,
    positions: np.ndarray,
    *,
    extra: Mapping[str, pa.Array] | None = None,
    compression: str | None = Compression.SAVED,
) -> None:
    """Write entries as a format 2 index file (framing, Arrow IPC payload, CRC-32);
    ``extra`` columns follow the three of every index file (a shard delta's)."""
    table = pa.table(
        {
            "key": keys.to_arrow(),
            "file": pa.array(file_index, pa.uint32()),
            "position": pa.array(positions, pa.uint32()),
            **(extra or {}),
        },
    ).replace_schema_metadata(header)
    options = pa.ipc.IpcWriteOptions(compression=compression)
    try:
        payload = pa.BufferOutputStream()
        with pa.ipc.new_file(payload, table.schema, options=options) as writer:
            writer.write_table(table, max_chunksize=1 << 20)
        body = payload.getvalue()
        header_bytes, checksum = frame(_MAGIC, FORMAT_VERSION, body)
        with io.new_output_stream(location) as sink:
            for part in (header_bytes, body, checksum):
                sink.write(part)
    except (OSError, pa.ArrowException) as err:
        raise FileIOError(f"{location}: writing the index failed: {err}") from err


def read_index_table(io: FileIO, location: str) -> pa.Table:
    """The Arrow table inside the index file at ``location``, once its checksum, magic,
    version and length are verified. ``UnreadableIndexError`` on any read or integrity
    failure; ``FileNotFoundInTableError`` when the file does not exist."""
    try:
        data = io.read(location)
    except FileNotFoundInTableError:
        raise
    except (CalvingError, OSError) as err:
        raise UnreadableIndexError(location, f"cannot read: {one_line(err)}") from None
    payload = _verified_payload(location, data)
    try:
        table = pa.ipc.open_file(pa.py_buffer(payload)).read_all()
        table.validate(full=True)  # offsets in range: no entry decoding reads past a buffer
        return table
    except (OSError, ValueError, pa.ArrowException) as err:
        # OSError: pyarrow's ArrowIOError (e.g. a failed decompression) is a bare OSError.
        raise UnreadableIndexError(
            location, f"payload is not an Arrow IPC file: {one_line(err)}"
        ) from None


def frame(magic: bytes, version: int, body: Any) -> tuple[bytes, bytes]:
    """(header, trailer) around ``body``: magic, version and length, then the CRC-32 of
    header and body (``unframe`` checks them)."""
    header = _HEADER.pack(magic, version, len(body) if isinstance(body, bytes) else body.size)
    return header, _CHECKSUM.pack(zlib.crc32(body, zlib.crc32(header)))


def _verified_payload(location: str, data: bytes) -> memoryview:
    """The payload of a format 2 file, or ``UnreadableIndexError`` saying why not."""
    if data.startswith(_ARROW_MAGIC):
        raise UnreadableIndexError(
            location, "index format 1 (no checksum), written by an older calving"
        )
    return unframe(location, data, _MAGIC, FORMAT_VERSION)


def unframe(location: str, data: bytes, magic_wanted: bytes, version_wanted: int) -> memoryview:
    """The body between ``frame``'s header and trailer, once the checksum, magic,
    version and length are verified; ``UnreadableIndexError`` saying why not."""
    framing = _HEADER.size + _CHECKSUM.size
    if len(data) < framing:
        raise UnreadableIndexError(location, f"truncated: {len(data)} bytes")
    view = memoryview(data)
    (stored,) = _CHECKSUM.unpack(view[-_CHECKSUM.size :])
    computed = zlib.crc32(view[: -_CHECKSUM.size])
    if stored != computed:
        raise UnreadableIndexError(
            location, f"checksum mismatch (stored {stored:08x}, computed {computed:08x})"
        )
    magic, version, length = _HEADER.unpack_from(view)
    if magic != magic_wanted:
        raise UnreadableIndexError(location, f"not a calving index file (magic {magic!r})")
    if version != version_wanted:
        raise UnreadableIndexError(location, f"unknown index format {version}")
    if length != len(data) - framing:
        raise UnreadableIndexError(
            location, f"payload of {length} bytes in a file of {len(data)} bytes"
        )
    return view[_HEADER.size : -_CHECKSUM.size]


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


@dataclass(frozen=True)
class IndexHeader:
    """The schema metadata of an index file's Arrow payload."""

    table_uuid: str
    snapshot_id: int | None
    key_field_ids: tuple[int, ...]
    key_types: tuple[PrimitiveType, ...]
    files: list[tuple[str, int]]

    @classmethod
    def parse(cls, location: str, md: dict[bytes, bytes]) -> IndexHeader:
        if md.get(_MD_FORMAT) != str(FORMAT_VERSION).encode():
            raise UnreadableIndexError(
                location, f"unknown index format {md.get(_MD_FORMAT)!r} in the payload"
            )
        try:
            snapshot_text = md[_MD_SNAPSHOT].decode()
            return cls(
                table_uuid=md[_MD_UUID].decode(),
                snapshot_id=int(snapshot_text) if snapshot_text else None,
                key_field_ids=tuple(int(i) for i in json.loads(md[_MD_KEY_IDS])),
                key_types=tuple(primitive_from_string(t) for t in json.loads(md[_MD_KEY_TYPES])),
                files=[(str(p), int(n)) for p, n in json.loads(md[_MD_FILES])],
            )
        except (KeyError, ValueError, TypeError, SchemaError) as err:
            raise UnreadableIndexError(
                location, f"index metadata is malformed: {one_line(err)}"
            ) from None


def read_entries(location: str, table: pa.Table) -> tuple[Keys, np.ndarray, np.ndarray]:
    """(keys, file indexes, positions) of an index file's Arrow table."""
    try:
        key_col = table.column("key").combine_chunks()
        keys: Keys
        if pa.types.is_integer(key_col.type):
            keys = IntKeys(np.asarray(key_col.to_numpy(zero_copy_only=False), np.int64))
        else:
            keys = ByteKeys.from_arrow(key_col)
        file_index = table.column("file").to_numpy().astype(np.uint32)
        positions = table.column("position").to_numpy().astype(np.uint32)
    except (KeyError, ValueError, TypeError, OSError, pa.ArrowException) as err:
        raise UnreadableIndexError(
            location, f"index entries are malformed: {one_line(err)}"
        ) from None
    if not len(keys) == len(file_index) == len(positions):
        raise UnreadableIndexError(location, "index entry columns differ in length")
    return keys, file_index, positions
