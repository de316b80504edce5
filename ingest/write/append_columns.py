"""Columns appended to a written Parquet file without decoding or re-encoding its data.

A Parquet file is its column chunks followed by a footer (Thrift ``FileMetaData``) that
says where each chunk is. To add columns to a file, the new columns come as column
chunks with the same row groups (``ExtraColumns``: from a small Parquet file of their
own, ``columns_of``, or encoded directly, as ``lineage_chunks`` does); the result is the
original's bytes up to its footer, the new chunks, and one footer naming both, with the
new chunks' offsets moved to where they now sit. The original's chunks stay as bytes:
the cost is the new columns' encoding and the footer, not a Parquet rewrite (and the
caller may write just the new tail in place of the old footer).

Field ids of ``FileMetaData`` and its parts, from the parquet-format Thrift definition.
Codecs on bytes only (no I/O).
"""

from __future__ import annotations

import base64
import functools
from dataclasses import dataclass

import pyarrow as pa

from calving.ingest.write import thrift_compact as tc

MAGIC = b"PAR1"

# FileMetaData
_SCHEMA, _ROW_GROUPS, _KEY_VALUES, _COLUMN_ORDERS = 2, 4, 5, 7
_ENCRYPTION = (8, 9)
# SchemaElement
_NUM_CHILDREN, _NAME = 5, 4
# RowGroup
_COLUMNS, _TOTAL_BYTE_SIZE, _RG_ROWS, _TOTAL_COMPRESSED = 1, 2, 3, 6
# ColumnChunk: file_path, file_offset, meta_data, offset/column index offsets, crypto
_CHUNK_PATH, _CHUNK_META, _CHUNK_CRYPTO = 1, 3, 8
_CHUNK_OFFSETS = (2, 4, 6)
# ColumnMetaData: data page, index page, dictionary page, bloom filter offsets
_META_OFFSETS = (9, 10, 11, 14)
# KeyValue
_KEY, _VALUE = 1, 2
ARROW_SCHEMA_KEY = b"ARROW:schema"


class SpliceError(ValueError):
    """Two Parquet files whose columns cannot be put side by side as bytes."""


@dataclass(frozen=True)
class ExtraGroup:
    """One row group of appended columns: its rows, its ``ColumnChunk``s (offsets
    counted as in a file whose first chunk starts after the 4-byte magic), and its
    total uncompressed and compressed bytes (None: not stated)."""

    rows: int
    chunks: list[tc.Struct]
    uncompressed: int
    compressed: int | None


@dataclass(frozen=True)
class ExtraColumns:
    """Columns to append as bytes: ``data`` (their chunks, the first at offset 4), the
    ``SchemaElement``s below the root and how many of them are the root's children, the
    row groups, the top-level names, the column orders (None: none stated) and the Arrow
    schema for the stored ``ARROW:schema`` (None: none)."""

    data: bytes
    schema: list[tc.Struct]
    children: int
    groups: list[ExtraGroup]
    names: set[bytes]
    orders: list[tc.Struct] | None
    arrow: pa.Schema | None


#: A footer's column chunks, kept as bytes (``tc.RawStruct``) where the file's own
#: chunks are only passed through: they stay where they are, offsets and all.
RAW_CHUNKS: tc.RawSpec = {_ROW_GROUPS: {_COLUMNS: tc.RAW}}


def footer(data: bytes, raw_chunks: bool = False) -> tuple[tc.Struct, int]:
    """A Parquet file's decoded ``FileMetaData`` and where it starts (``raw_chunks``:
    its column chunks as bytes, ``RAW_CHUNKS``)."""
    if len(data) < 12 or data[:4] != MAGIC:
        raise SpliceError("not a Parquet file (no PAR1 at both ends)")
    return footer_of_tail(data, len(data), raw_chunks)


def footer_span(tail: bytes) -> int:
    """Bytes from a Parquet file's footer to its end (footer, length, magic), from its
    last 8 bytes or more (``tail``)."""
    if len(tail) < 8 or tail[-4:] != MAGIC:
        raise SpliceError("not a Parquet file (no PAR1 at both ends)")
    return int.from_bytes(tail[-8:-4], "little") + 8


def footer_of_tail(tail: bytes, size: int, raw_chunks: bool = False) -> tuple[tc.Struct, int]:
    """``footer`` from the last ``len(tail)`` bytes of a ``size``-byte file, which must
    hold the whole footer (``footer_span``)."""
    span = footer_span(tail)
    start = size - span
    if start < len(MAGIC) or span > len(tail):
        raise SpliceError(f"footer length {span - 8} is past the start of the bytes given")
    raw = RAW_CHUNKS if raw_chunks else None
    return tc.decode_struct(tail[len(tail) - span : -8], raw), start


def row_group_rows(meta: tc.Struct) -> list[int]:
    """Rows in each row group of a decoded footer."""
    return [int(rg.get(_RG_ROWS)) for rg in meta.get(_ROW_GROUPS, tc.ListValue(0, [])).items]


def append_columns(
    original: bytes, extra: bytes, decoded: tuple[tc.Struct, int] | None = None
) -> bytes:
    """A Parquet file holding ``original``'s columns followed by ``extra``'s, whose row
    groups must have the same rows as ``original``'s. Names must not repeat.
    ``decoded``: ``footer(original)`` if the caller has it (it is changed)."""
    return append_chunks(original, columns_of(extra), decoded)


def columns_of(data: bytes) -> ExtraColumns:
    """A whole Parquet file's columns as chunks to append (``append_chunks``)."""
    more, more_start = footer(data)
    _check_chunks(more)
    groups = [
        ExtraGroup(
            int(rg.get(_RG_ROWS)),
            rg.get(_COLUMNS).items,
            int(rg.get(_TOTAL_BYTE_SIZE)),
            rg.get(_TOTAL_COMPRESSED),
        )
        for rg in more.get(_ROW_GROUPS, tc.ListValue(0, [])).items
    ]
    orders = more.get(_COLUMN_ORDERS)
    return ExtraColumns(
        data[len(MAGIC) : more_start],
        more.get(_SCHEMA).items[1:],
        int(more.get(_SCHEMA).items[0].get(_NUM_CHILDREN, 0)),
        groups,
        _top_names(more),
        orders.items if orders is not None else None,
        _arrow_schema(more),
    )


def append_chunks(
    original: bytes, extra: ExtraColumns, decoded: tuple[tc.Struct, int] | None = None
) -> bytes:
    """``append_columns`` for columns given as chunks and their footer parts; the
    chunks' offsets are moved in place, so ``extra`` serves one call."""
    meta, start = decoded or footer(original, raw_chunks=True)
    return original[:start] + splice_tail(meta, start, extra)


def splice_tail(meta: tc.Struct, start: int, extra: ExtraColumns) -> bytes:
    """What replaces a file's bytes from its footer (``meta``, at ``start``) on to add
    ``extra``'s columns: their chunks and the new footer (``meta`` is changed)."""
    _check(meta, extra)
    shift = start - len(MAGIC)  # where extra's offset 4 lands
    root = meta.get(_SCHEMA).items[0]
    root.set(_NUM_CHILDREN, tc.I32, root.get(_NUM_CHILDREN, 0) + extra.children)
    meta.get(_SCHEMA).items.extend(extra.schema)
    for group, other in zip(meta.get(_ROW_GROUPS).items, extra.groups):
        _append_group(group, other, shift)
    orders = meta.get(_COLUMN_ORDERS)
    if orders is not None and extra.orders is not None:  # none stated: none added
        orders.items.extend(extra.orders)
    _merge_arrow_schema(meta, extra.arrow)
    encoded = tc.encode_struct(meta)
    return b"".join((extra.data, encoded, len(encoded).to_bytes(4, "little"), MAGIC))


def _check_chunks(meta: tc.Struct) -> None:
    if any(meta.has(i) for i in _ENCRYPTION):
        raise SpliceError("encrypted footers are not spliced")
    for group in meta.get(_ROW_GROUPS, tc.ListValue(0, [])).items:
        for chunk in group.get(_COLUMNS).items:
            if chunk.has(_CHUNK_PATH) or chunk.has(_CHUNK_CRYPTO):
                raise SpliceError("column chunks in other files or encrypted")


def _check(meta: tc.Struct, extra: ExtraColumns) -> None:
    _check_chunks(meta)
    rows = [g.rows for g in extra.groups]
    if row_group_rows(meta) != rows:
        raise SpliceError(f"row groups differ: {row_group_rows(meta)} rows vs {rows}")
    if meta.has(_COLUMN_ORDERS) and extra.orders is None:
        raise SpliceError("the file states column orders and the new columns none")
    clash = _top_names(meta) & extra.names
    if clash:
        raise SpliceError(f"columns in both files: {sorted(n.decode() for n in clash)}")


def _top_names(meta: tc.Struct) -> set[bytes]:
    """Names of the top-level columns (the root's children, walked through nesting)."""
    elements = meta.get(_SCHEMA).items
    names: set[bytes] = set()
    i = 1
    for _ in range(int(elements[0].get(_NUM_CHILDREN, 0))):
        names.add(elements[i].get(_NAME))
        i = _skip(elements, i)
    return names


def _skip(elements: list[tc.Struct], i: int) -> int:
    """The index after element ``i`` and all its descendants."""
    children = int(elements[i].get(_NUM_CHILDREN, 0))
    i += 1
    for _ in range(children):
        i = _skip(elements, i)
    return i


def _append_group(group: tc.Struct, other: ExtraGroup, shift: int) -> None:
    for chunk in other.chunks:
        _shift(chunk, _CHUNK_OFFSETS, shift)
        _shift(chunk.get(_CHUNK_META), _META_OFFSETS, shift)
    group.get(_COLUMNS).items.extend(other.chunks)
    group.set(_TOTAL_BYTE_SIZE, tc.I64, group.get(_TOTAL_BYTE_SIZE) + other.uncompressed)
    if group.has(_TOTAL_COMPRESSED) and other.compressed is not None:
        total = group.get(_TOTAL_COMPRESSED) + other.compressed
        group.set(_TOTAL_COMPRESSED, tc.I64, total)


def _shift(s: tc.Struct | None, field_ids: tuple[int, ...], by: int) -> None:
    if s is None:
        return
    for f in s.fields:
        if f.id in field_ids:
            f.value += by


def _merge_arrow_schema(meta: tc.Struct, theirs: pa.Schema | None) -> None:
    """The stored Arrow schema (which pyarrow reads types from) with ``theirs``'s fields
    appended; left out when either side has none."""
    kv = meta.get(_KEY_VALUES)
    if kv is None:
        return
    entry = next((e for e in kv.items if e.get(_KEY) == ARROW_SCHEMA_KEY), None)
    mine = entry.get(_VALUE) if entry is not None else None
    if mine is None or theirs is None:
        kv.items = [e for e in kv.items if e.get(_KEY) != ARROW_SCHEMA_KEY]
        return
    assert entry is not None
    entry.set(_VALUE, tc.BINARY, _merged_arrow_value(mine, theirs))


@functools.lru_cache(maxsize=256)
def _merged_arrow_value(mine: bytes, theirs: pa.Schema) -> bytes:
    """The base64 ``ARROW:schema`` of ``mine`` (base64) with ``theirs``'s fields after
    its own (the files of one table share it: cached)."""
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(mine)))
    merged = pa.schema(list(schema) + list(theirs), metadata=schema.metadata)
    return base64.b64encode(merged.serialize().to_pybytes())


def _arrow_schema(meta: tc.Struct) -> pa.Schema | None:
    kv = meta.get(_KEY_VALUES)
    for entry in kv.items if kv is not None else ():
        if entry.get(_KEY) == ARROW_SCHEMA_KEY and entry.get(_VALUE) is not None:
            raw = base64.b64decode(entry.get(_VALUE))
            return pa.ipc.read_schema(pa.py_buffer(raw))
    return None
