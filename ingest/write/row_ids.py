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
from calving.ingest.write.append_columns import (
    SpliceError,
    append_chunks,
    footer,
    row_group_rows,
)
from calving.ingest.write.lineage_chunks import lineage_columns
from calving.ingest.write.parquet_writer import write_data_file
from calving.ingest.write.rewrite import table_metrics, with_lineage
from calving.ingest.write.thrift_compact import ThriftError

log = logging.getLogger("calving.row_ids")


def lineage_location(location: str) -> str:
    """Where the copy of ``location`` storing row ids goes: beside it, a new name."""
    stem = location.removesuffix(".parquet")
    return f"{stem}-rowid-{uuid.uuid4().hex[:8]}.parquet"


def store_row_ids(io: FileIO, schema: Schema, data_file: DataFile, row_ids: np.ndarray) -> DataFile:
    """The uncommitted ``data_file`` (rows of ``schema``) with row ``i`` storing
    ``row_ids[i]`` as its ``_row_id`` (``UNKNOWN``: null, inherited) and a null
    ``_last_updated_sequence_number``.

    The two columns are encoded as column chunks (``lineage_chunks``) and appended to
    the file's bytes (``append_chunks``): its data is
    not decoded or encoded again. A local file changes in place (its footer replaced by
    the new columns and a new footer: same name, nothing copied); elsewhere the result
    is written beside it under a new name and the task's file deleted. A file that cannot
    be spliced (an encrypted footer, say) is read and written again whole."""
    if len(row_ids) != data_file.record_count:
        raise ValueError(
            f"{data_file.file_path}: {len(row_ids)} row ids for {data_file.record_count} rows"
        )
    original = io.read(data_file.file_path)
    try:
        decoded = footer(original)
        lineage = lineage_columns(row_ids, row_group_rows(decoded[0]))
        spliced = append_chunks(original, lineage, decoded)
    except (SpliceError, ThriftError) as err:
        log.debug("%s: rewriting whole to store row ids (%s)", data_file.file_path, err)
        out = _rewrite(io, schema, data_file, row_ids, lineage_location(data_file.file_path))
    else:
        keep = decoded[1]  # the original's bytes before its footer are spliced's too
        if io.replace_tail(data_file.file_path, keep, spliced[keep:]):
            return replace(data_file, file_size_in_bytes=len(spliced))
        location = lineage_location(data_file.file_path)
        io.write(location, spliced)
        out = replace(data_file, file_path=location, file_size_in_bytes=len(spliced))
    try:
        io.delete(data_file.file_path)
    except CalvingError as err:  # an uncommitted file left behind is an orphan, no more
        log.warning("could not delete %s: %s", data_file.file_path, err)
    return out


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
