"""``calving table show --writer ID`` (issue 22 part 5): a line per table of a writer,
found by the writer registry (or by reading the catalog when it has none), with the
totals; tables of other writers are not shown."""

from __future__ import annotations

from typing import Any

import pytest

from calving.commit.catalog.base import TableIdent
from calving.commit.catalog.sql import SqlCatalog
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.ledger import LedgerClaim, OffsetRange
from calving.commit.table.table import create_table
from calving.ingest.cli import main
from calving.ingest.sink.many.registry import WriterRegistry
from tests.support.tables import EVENTS, events_spec, row, write_partitioned


def _commit(catalog: SqlCatalog, ident: TableIdent, writer: str, end: int, rows: int) -> None:
    catalog.create_namespace_if_missing(ident[:-1])
    table = create_table(catalog, ident, EVENTS, spec=events_spec())
    files = tuple(f for f, _ in write_partitioned(table, [row(i) for i in range(rows)]))
    claim = LedgerClaim(writer, {(".".join(ident), 0): OffsetRange(0, end)})
    table.commit_or_raise(FastAppend(files, ledger=claim))


@pytest.fixture
def crowded(tmp_path: Any) -> tuple[SqlCatalog, str]:
    uri = f"sqlite:///{tmp_path}/catalog.db"
    catalog = SqlCatalog("calving", uri, str(tmp_path / "warehouse"))
    _commit(catalog, ("db", "orders"), "shop", 40, rows=4)
    _commit(catalog, ("db", "customers"), "shop", 7, rows=2)
    _commit(catalog, ("other", "clicks"), "web", 9, rows=3)
    return catalog, uri


def _show(uri: str, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["table", "show", "--catalog", uri, *args]) == 0
    return capsys.readouterr().out


def test_a_writers_tables_are_summarized_a_line_each(
    crowded: tuple[SqlCatalog, str], capsys: pytest.CaptureFixture[str]
) -> None:
    catalog, uri = crowded
    scanned = _show(uri, capsys, "--writer", "shop")
    assert scanned.splitlines()[0] == (
        "writer shop: 2 table(s), found by every table of the catalog (the writer has no "
        "registry yet)"
    )
    WriterRegistry(catalog, "shop").register([("db", "orders"), ("db", "customers")], catalog.io)
    out = _show(uri, capsys, "--writer", "shop")
    lines = out.splitlines()
    assert lines[0] == "writer shop: 2 table(s), found by the writer registry"
    assert lines[1].split()[:3] == ["table", "last", "commit"]
    customers = next(line.split() for line in lines if line.strip().startswith("db.customers"))
    orders = next(line.split() for line in lines if line.strip().startswith("db.orders"))
    # name, date, time, age (2 words), partitions, next offsets, live rows, files, ...
    assert (customers[5], customers[6], customers[7]) == ("1", "7", "2")
    assert (orders[5], orders[6], orders[7]) == ("1", "40", "4")
    assert "other.clicks" not in out
    assert "totals: 2 tables   live rows 6" in out


def test_no_table_or_both_is_refused_in_one_line(
    crowded: tuple[SqlCatalog, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, uri = crowded
    assert main(["table", "show", "--catalog", uri]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "calving: configuration error: table show: give a table NAME or --writer ID (one of them)"
    )
    assert main(["table", "show", "db.orders", "--catalog", uri, "--writer", "shop"]) == 2


def test_a_writer_with_no_tables(
    crowded: tuple[SqlCatalog, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, uri = crowded
    out = _show(uri, capsys, "--writer", "nobody")
    assert out.strip() == (
        "writer nobody: 0 table(s), found by every table of the catalog (the writer has no "
        "registry yet)"
    )
