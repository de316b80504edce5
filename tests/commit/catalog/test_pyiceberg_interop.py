"""calving and pyiceberg's SqlCatalog share one catalog database, both directions."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog as PyIcebergSqlCatalog

from calving.commit.catalog import SqlCatalog
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.table import Table
from tests.support.tables import COLUMNS, make_table, row, rows_as_tuples, write_partitioned

pytestmark = pytest.mark.integration


def _pyiceberg(cat: SqlCatalog) -> PyIcebergSqlCatalog:
    return PyIcebergSqlCatalog(cat.name, uri=cat.uri, warehouse=cat.warehouse)


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request):
    return request.getfixturevalue("sqlite_catalog" if request.param == "sqlite" else "pg_catalog")


def test_pyiceberg_lists_and_reads_calving_tables(shared):
    table = make_table(shared)
    rows = [row(i) for i in range(5)]
    table.commit(FastAppend(tuple(f for f, _ in write_partitioned(table, rows))))
    theirs = _pyiceberg(shared)
    assert ("db", "events") in theirs.list_tables("db")
    loaded = theirs.load_table("db.events")
    assert loaded.metadata.format_version == 3
    got = loaded.scan().to_arrow().select(COLUMNS).to_pylist()
    assert rows_as_tuples(got) == rows_as_tuples(rows)


def test_calving_loads_and_appends_to_pyiceberg_tables(shared):
    theirs = _pyiceberg(shared)
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]})
    theirs.create_namespace("py")
    created = theirs.create_table("py.items", schema=data.schema)
    created.append(data)
    assert ("py", "items") in shared.list_tables(("py",))
    ours = Table.load(shared, ("py", "items"))
    assert ours.metadata.current_snapshot is not None
    # calving can read pyiceberg's (v2) manifests as live files
    live = ours.live_files()
    assert sum(e.data_file.record_count for e in live.data.values()) == 2
    assert ours.metadata_location == theirs.load_table("py.items").metadata_location
