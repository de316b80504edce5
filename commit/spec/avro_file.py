"""Avro object container files: bytes in, records out, and back, byte for byte.

The container framing (header, blocks, sync markers, codecs) is done here so that
output is deterministic and corrupt input is caught precisely; fastavro encodes and
decodes the records themselves. Records are exchanged in their *physical* Avro form:
logical types are stripped before fastavro sees the schema, so dates stay ints,
decimals stay two's-complement bytes, and no value is lost to a Python datetime.
"""

from __future__ import annotations

import bz2
import hashlib
import io
import json
import lzma
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import fastavro

from calving.commit.errors import CorruptFileError, UnsupportedFeatureError

MAGIC = b"Obj\x01"
SYNC_SIZE = 16
DEFAULT_CODEC = "deflate"  # what Java's Iceberg writes for manifests by default
# Java's Avro DataFileWriter starts a new block past this many uncompressed bytes.
BLOCK_BYTES = 64_000

AvroSchema = Any  # parsed Avro schema JSON: str, list or dict


@dataclass(frozen=True)
class AvroContainer:
    """A decoded container file: writer schema (as JSON, logical types kept), the
    user key-value metadata (``avro.*`` keys removed), the sync marker, records."""

    schema: AvroSchema
    metadata: dict[str, str]
    sync_marker: bytes
    codec: str
    records: tuple[dict[str, Any], ...]


# ---------------------------------------------------------------- varints


def _put_long(out: bytearray, value: int) -> None:
    zigzag = (value << 1) ^ (value >> 63)
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


def _put_bytes(out: bytearray, value: bytes) -> None:
    _put_long(out, len(value))
    out += value


class _Cursor:
    """Reads Avro primitives from a bytes buffer; running past the end is corruption."""

    def __init__(self, data: bytes, source: str) -> None:
        self.data = data
        self.pos = 0
        self.source = source

    def corrupt(self, reason: str) -> CorruptFileError:
        return CorruptFileError(self.source, f"{reason} (at byte {self.pos})")

    def take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise self.corrupt(f"truncated: needs {size} more bytes")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def long(self) -> int:
        zigzag = shift = 0
        while True:
            if self.pos >= len(self.data):
                raise self.corrupt("truncated inside a varint")
            byte = self.data[self.pos]
            self.pos += 1
            zigzag |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (zigzag >> 1) ^ -(zigzag & 1)
            shift += 7
            if shift > 63:
                raise self.corrupt("varint longer than 10 bytes")

    def at_end(self) -> bool:
        return self.pos >= len(self.data)


# ---------------------------------------------------------------- codecs


def _deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush()


def _inflate(data: bytes) -> bytes:
    decompressor = zlib.decompressobj(-15)
    out = decompressor.decompress(data) + decompressor.flush()
    # Bytes past the stream's end are ignored: pyiceberg leaves 3 bytes of zlib trailer.
    if not decompressor.eof:
        raise ValueError("deflate stream ends early")
    return out


def _zstd_module() -> Any:
    try:
        import zstandard
    except ImportError:
        raise UnsupportedFeatureError(
            "Avro codec zstandard needs the 'zstandard' package"
        ) from None
    return zstandard


def _zstd_compress(data: bytes) -> bytes:
    return bytes(_zstd_module().ZstdCompressor().compress(data))


def _zstd_decompress(data: bytes) -> bytes:
    return bytes(_zstd_module().ZstdDecompressor().decompressobj().decompress(data))


_COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "null": bytes,
    "deflate": _deflate,
    "bzip2": bz2.compress,
    "xz": lzma.compress,
    "zstandard": _zstd_compress,
}
_DECOMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "null": bytes,
    "deflate": _inflate,
    "bzip2": bz2.decompress,
    "xz": lzma.decompress,
    "zstandard": _zstd_decompress,
}
_KNOWN_UNSUPPORTED = frozenset({"snappy"})


# ---------------------------------------------------------------- schemas


_NAMED_KINDS = frozenset({"record", "error", "enum", "fixed"})


def _physical(schema: AvroSchema, names: set[str] | None = None) -> AvroSchema:
    """``schema`` without logical type annotations (the bytes are the same).

    A named type defined a second time (pyiceberg writes two ``uuid_fixed`` for two
    uuid fields) is renamed: fastavro refuses redefinitions, and names do not change
    how values decode.
    """
    names = set() if names is None else names
    if isinstance(schema, list):
        return [_physical(s, names) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k != "logicalType"}
    if out.get("type") in _NAMED_KINDS and isinstance(out.get("name"), str):
        name, n = out["name"], 1
        while out["name"] in names:
            n += 1
            out["name"] = f"{name}_{n}"
        names.add(out["name"])
    if isinstance(out.get("fields"), list):
        out["fields"] = [
            {**f, "type": _physical(f.get("type"), names)} if isinstance(f, dict) else f
            for f in out["fields"]
        ]
    for key in ("items", "values"):
        if key in out:
            out[key] = _physical(out[key], names)
    if isinstance(out.get("type"), (dict, list)):
        out["type"] = _physical(out["type"], names)
    return out


@lru_cache(maxsize=64)
def _parsed_physical(schema_text: str) -> Any:
    return fastavro.parse_schema(_physical(json.loads(schema_text)))


def schema_text(schema: AvroSchema) -> str:
    """Compact JSON, as Java's Avro ``Schema.toString()`` writes it."""
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------- writing


def encode_record(schema: str, record: Mapping[str, Any]) -> bytes:
    """One record's Avro binary body under the schema ``schema`` (its ``schema_text``):
    what ``write_container`` takes in place of a record it need not encode again."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _parsed_physical(schema), record)
    return out.getvalue()


def write_container(
    schema: AvroSchema | str,
    records: Sequence[Mapping[str, Any] | bytes],
    metadata: Mapping[str, str],
    sync_marker: bytes | None = None,
    codec: str = DEFAULT_CODEC,
) -> bytes:
    """An Avro container holding ``records`` (physical values, or bodies from
    ``encode_record``) under ``schema`` (or its ``schema_text``, which callers writing
    many files of one schema keep).

    Without ``sync_marker`` one is derived from the content, so equal input always
    gives equal bytes.
    """
    if codec not in _COMPRESSORS:
        raise UnsupportedFeatureError(f"cannot write Avro codec {codec!r}")
    if sync_marker is not None and len(sync_marker) != SYNC_SIZE:
        raise ValueError(f"sync marker must be {SYNC_SIZE} bytes, got {len(sync_marker)}")
    text = schema if isinstance(schema, str) else schema_text(schema)
    parsed = _parsed_physical(text)
    header = bytearray(MAGIC)
    entries = {"avro.schema": text, "avro.codec": codec, **metadata}
    _put_long(header, len(entries))
    for key, value in entries.items():
        _put_bytes(header, key.encode("utf-8"))
        _put_bytes(header, value.encode("utf-8"))
    _put_long(header, 0)

    blocks: list[tuple[int, bytes]] = []
    buffer = io.BytesIO()
    count = 0
    for record in records:
        if isinstance(record, bytes):
            buffer.write(record)  # encoded already (``encode_record``)
        else:
            fastavro.schemaless_writer(buffer, parsed, record)
        count += 1
        if buffer.tell() >= BLOCK_BYTES:
            blocks.append((count, buffer.getvalue()))
            buffer, count = io.BytesIO(), 0
    if count:
        blocks.append((count, buffer.getvalue()))

    if sync_marker is None:
        digest = hashlib.sha256(bytes(header))
        for block_count, raw in blocks:
            digest.update(block_count.to_bytes(8, "big"))
            digest.update(raw)
        sync_marker = digest.digest()[:SYNC_SIZE]

    out = header + sync_marker
    compress = _COMPRESSORS[codec]
    for block_count, raw in blocks:
        payload = compress(raw)
        _put_long(out, block_count)
        _put_bytes(out, payload)
        out += sync_marker
    return bytes(out)


# ---------------------------------------------------------------- reading


def _read_header(cursor: _Cursor) -> tuple[dict[str, bytes], bytes]:
    if cursor.take(len(MAGIC)) != MAGIC:
        raise CorruptFileError(cursor.source, "not an Avro container file (bad magic)")
    meta: dict[str, bytes] = {}
    while True:
        count = cursor.long()
        if count == 0:
            break
        if count < 0:  # a negative count is followed by the block's byte size
            count = -count
            cursor.long()
        for _ in range(count):
            key = cursor.take(cursor.long()).decode("utf-8")
            meta[key] = cursor.take(cursor.long())
    return meta, cursor.take(SYNC_SIZE)


def _decompressor(codec: str, source: str) -> Callable[[bytes], bytes]:
    if codec in _DECOMPRESSORS:
        return _DECOMPRESSORS[codec]
    if codec in _KNOWN_UNSUPPORTED:
        raise UnsupportedFeatureError(f"{source}: Avro codec {codec!r} is not supported")
    raise CorruptFileError(source, f"unknown Avro codec {codec!r}")


def read_container(data: bytes, source: str) -> AvroContainer:
    """Decode an Avro container; anything malformed is a ``CorruptFileError``."""
    cursor = _Cursor(data, source)
    try:
        raw_meta, sync = _read_header(cursor)
        text = raw_meta.pop("avro.schema").decode("utf-8")
        codec = raw_meta.pop("avro.codec", b"null").decode("utf-8")
        metadata = {k: v.decode("utf-8") for k, v in raw_meta.items()}
    except UnicodeDecodeError as exc:
        raise cursor.corrupt(f"header text is not UTF-8: {exc.reason}") from None
    except KeyError:
        raise cursor.corrupt("header lacks avro.schema") from None
    try:
        schema = json.loads(text)
        parsed = _parsed_physical(text)
    except Exception as exc:  # json and fastavro raise many types for a bad schema
        raise cursor.corrupt(f"unusable writer schema: {type(exc).__name__}: {exc}") from exc
    decompress = _decompressor(codec, source)

    records: list[dict[str, Any]] = []
    while not cursor.at_end():
        block_start = cursor.pos
        count = cursor.long()
        size = cursor.long()
        if count < 0 or size < 0:
            raise cursor.corrupt(f"negative block count {count} or size {size}")
        payload = cursor.take(size)
        if cursor.take(SYNC_SIZE) != sync:
            raise cursor.corrupt(f"sync marker mismatch after the block at byte {block_start}")
        try:
            raw = decompress(payload)
        except UnsupportedFeatureError:
            raise
        except Exception as exc:  # zlib, bz2, lzma, zstandard errors
            raise cursor.corrupt(f"{codec} block does not decompress: {exc}") from exc
        block = io.BytesIO(raw)
        try:
            for _ in range(count):
                record = fastavro.schemaless_reader(block, parsed, None)
                records.append(record)  # type: ignore[arg-type]  # a record schema's value
        except Exception as exc:  # fastavro raises many types for bad record bytes
            raise cursor.corrupt(
                f"undecodable record in the block at byte {block_start}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if block.tell() != len(raw):
            raise cursor.corrupt(
                f"block at byte {block_start} has {len(raw) - block.tell()} bytes past "
                f"its {count} records"
            )
    return AvroContainer(schema, metadata, sync, codec, tuple(records))
