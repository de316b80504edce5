"""The demo's closing check: read the table back with readers that share no code with
calving and compare with the generator's final state.

pyiceberg opens the table through its own SqlCatalog on the same database (so the check
also proves the catalog is shared), and DuckDB's iceberg extension, when installed, scans
the current metadata file. Either reader disagreeing with the expected rows is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


@dataclass
class ReadBack:
    reader: str
    rows: int
    missing: int = 0
    unexpected: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.unexpected == 0


def compare(
    reader: str, got: Sequence[tuple[Any, ...]], expected: Sequence[tuple[Any, ...]]
) -> ReadBack:
    """Multiset comparison (a duplicated row is an unexpected one)."""
    from collections import Counter

    have, want = Counter(got), Counter(expected)
    missing, unexpected = want - have, have - want
    examples = [f"missing {r}" for r in list(missing)[:3]]
    examples += [f"unexpected {r}" for r in list(unexpected)[:3]]
    return ReadBack(reader, len(got), sum(missing.values()), sum(unexpected.values()), examples)


def rows_of(table: pa.Table, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    table = table.select(list(columns))
    return list(zip(*(table.column(c).to_pylist() for c in columns))) if table.num_rows else []


def pyiceberg_rows(
    catalog_uri: str, catalog_name: str, warehouse: str, table_name: str, columns: Sequence[str]
) -> list[tuple[Any, ...]]:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(catalog_name, uri=catalog_uri, warehouse=warehouse)
    return rows_of(catalog.load_table(table_name).scan().to_arrow(), columns)


def duckdb_available() -> bool:
    try:
        import duckdb  # noqa: F401
        import duckdb_extension_avro  # noqa: F401
        import duckdb_extension_iceberg  # noqa: F401
    except ImportError:
        return False
    return True


def duckdb_connection() -> Any:
    """A DuckDB connection with the iceberg and avro extensions loaded from their PyPI
    packages by path, autoinstall and autoload off (nothing is downloaded)."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    for module, name in ((duckdb_extension_avro, "avro"), (duckdb_extension_iceberg, "iceberg")):
        base = os.path.join(os.path.dirname(module.__file__), "extensions")
        version_dir = os.path.join(base, max(os.listdir(base)))
        con.execute(f"LOAD '{os.path.join(version_dir, name + '.duckdb_extension')}'")
    return con


def duckdb_rows(metadata_location: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """The table's rows as DuckDB's ``iceberg_scan`` of the metadata file sees them."""
    con = duckdb_connection()
    try:
        con.execute("SET TimeZone = 'UTC'")
        cols = ", ".join(f'"{c}"' for c in columns)
        path = metadata_location.removeprefix("file://").replace("'", "''")
        scanned = con.execute(f"SELECT {cols} FROM iceberg_scan('{path}')").to_arrow_table()
        return rows_of(scanned, columns)
    finally:
        con.close()
