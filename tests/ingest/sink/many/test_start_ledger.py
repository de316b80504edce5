"""A many-table pipeline's restart point after a lost checkpoint (issue 20, part 6):
``ManyTablesSink.starting_ledger`` reads every table's ledger for the writer. A table
that fails to load at start used to be skipped with a warning, so a transient catalog
error moved the restart point past that table's ledger (its records were never
written). Now a transient failure is retried, and a table that still cannot be loaded
stops the start with one line naming it; only a table dropped since it was listed is
left out."""

from __future__ import annotations

from typing import Any

import pytest

from calving.commit.catalog.base import TableIdent
from calving.commit.catalog.sql import SqlCatalog
from calving.commit.errors import CatalogUnavailableError
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.ledger import LedgerClaim, OffsetRange
from calving.ingest.config.format import FormatConfig
from calving.ingest.config.router import TableRouter
from calving.ingest.config.table import TableConfig
from calving.ingest.sink.many import start as many_start
from calving.ingest.sink.many.sink import LedgerUnreadableError, ManyTablesSink
from tests.support.tables import make_table, row, write_partitioned

WRITER = "db"


class FlakyCatalog(SqlCatalog):
    """A SQL catalog whose ``load_metadata_location`` of one table fails ``failures``
    times (a catalog that is briefly unavailable at start)."""

    def __init__(self, *args: Any, flaky: TableIdent, failures: int, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.flaky = flaky
        self.failures = failures

    def load_metadata_location(self, ident: TableIdent) -> str:
        if tuple(ident) == self.flaky and self.failures > 0:
            self.failures -= 1
            raise CatalogUnavailableError("catalog unavailable (injected)")
        return super().load_metadata_location(ident)


def _catalog(tmp_path: Any, failures: int) -> FlakyCatalog:
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir(exist_ok=True)
    uri = f"sqlite:///{tmp_path}/catalog.db"
    return FlakyCatalog("t", uri, str(warehouse), flaky=("db", "behind"), failures=failures)


def _sink(catalog: SqlCatalog) -> ManyTablesSink:
    router = TableRouter.from_config(name="{schema}.{table}", topic_pattern=r"db\..*")
    options: Any = None  # reading ledgers asks no broker
    template = TableConfig(catalog="sqlite://", warehouse="w", name="{schema}.{table}")
    fmt = FormatConfig(type="debezium-json")
    return ManyTablesSink(catalog, catalog.io, router, template, fmt, WRITER, options)


def _ledgered(catalog: SqlCatalog, name: str, end: int) -> None:
    """A table holding topic ``t`` partition 0 up to ``end``."""
    table = make_table(catalog, name)
    files = tuple(f for f, _ in write_partitioned(table, [row(end)]))
    claim = LedgerClaim(WRITER, {("t", 0): OffsetRange(0, end)})
    table.commit_or_raise(FastAppend(files, ledger=claim))


@pytest.fixture
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(many_start, "LOAD_RETRY_DELAYS", (0.01, 0.01))


def test_a_table_that_fails_once_at_start_still_holds_the_restart_point(
    tmp_path: Any, no_wait: None
) -> None:
    setup = _catalog(tmp_path, failures=0)
    setup.create_namespace(("db",))
    _ledgered(setup, "ahead", 50)
    _ledgered(setup, "behind", 20)
    catalog = _catalog(tmp_path, failures=1)
    assert _sink(catalog).starting_ledger() == {("t", 0): 20}
    assert catalog.failures == 0


def test_a_table_that_cannot_be_loaded_stops_the_start(tmp_path: Any, no_wait: None) -> None:
    setup = _catalog(tmp_path, failures=0)
    setup.create_namespace(("db",))
    _ledgered(setup, "ahead", 50)
    _ledgered(setup, "behind", 20)
    catalog = _catalog(tmp_path, failures=100)
    with pytest.raises(LedgerUnreadableError) as err:
        _sink(catalog).starting_ledger()
    message = str(err.value)
    assert message.startswith("cannot load table db.behind to read its ledger after 3 tries")
    assert "\n" not in message


def test_a_table_dropped_since_it_was_listed_is_left_out(tmp_path: Any, no_wait: None) -> None:
    catalog = _catalog(tmp_path, failures=0)
    catalog.create_namespace(("db",))
    _ledgered(catalog, "ahead", 50)
    _ledgered(catalog, "behind", 20)
    listed = catalog.list_tables(("db",))
    catalog.drop_table_entry(("db", "behind"))
    catalog.list_tables = lambda namespace: listed  # type: ignore[method-assign]  # the catalog lists a table its entry no longer has
    assert _sink(catalog).starting_ledger() == {("t", 0): 50}
