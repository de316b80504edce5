"""Multi-table commits through REST: ``commit_tables`` on a ``RestCatalog`` sends one
``POST /v1/transactions/commit`` that ``calving catalog serve`` applies in one SQL
transaction: every table advances or none, a table another writer moved is rebuilt."""

from __future__ import annotations

import pytest

from calving.commit.catalog.rest.client import RestCatalog
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.committer import Committed
from calving.commit.table.multi_commit import TableCommit, commit_tables
from calving.commit.table.table import Table
from tests.commit.catalog.rest.conftest import start_server
from tests.support.oracles import pyiceberg_rows
from tests.support.tables import COLUMNS, make_table, row, rows_as_tuples, write_partitioned

pytestmark = pytest.mark.integration


def _append(table: Table, first: int) -> tuple[TableCommit, list]:
    rows = [row(first + i) for i in range(3)]
    files = tuple(f for f, _ in write_partitioned(table, rows))
    return TableCommit(table.ident, FastAppend(files)), rows


def test_tables_commit_together_through_the_transactions_endpoint(shared):
    server = start_server(shared)
    try:
        rest = RestCatalog("rest", server.url)
        assert rest.supports_multi_table_commit
        tables = [make_table(rest, name) for name in ("orders", "lines")]
        (a, rows_a), (b, rows_b) = _append(tables[0], 0), _append(tables[1], 100)
        other = Table.load(shared, tables[1].ident)
        moved, rows_m = _append(other, 500)
        send, calls = rest.commit_many, []

        def commit_many(swaps):  # another writer moves "lines" just before our request
            calls.append(len(swaps))
            if len(calls) == 1:
                assert isinstance(other.commit(moved.action), Committed)
            send(swaps)

        rest.commit_many = commit_many
        outcomes = commit_tables(rest, rest.io, [a, b])
        assert calls == [2, 2]  # the 409 rolled everything back; both were sent again
        assert all(isinstance(o, Committed) for o in outcomes.values())
        direct = [Table.load(shared, t.ident) for t in tables]
        assert [len(t.metadata.snapshots) for t in direct] == [1, 2]
        assert pyiceberg_rows(direct[0].metadata_location, COLUMNS) == rows_as_tuples(rows_a)
        assert pyiceberg_rows(direct[1].metadata_location, COLUMNS) == rows_as_tuples(
            rows_b + rows_m
        )
    finally:
        server.stop()
