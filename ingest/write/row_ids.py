"""Store ``_row_id`` values in a data file not yet committed: how an update keeps the
identity of the row it replaces (v3 row lineage through updates).

The stream's tasks write a batch's rows before the driver's primary-key index says which
of them update a live row. The coordinator then hands each such file here with the old
rows' ids: the file (same rows, same order, same partition) gets the
reserved ``_row_id`` column (the old id for an updated row, null for an inserted one,
which inherits ``first_row_id`` + position) and a null ``_last_updated_sequence_number``
(every row inherits the new commit's sequence number). The task's file was never
committed, so nothing reads it meanwhile: locally it changes in place; on object
storage a copy is written and the task's file deleted.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace

import numpy as np
import pyarrow as pa

from calving.commit.errors import CalvingError
from calving.commit.io import FileIO
from calving.commit.spec import row_lineage as rl
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.schema import Schema
from calving.commit.spec.sort_order import UNSORTED
from calving.commit.table.data_files import project, read_data_file
from calving.commit.table.row_ids import UNKNOWN
from calving.ingest.write import thrift_compact as tc
from calving.ingest.write.append_columns import (
    SpliceError,
    footer_of_tail,
    footer_span,
    row_group_rows,
    splice_tail,
)
from calving.ingest.write.lineage_chunks import lineage_columns
from calving.ingest.write.parquet_writer import write_data_file
from calving.ingest.write.rewrite import table_metrics, with_lineage
from calving.ingest.write.thrift_compact import ThriftError

log = logging.getLogger("calving.row_ids")

#: Bytes read from a file's end to find its footer (a task file's is a few KiB).
FOOTER_GUESS = 64 << 10


def lineage_location(location: str) -> str:
    """Where the copy of ``location`` storing row ids goes: beside it, a new name."""
    stem = location.removesuffix(".parquet")
    return f"{stem}-rowid-{uuid.uuid4().hex[:8]}.parquet"


def store_row_ids(io: FileIO, schema: Schema, data_file: DataFile, row_ids: np.ndarray) -> DataFile:
    """The uncommitted ``data_file`` (rows of ``schema``) with row ``i`` storing
    ``row_ids[i]`` as its ``_row_id`` (``UNKNOWN``: null, inherited) and a null
    ``_last_updated_sequence_number``.

    The two columns are encoded as column chunks (``lineage_chunks``) and take the place
    of the file's footer with a new footer (``splice_tail``): only the footer is read,
    and the data is not decoded or encoded again. A local file changes in place (same
    name, nothing copied); elsewhere the result is written beside it under a new name
    and the task's file deleted. A file that cannot
    be spliced (an encrypted footer, say) is read and written again whole."""
    if len(row_ids) != data_file.record_count:
        raise ValueError(
            f"{data_file.file_path}: {len(row_ids)} row ids for {data_file.record_count} rows"
        )
    path = data_file.file_path
    try:
        meta, start = _read_footer(io, path, data_file.file_size_in_bytes)
        lineage = lineage_columns(row_ids, row_group_rows(meta))
        tail = splice_tail(meta, start, lineage)
    except (SpliceError, ThriftError) as err:
        log.debug("%s: rewriting whole to store row ids (%s)", path, err)
        out = _rewrite(io, schema, data_file, row_ids, lineage_location(path))
    else:
        size = start + len(tail)  # the file's chunks stay as they are
        if io.replace_tail(path, start, tail):
            return replace(data_file, file_size_in_bytes=size)
        location = lineage_location(path)
        io.write(location, io.read_range(path, 0, start) + tail)
        out = replace(data_file, file_path=location, file_size_in_bytes=size)
    try:
        io.delete(data_file.file_path)
    except CalvingError as err:  # an uncommitted file left behind is an orphan, no more
        log.warning("could not delete %s: %s", data_file.file_path, err)
    return out


def _read_footer(io: FileIO, location: str, size: int) -> tuple[tc.Struct, int]:
    """The footer of the ``size``-byte Parquet file at ``location`` and where it
    starts, read from the file's end (a second read when the footer is longer than the
    first guess): the chunks before it are not read."""
    guess = min(size, FOOTER_GUESS)
    tail = io.read_range(location, size - guess, guess)
    span = footer_span(tail)
    if span > len(tail) and span <= size:
        tail = io.read_range(location, size - span, span)
    return footer_of_tail(tail, size, raw_chunks=True)  # its chunks stay as they are


def _rewrite(
    io: FileIO, schema: Schema, data_file: DataFile, row_ids: np.ndarray, location: str
) -> DataFile:
    """``store_row_ids`` by reading the file's rows and writing them again."""
    rows = project(read_data_file(io, data_file, "storing row ids"), schema)
    ids = pa.array(row_ids, pa.int64(), mask=np.asarray(row_ids) == UNKNOWN)
    rows = rows.append_column(rl.ROW_ID.name, ids).append_column(
        rl.LAST_UPDATED_SEQUENCE_NUMBER.name, pa.nulls(rows.num_rows, pa.int64())
    )
    written = write_data_file(
        io,
        location,
        rows,
        with_lineage(schema),
        partition=data_file.partition,
        spec_id=data_file.spec_id,
    )
    return replace(table_metrics(written, UNSORTED), sort_order_id=data_file.sort_order_id)
