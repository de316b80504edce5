"""Reading the rows a change names: a data file's rows at some positions (only the
Parquet row groups that hold them) or all of them, projected onto the feed's schema,
with each row's v3 lineage: ``_row_id`` (the stored column, else the file's
``first_row_id`` + position) and ``_last_updated_sequence_number`` (the stored column,
else the file's data sequence number)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from calving.commit.changelog.columns import LINEAGE_SCHEMA
from calving.commit.changelog.delta import FileRef
from calving.commit.errors import (
    CorruptFileError,
    FileIOError,
    FileNotFoundInTableError,
    UnsupportedFeatureError,
)
from calving.commit.io import FileIO
from calving.commit.spec import row_lineage as rl
from calving.commit.spec.schema import Schema
from calving.commit.table.data_files import project, top_level_field_ids


def _read(io: FileIO, ref: FileRef, positions: np.ndarray | None, lineage_only: bool) -> pa.Table:
    """The file's rows at ``positions`` (sorted; None: all), every column or only the
    lineage ones."""
    location = ref.path
    if ref.data_file.file_format.upper() != "PARQUET":
        raise UnsupportedFeatureError(f"{location}: the change feed reads Parquet data files only")
    fs, path = io.resolve(location)
    try:
        with fs.open_input_file(path) as f:
            parquet = pq.ParquetFile(f)
            names = None
            if lineage_only:
                ids = top_level_field_ids(parquet.schema_arrow)
                names = [ids[i] for i in rl.LINEAGE_FIELD_IDS if i in ids]
            if positions is None:
                return parquet.read(columns=names, use_threads=False)
            counts = [parquet.metadata.row_group(g).num_rows for g in range(parquet.num_row_groups)]
            starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            groups = np.unique(np.searchsorted(starts, positions, side="right") - 1)
            table = parquet.read_row_groups(groups.tolist(), columns=names, use_threads=False)
    except FileNotFoundError:
        raise FileNotFoundInTableError(location, "named by the change range") from None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise CorruptFileError(location, f"cannot read for the change feed: {err}") from None
    except (OSError, pa.ArrowException) as err:
        raise FileIOError(f"{location}: reading for the change feed failed: {err}") from err
    if positions.size and positions[-1] >= starts[-1]:
        raise CorruptFileError(location, f"position {positions[-1]} past its {starts[-1]} rows")
    # Where each wanted position sits in the concatenation of the groups read.
    offsets = np.zeros(len(counts), dtype=np.int64)
    offsets[groups] = np.concatenate([[0], np.cumsum(np.asarray(counts)[groups])[:-1]])
    group_of = np.searchsorted(starts, positions, side="right") - 1
    local = positions - starts[group_of] + offsets[group_of]
    return table.take(pa.array(local, pa.int64()))


def _stored(raw: pa.Table, field_id: int) -> pa.Array | None:
    name = top_level_field_ids(raw.schema).get(field_id)
    if name is None:
        return None
    column = raw.column(name).cast(pa.int64())
    return column.combine_chunks()


def lineage_of(raw: pa.Table, ref: FileRef, positions: np.ndarray) -> pa.Table:
    """``_row_id``, ``_last_updated_sequence_number`` and ``_pos`` of the rows read."""
    pos = pa.array(positions, pa.int64())
    row_ids = _stored(raw, rl.ROW_ID_FIELD_ID)
    if ref.first_row_id is not None:
        inherited = pa.array(positions + ref.first_row_id, pa.int64())
        row_ids = inherited if row_ids is None else pc.coalesce(row_ids, inherited)
    elif row_ids is None:
        row_ids = pa.nulls(len(positions), pa.int64())
    seqs = _stored(raw, rl.LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID)
    seq = pa.scalar(ref.sequence_number, pa.int64())
    seqs = pa.repeat(seq, len(positions)) if seqs is None else pc.coalesce(seqs, seq)
    return pa.Table.from_arrays([row_ids, seqs, pos], schema=LINEAGE_SCHEMA)


def read_rows(
    io: FileIO,
    ref: FileRef,
    positions: np.ndarray | None,
    schema: Schema | None,
) -> pa.Table:
    """Rows of ``ref`` at ``positions`` (sorted int64; None: all rows) as ``schema``'s
    columns followed by the lineage columns (``schema`` None: lineage columns only)."""
    raw = _read(io, ref, positions, lineage_only=schema is None)
    if positions is None:
        if raw.num_rows != ref.data_file.record_count:
            raise CorruptFileError(
                ref.path, f"{raw.num_rows} rows, the manifest says {ref.data_file.record_count}"
            )
        positions = np.arange(raw.num_rows, dtype=np.int64)
    lineage = lineage_of(raw, ref, positions)
    if schema is None:
        return lineage
    data = project(raw, schema)
    return pa.Table.from_arrays(
        data.columns + lineage.columns, schema=pa.schema([*data.schema, *lineage.schema])
    )
