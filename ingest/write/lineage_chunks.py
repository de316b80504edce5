"""The two row-lineage columns of a batch file, encoded straight into Parquet column
chunks: what ``append_columns`` puts after a task file's own chunks when its updated
rows keep their ``_row_id``.

A general Parquet writer costs more here than the data: two int64 columns of a few
hundred rows, one of them all nulls. Each row group gets one data page (format v1) per
column: definition levels (RLE/bit-packed hybrid, bit width 1) and the PLAIN values of
the non-null ids, the page compressed with zstd; ``_last_updated_sequence_number`` is
all nulls (a single RLE run, nothing to compress). Chunk statistics hold the null count
and, for ``_row_id``, its min and max. Field ids are those of parquet-format's Thrift
definition. Codecs on bytes only (no I/O).
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from calving.commit.spec import row_lineage as rl
from calving.commit.spec.schema import Schema
from calving.commit.table.row_ids import UNKNOWN
from calving.ingest.write import thrift_compact as tc
from calving.ingest.write.append_columns import MAGIC, ExtraColumns, ExtraGroup
from calving.ingest.write.arrow_schema import schema_to_arrow

# Enums
_INT64, _OPTIONAL, _DATA_PAGE = 2, 1, 0
_PLAIN, _RLE = 0, 3
_UNCOMPRESSED, _ZSTD = 0, 6
# Field ids: PageHeader, DataPageHeader, Statistics, ColumnMetaData, ColumnChunk,
# SchemaElement
_PH_TYPE, _PH_UNCOMPRESSED, _PH_COMPRESSED, _PH_DATA = 1, 2, 3, 5
_DP_VALUES, _DP_ENCODING, _DP_DEF_ENCODING, _DP_REP_ENCODING, _DP_STATS = 1, 2, 3, 4, 5
_ST_NULLS, _ST_MAX, _ST_MIN = 3, 5, 6
_CM_TYPE, _CM_ENCODINGS, _CM_PATH, _CM_CODEC, _CM_VALUES = 1, 2, 3, 4, 5
_CM_UNCOMPRESSED, _CM_COMPRESSED, _CM_DATA_PAGE, _CM_STATS = 6, 7, 9, 12
_CC_OFFSET, _CC_META = 2, 3
_SE_TYPE, _SE_REPETITION, _SE_NAME, _SE_FIELD_ID = 1, 3, 4, 9
#: ColumnOrder (a union) holding TypeDefinedOrder (an empty struct): what writers state
#: for int64 columns.
_TYPE_DEFINED_ORDER = tc.Struct([tc.Field(1, tc.STRUCT, tc.Struct([]))])

#: Where the first chunk starts, as if the chunks followed a file's leading magic
#: (``append_chunks`` moves every offset to where the chunks land).
FIRST_OFFSET = len(MAGIC)


@functools.cache
def lineage_arrow_schema() -> pa.Schema:
    return schema_to_arrow(Schema(rl.LINEAGE_FIELDS))


def lineage_columns(row_ids: np.ndarray, group_rows: list[int]) -> ExtraColumns:
    """``_row_id`` (``row_ids``; ``UNKNOWN``: null) and an all-null
    ``_last_updated_sequence_number``, cut into row groups of ``group_rows``."""
    ids = np.asarray(row_ids, np.int64)
    if sum(group_rows) != len(ids):
        raise ValueError(f"{len(ids)} row ids for row groups of {sum(group_rows)} rows")
    out = bytearray()
    groups = []
    at = 0
    for rows in group_rows:
        part = ids[at : at + rows]
        at += rows
        chunks, uncompressed, compressed = [], 0, 0
        for name, values in ((rl.ROW_ID.name, part), (rl.LAST_UPDATED_SEQUENCE_NUMBER.name, None)):
            chunk, sizes = _chunk(name, values, rows, FIRST_OFFSET + len(out), out)
            chunks.append(chunk)
            uncompressed += sizes[0]
            compressed += sizes[1]
        groups.append(ExtraGroup(rows, chunks, uncompressed, compressed))
    fields = rl.LINEAGE_FIELDS
    return ExtraColumns(
        data=bytes(out),
        schema=[_schema_element(f.name, f.field_id) for f in fields],
        children=len(fields),
        groups=groups,
        names={f.name.encode() for f in fields},
        orders=[_TYPE_DEFINED_ORDER for _ in fields],
        arrow=lineage_arrow_schema(),
    )


def _chunk(
    name: str, ids: np.ndarray | None, rows: int, offset: int, out: bytearray
) -> tuple[tc.Struct, tuple[int, int]]:
    """One column chunk (a single data page) appended to ``out``; its ``ColumnChunk``
    and (uncompressed, compressed) bytes. ``ids`` None: every row null."""
    present = np.zeros(rows, bool) if ids is None else ids != UNKNOWN
    values = ids[present] if ids is not None else np.empty(0, np.int64)
    stats = _statistics(values, rows)
    page, sizes, codec = _page(present, values, stats)
    out += page
    meta = tc.Struct(
        [
            tc.Field(_CM_TYPE, tc.I32, _INT64),
            tc.Field(_CM_ENCODINGS, tc.LIST, tc.ListValue(tc.I32, [_PLAIN, _RLE])),
            tc.Field(_CM_PATH, tc.LIST, tc.ListValue(tc.BINARY, [name.encode()])),
            tc.Field(_CM_CODEC, tc.I32, codec),
            tc.Field(_CM_VALUES, tc.I64, rows),
            tc.Field(_CM_UNCOMPRESSED, tc.I64, sizes[0]),
            tc.Field(_CM_COMPRESSED, tc.I64, sizes[1]),
            tc.Field(_CM_DATA_PAGE, tc.I64, offset),
            tc.Field(_CM_STATS, tc.STRUCT, stats),
        ]
    )
    chunk = tc.Struct([tc.Field(_CC_OFFSET, tc.I64, offset), tc.Field(_CC_META, tc.STRUCT, meta)])
    return chunk, sizes


def _statistics(values: np.ndarray, rows: int) -> tc.Struct:
    """Null count, and min and max (8-byte little-endian) when any value is present."""
    fields = [tc.Field(_ST_NULLS, tc.I64, rows - len(values))]
    if len(values):
        high, low = int(values.max()), int(values.min())
        fields.append(tc.Field(_ST_MAX, tc.BINARY, high.to_bytes(8, "little", signed=True)))
        fields.append(tc.Field(_ST_MIN, tc.BINARY, low.to_bytes(8, "little", signed=True)))
    return tc.Struct(fields)


def _page(
    present: np.ndarray, values: np.ndarray, stats: tc.Struct
) -> tuple[bytes, tuple[int, int], int]:
    """A v1 data page of the levels and PLAIN ``values`` (zstd when there are any): its
    bytes with its header, (uncompressed, compressed) sizes with the header, codec."""
    body = _levels(present) + values.astype("<i8").tobytes()
    codec = _ZSTD if len(values) else _UNCOMPRESSED
    stored = pa.compress(body, codec="zstd", asbytes=True) if codec == _ZSTD else body
    data_page = tc.Struct(
        [
            tc.Field(_DP_VALUES, tc.I32, len(present)),
            tc.Field(_DP_ENCODING, tc.I32, _PLAIN),
            tc.Field(_DP_DEF_ENCODING, tc.I32, _RLE),
            tc.Field(_DP_REP_ENCODING, tc.I32, _RLE),
            tc.Field(_DP_STATS, tc.STRUCT, stats),
        ]
    )
    header = tc.encode_struct(
        tc.Struct(
            [
                tc.Field(_PH_TYPE, tc.I32, _DATA_PAGE),
                tc.Field(_PH_UNCOMPRESSED, tc.I32, len(body)),
                tc.Field(_PH_COMPRESSED, tc.I32, len(stored)),
                tc.Field(_PH_DATA, tc.STRUCT, data_page),
            ]
        )
    )
    sizes = (len(header) + len(body), len(header) + len(stored))
    return header + stored, sizes, codec


def _levels(present: np.ndarray) -> bytes:
    """Definition levels (0 null, 1 present) in the RLE/bit-packed hybrid at bit width 1,
    with the 4-byte length a v1 data page puts before them."""
    encoded = bytearray()
    if present.all() or not present.any():
        tc.put_varint(len(present) << 1, encoded)  # one RLE run
        encoded.append(1 if len(present) and present[0] else 0)
    else:
        packed = np.packbits(present, bitorder="little").tobytes()  # groups of 8 values
        tc.put_varint(len(packed) << 1 | 1, encoded)
        encoded += packed
    return len(encoded).to_bytes(4, "little") + bytes(encoded)


def _schema_element(name: str, field_id: int) -> tc.Struct:
    return tc.Struct(
        [
            tc.Field(_SE_TYPE, tc.I32, _INT64),
            tc.Field(_SE_REPETITION, tc.I32, _OPTIONAL),
            tc.Field(_SE_NAME, tc.BINARY, name.encode()),
            tc.Field(_SE_FIELD_ID, tc.I32, field_id),
        ]
    )
