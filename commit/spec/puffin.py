"""Puffin files: blobs followed by a JSON footer describing them.

Layout: ``Magic Blob* Footer`` with ``Footer = Magic FooterPayload FooterPayloadSize Flags
Magic``. ``FooterPayload`` is UTF-8 JSON, optionally one LZ4 frame (flag bit 0 of byte 0).
``FooterPayloadSize`` is a signed 4-byte little-endian int; ``Flags`` is 4 bytes.

The writer emits compact JSON with a fixed key order, so a footer read and written again
yields the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import lz4.frame

from calving.commit.errors import CorruptFileError, UnsupportedFeatureError

MAGIC = b"PFA1"
CREATED_BY = "calving 0.1.0"

# FooterPayloadSize (4) + Flags (4) + Magic (4) after the payload.
FOOTER_TRAILER_SIZE = 12
# Smallest possible file: leading magic and a footer with an empty payload.
MIN_FILE_SIZE = len(MAGIC) + len(MAGIC) + FOOTER_TRAILER_SIZE

FLAG_FOOTER_COMPRESSED = 0x01
CODEC_LZ4 = "lz4"
CODEC_ZSTD = "zstd"


@dataclass(frozen=True)
class BlobMetadata:
    type: str
    fields: tuple[int, ...]
    snapshot_id: int
    sequence_number: int
    offset: int
    length: int
    compression_codec: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "fields": list(self.fields),
            "snapshot-id": self.snapshot_id,
            "sequence-number": self.sequence_number,
            "offset": self.offset,
            "length": self.length,
        }
        if self.compression_codec is not None:
            out["compression-codec"] = self.compression_codec
        if self.properties:
            out["properties"] = dict(self.properties)
        return out


@dataclass(frozen=True)
class PuffinFile:
    """The decoded footer of a Puffin file."""

    blobs: tuple[BlobMetadata, ...]
    properties: Mapping[str, str] = field(default_factory=dict)
    footer_compressed: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"blobs": [blob.to_json() for blob in self.blobs]}
        if self.properties:
            out["properties"] = dict(self.properties)
        return out


# ---------------------------------------------------------------- writing


def serialize_footer(puffin: PuffinFile) -> bytes:
    """The footer bytes (from its leading magic to the trailing magic) for ``puffin``."""
    payload = _dump_json(puffin.to_json())
    flags = 0
    if puffin.footer_compressed:
        payload = lz4.frame.compress(payload, store_size=True)
        flags |= FLAG_FOOTER_COMPRESSED
    return b"".join(
        (
            MAGIC,
            payload,
            len(payload).to_bytes(4, "little", signed=True),
            flags.to_bytes(4, "little"),
            MAGIC,
        )
    )


class PuffinWriter:
    """Accumulates blobs in memory; ``finish`` returns the whole file."""

    def __init__(self) -> None:
        self._parts: list[bytes] = [MAGIC]
        self._position = len(MAGIC)
        self._blobs: list[BlobMetadata] = []

    def add_blob(
        self,
        type: str,
        data: bytes,
        fields: Iterable[int],
        snapshot_id: int,
        sequence_number: int,
        properties: Mapping[str, str] | None = None,
        compression: str | None = None,
    ) -> BlobMetadata:
        """Append a blob; the returned metadata carries its final offset and length."""
        stored = _compress(data, compression)
        blob = BlobMetadata(
            type=type,
            fields=tuple(fields),
            snapshot_id=snapshot_id,
            sequence_number=sequence_number,
            offset=self._position,
            length=len(stored),
            compression_codec=compression,
            properties=dict(properties or {}),
        )
        self._parts.append(stored)
        self._position += len(stored)
        self._blobs.append(blob)
        return blob

    @property
    def blobs(self) -> tuple[BlobMetadata, ...]:
        return tuple(self._blobs)

    def finish(
        self, compress_footer: bool = False, properties: Mapping[str, str] | None = None
    ) -> bytes:
        """The whole file. ``created-by`` is always calving's; pyiceberg 0.12 and older
        Java readers cannot read compressed footers, hence the default."""
        file_properties = {"created-by": CREATED_BY}
        file_properties.update({k: v for k, v in (properties or {}).items() if k != "created-by"})
        footer = PuffinFile(tuple(self._blobs), file_properties, compress_footer)
        return b"".join(self._parts) + serialize_footer(footer)


def _compress(data: bytes, codec: str | None) -> bytes:
    if codec is None:
        return bytes(data)
    if codec == CODEC_LZ4:
        return bytes(lz4.frame.compress(data, store_size=True))
    if codec == CODEC_ZSTD:
        zstandard = _zstandard()
        if zstandard is None:
            raise UnsupportedFeatureError("zstd blob compression needs the zstandard package")
        return bytes(zstandard.ZstdCompressor().compress(data))
    raise UnsupportedFeatureError(f"unknown Puffin compression codec {codec!r}")


def _dump_json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# ---------------------------------------------------------------- reading


def footer_size_from_tail(tail: bytes, source: str) -> int:
    """Length of the footer (leading footer magic through the end of the file), read from
    at least the last 12 bytes of the file, so a reader can fetch just the footer next."""
    if len(tail) < FOOTER_TRAILER_SIZE:
        raise CorruptFileError(source, f"Puffin tail of {len(tail)} bytes is too short")
    trailer = tail[-FOOTER_TRAILER_SIZE:]
    if trailer[8:12] != MAGIC:
        raise CorruptFileError(source, f"bad Puffin magic at end of file: {trailer[8:12]!r}")
    payload_size = int.from_bytes(trailer[0:4], "little", signed=True)
    if payload_size < 0:
        raise CorruptFileError(source, f"negative Puffin footer payload size {payload_size}")
    return len(MAGIC) + payload_size + FOOTER_TRAILER_SIZE


def parse_footer(footer: bytes, file_size: int, source: str) -> PuffinFile:
    """Decode ``footer``, the last ``footer_size_from_tail`` bytes of a file of
    ``file_size`` bytes; checks that every blob lies between the two magics."""
    footer_size = footer_size_from_tail(footer, source)
    if len(footer) != footer_size:
        raise CorruptFileError(
            source, f"Puffin footer is {footer_size} bytes but {len(footer)} were given"
        )
    if footer_size > file_size - len(MAGIC):
        raise CorruptFileError(
            source, f"Puffin footer of {footer_size} bytes does not fit a {file_size}-byte file"
        )
    if footer[0:4] != MAGIC:
        raise CorruptFileError(source, f"bad Puffin footer magic: {footer[0:4]!r}")
    compressed = _decode_flags(footer[-8:-4], source)
    payload = footer[4:-FOOTER_TRAILER_SIZE]
    if compressed:
        payload = _lz4_decompress(payload, source, "footer payload")
    puffin = _parse_metadata(payload, source, compressed)
    blob_area_end = file_size - footer_size
    for blob in puffin.blobs:
        if blob.offset < len(MAGIC) or blob.length < 0 or blob.offset + blob.length > blob_area_end:
            raise CorruptFileError(
                source,
                f"Puffin blob {blob.type!r} at offset {blob.offset} length {blob.length} "
                f"lies outside the blob area [{len(MAGIC)}, {blob_area_end})",
            )
    return puffin


def read_footer(data: bytes, source: str) -> PuffinFile:
    """Decode the footer of a whole Puffin file held in ``data``."""
    if len(data) < MIN_FILE_SIZE:
        raise CorruptFileError(source, f"Puffin file of {len(data)} bytes is too short")
    if data[0:4] != MAGIC:
        raise CorruptFileError(source, f"bad Puffin magic at start of file: {data[0:4]!r}")
    footer_size = footer_size_from_tail(data, source)
    if footer_size > len(data) - len(MAGIC):
        raise CorruptFileError(
            source, f"Puffin footer of {footer_size} bytes does not fit a {len(data)}-byte file"
        )
    return parse_footer(data[len(data) - footer_size :], len(data), source)


def read_blob(data: bytes, blob: BlobMetadata, source: str) -> bytes:
    """The (decompressed) content of ``blob`` from the whole file ``data``."""
    if blob.offset < 0 or blob.length < 0 or blob.offset + blob.length > len(data):
        raise CorruptFileError(
            source,
            f"Puffin blob at offset {blob.offset} length {blob.length} is beyond the "
            f"{len(data)}-byte file",
        )
    raw = bytes(data[blob.offset : blob.offset + blob.length])
    codec = blob.compression_codec
    if codec is None:
        return raw
    if codec == CODEC_LZ4:
        return _lz4_decompress(raw, source, f"blob at offset {blob.offset}")
    if codec == CODEC_ZSTD:
        return _zstd_decompress(raw, source, blob.offset)
    raise UnsupportedFeatureError(f"{source}: unknown Puffin compression codec {codec!r}")


def _decode_flags(flags: bytes, source: str) -> bool:
    value = int.from_bytes(flags, "little")
    if value & ~FLAG_FOOTER_COMPRESSED:
        raise CorruptFileError(source, f"unknown Puffin footer flags {flags.hex()}")
    return bool(value & FLAG_FOOTER_COMPRESSED)


def _lz4_decompress(payload: bytes, source: str, what: str) -> bytes:
    decompressor = lz4.frame.LZ4FrameDecompressor()
    try:
        out = decompressor.decompress(payload)
    except (RuntimeError, ValueError, MemoryError, OverflowError) as exc:
        raise CorruptFileError(source, f"LZ4 {what} does not decompress: {exc}") from exc
    if not decompressor.eof or decompressor.unused_data:
        raise CorruptFileError(source, f"LZ4 {what} is not exactly one complete frame")
    return bytes(out)


def _zstd_decompress(payload: bytes, source: str, offset: int) -> bytes:
    zstandard = _zstandard()
    if zstandard is None:
        raise UnsupportedFeatureError(
            f"{source}: zstd blob at offset {offset} needs the zstandard package"
        )
    try:
        return bytes(zstandard.ZstdDecompressor().decompress(payload))
    except zstandard.ZstdError as exc:
        raise CorruptFileError(source, f"zstd blob at offset {offset}: {exc}") from exc


def _zstandard() -> Any:
    # Optional: not a calving dependency, present wherever pyiceberg is installed.
    try:
        import zstandard
    except ImportError:
        return None
    return zstandard


def _parse_metadata(payload: bytes, source: str, compressed: bool) -> PuffinFile:
    try:
        obj = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CorruptFileError(source, f"Puffin footer is not valid UTF-8 JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise CorruptFileError(source, "Puffin footer JSON is not an object")
    blobs_json = obj.get("blobs")
    if not isinstance(blobs_json, list):
        raise CorruptFileError(source, "Puffin footer has no 'blobs' list")
    blobs = tuple(_parse_blob(b, index, source) for index, b in enumerate(blobs_json))
    properties = _string_map(obj.get("properties", {}), "file properties", source)
    return PuffinFile(blobs, properties, compressed)


def _parse_blob(obj: Any, index: int, source: str) -> BlobMetadata:
    where = f"Puffin blob #{index}"
    if not isinstance(obj, dict):
        raise CorruptFileError(source, f"{where} is not a JSON object")
    blob_type = obj.get("type")
    if not isinstance(blob_type, str):
        raise CorruptFileError(source, f"{where} has no string 'type'")
    fields = obj.get("fields")
    if not isinstance(fields, list) or not all(_is_int(f) for f in fields):
        raise CorruptFileError(source, f"{where} has no 'fields' list of ints")
    ints: dict[str, int] = {}
    for key in ("snapshot-id", "sequence-number", "offset", "length"):
        value = obj.get(key)
        if not _is_int(value):
            raise CorruptFileError(source, f"{where} has no integer {key!r}")
        ints[key] = value
    codec = obj.get("compression-codec")
    if codec is not None and not isinstance(codec, str):
        raise CorruptFileError(source, f"{where} has a non-string 'compression-codec'")
    return BlobMetadata(
        type=blob_type,
        fields=tuple(fields),
        snapshot_id=ints["snapshot-id"],
        sequence_number=ints["sequence-number"],
        offset=ints["offset"],
        length=ints["length"],
        compression_codec=codec,
        properties=_string_map(obj.get("properties", {}), f"{where} properties", source),
    )


def _is_int(value: Any) -> TypeGuard[int]:
    # JSON true/false decode to bool, a subclass of int; they are not longs.
    return isinstance(value, int) and not isinstance(value, bool)


def _string_map(value: Any, what: str, source: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise CorruptFileError(source, f"Puffin {what} is not an object of strings")
    return dict(value)
