"""Independent readers used as oracles: pyiceberg, DuckDB's iceberg extension, and
pyiceberg-core's DataFusion provider. Each returns the table's rows as a sorted list
of tuples over the given columns, so tests compare them to the expected rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

# Only the extension loading is shared with the demo; the scan below is the oracle's own.
from calving.ingest.demo.verify import duckdb_connection


def _sorted_rows(table: pa.Table, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    table = table.select(list(columns))
    rows = list(zip(*(table.column(c).to_pylist() for c in columns))) if table.num_rows else []
    return sorted(rows, key=lambda r: tuple((v is None, v) for v in r))


def _local_path(location: str) -> str:
    return location.removeprefix("file://")


def pyiceberg_rows(metadata_location: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_location)
    return _sorted_rows(table.scan().to_arrow(), columns)


def duckdb_rows(metadata_location: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    con = duckdb_connection()
    try:
        cols = ", ".join(f'"{c}"' for c in columns)
        path = _local_path(metadata_location).replace("'", "''")
        table = con.execute(f"SELECT {cols} FROM iceberg_scan('{path}')").to_arrow_table()
    finally:
        con.close()
    return _sorted_rows(table, columns)


def datafusion_rows(metadata_location: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    from datafusion import SessionContext
    from pyiceberg_core.datafusion import IcebergDataFusionTable

    ctx = SessionContext()
    provider = IcebergDataFusionTable(
        identifier=["oracle", "t"], metadata_location=metadata_location, file_io_properties={}
    )
    ctx.register_table("t", provider)
    cols = ", ".join(f'"{c}"' for c in columns)
    batches = ctx.sql(f"SELECT {cols} FROM t").collect()
    table = pa.Table.from_batches(batches) if batches else pa.table({c: [] for c in columns})
    return _sorted_rows(table, columns)


ALL_READERS = {"pyiceberg": pyiceberg_rows, "duckdb": duckdb_rows, "datafusion": datafusion_rows}
