"""Reading a table's Parquet data files: one opener with one error mapping, and columns
found by Parquet field id (never by name). Used by the primary-key index, column
statistics, the rewrite task and the change feed; ``project`` puts them onto a schema."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from calving.commit.errors import (
    CorruptFileError,
    FileIOError,
    FileNotFoundInTableError,
    UnsupportedFeatureError,
)
from calving.commit.io import FileIO
from calving.commit.spec.arrow import FIELD_ID_KEY, schema_to_arrow
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.json_values import default_array
from calving.commit.spec.schema import Schema


def top_level_field_ids(schema: pa.Schema) -> dict[int, str]:
    """Field id -> column name of a Parquet file's top-level columns that carry one."""
    return {
        int(f.metadata[FIELD_ID_KEY]): f.name
        for f in schema
        if f.metadata and FIELD_ID_KEY in f.metadata
    }


def read_data_file(
    io: FileIO,
    data_file: DataFile,
    what: str,
    columns: Callable[[pa.Schema], list[str]] | None = None,
) -> pa.Table:
    """The rows of a Parquet data file (``columns(file schema)`` picks the top-level
    columns; all when None), checked against the manifest's record count. ``what`` names
    the purpose in error messages."""
    location = data_file.file_path
    if data_file.file_format.upper() != "PARQUET":
        raise UnsupportedFeatureError(
            f"{location}: {data_file.file_format} data files cannot be read for {what} "
            "(Parquet only)"
        )
    fs, path = io.resolve(location)
    try:
        with fs.open_input_file(path) as f:
            parquet = pq.ParquetFile(f)
            names = None if columns is None else columns(parquet.schema_arrow)
            table = parquet.read(columns=names, use_threads=False)
    except FileNotFoundError:
        raise FileNotFoundInTableError(location) from None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise CorruptFileError(location, f"cannot read for {what}: {err}") from None
    except (OSError, pa.ArrowException) as err:
        raise FileIOError(f"{location}: reading for {what} failed: {err}") from err
    if table.num_rows != data_file.record_count:
        raise CorruptFileError(
            location, f"{table.num_rows} rows, the manifest says {data_file.record_count}"
        )
    return table


def project(table: pa.Table, schema: Schema) -> pa.Table:
    """A data file's rows as ``schema``'s Arrow schema, columns found by field id: a
    column the file lacks (added to the table after the file was written) reads the
    field's ``initial-default`` (null without one); a promoted type is cast."""
    by_id = {
        fid: table.schema.get_field_index(name)
        for fid, name in top_level_field_ids(table.schema).items()
    }
    target = schema_to_arrow(schema)
    columns = []
    for field, arrow_field in zip(schema.fields, target):
        i = by_id.get(field.field_id)
        if i is None:
            columns.append(
                default_array(
                    field.field_type, field.initial_default, table.num_rows, arrow_field.type
                )
            )
        else:
            columns.append(table.column(i).cast(arrow_field.type))
    return pa.Table.from_arrays(columns, schema=target)
