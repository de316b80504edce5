"""Avro container bytes in and out (fastavro), with corrupt input as typed errors."""

from __future__ import annotations

import hashlib
import io
from typing import Any, Iterable

import fastavro

from commit.errors import CorruptFileError

CODEC = "deflate"


def write_container(
    schema: dict[str, Any],
    records: Iterable[dict[str, Any]],
    metadata: dict[str, str],
    sync_marker: bytes | None,
) -> bytes:
    records = list(records)
    parsed = fastavro.parse_schema(schema)
    if sync_marker is None:
        # Deterministic: identical input gives identical bytes.
        digest = hashlib.sha256(repr((sorted(metadata.items()), records)).encode())
        sync_marker = digest.digest()[:16]
    out = io.BytesIO()
    fastavro.writer(out, parsed, records, codec=CODEC, metadata=metadata,
                    sync_marker=sync_marker, sync_interval=1 << 20)
    return out.getvalue()


def read_container(data: bytes, source: str) -> tuple[list[dict[str, Any]], dict[str, str], bytes,
                                                       dict[str, Any]]:
    """(records, key-value metadata, sync marker, writer schema)."""
    try:
        reader = fastavro.reader(io.BytesIO(data))
        records = list(reader)
        meta = {k: (v.decode("utf-8") if isinstance(v, bytes) else str(v))
                for k, v in reader.metadata.items()}
        sync = reader._header["sync"]  # fastavro keeps the header as a dict
        return records, meta, bytes(sync), reader.writer_schema
    except CorruptFileError:
        raise
    except Exception as exc:  # fastavro raises many types for bad bytes
        raise CorruptFileError(source, f"not a readable Avro file: {type(exc).__name__}: {exc}") \
            from None
