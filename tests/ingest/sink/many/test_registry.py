"""The writer registry (issue 22 part 2): a many-table pipeline's start loads the
tables that hold its ledger, not every table of the catalog, and its restart point
never moves past a table's ledger."""

from __future__ import annotations

from typing import Any

import pytest

from calving.commit.catalog.base import TableIdent
from calving.commit.catalog.sql import SqlCatalog
from calving.commit.errors import CatalogUnavailableError
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.ledger import LedgerClaim, OffsetRange
from calving.commit.table.multi_commit import TableCommit
from calving.commit.table.table import Table, create_table
from calving.ingest.sink.many.registry import WriterRegistry, complete_key, entry_key
from calving.ingest.sink.many.start import LedgerUnreadableError
from tests.ingest.sink.many.test_start_ledger import WRITER, _ledgered, _sink
from tests.support.tables import EVENTS, events_spec, row, write_partitioned


class CountingCatalog(SqlCatalog):
    """A SQL catalog counting the tables it was asked to load."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.loaded: list[TableIdent] = []

    def load_metadata_location(self, ident: TableIdent) -> str:
        self.loaded.append(tuple(ident))
        return super().load_metadata_location(ident)


def _catalog(tmp_path: Any) -> CountingCatalog:
    (tmp_path / "warehouse").mkdir(exist_ok=True)
    return CountingCatalog("t", f"sqlite:///{tmp_path}/catalog.db", str(tmp_path / "warehouse"))


def _table(catalog: SqlCatalog, ident: TableIdent) -> Table:
    return create_table(catalog, ident, EVENTS, spec=events_spec())


def _holding(catalog: SqlCatalog, ident: TableIdent, writer: str, end: int) -> None:
    """Table ``ident`` holding ``writer``'s topic ``t`` partition 0 up to ``end``."""
    catalog.create_namespace_if_missing(ident[:-1])
    table = _table(catalog, ident)
    files = tuple(f for f, _ in write_partitioned(table, [row(end)]))
    claim = LedgerClaim(writer, {("t", 0): OffsetRange(0, end)})
    table.commit_or_raise(FastAppend(files, ledger=claim))


def _foreign(catalog: SqlCatalog, count: int) -> None:
    """``count`` tables of another writer, in the writer's namespace and another one."""
    for i in range(count):
        ident = ("other", f"t{i}") if i % 2 else ("db", f"f{i}")
        _holding(catalog, ident, "someone-else", i + 1)


def test_the_first_start_reads_the_catalog_then_restarts_read_the_registry(tmp_path: Any) -> None:
    catalog = _catalog(tmp_path)
    catalog.create_namespace(("db",))
    _ledgered(catalog, "ahead", 50)  # written by a version that kept no registry
    _ledgered(catalog, "behind", 20)
    _foreign(catalog, 12)

    first = _sink(catalog)
    assert first.starting_ledger() == {("t", 0): 20}
    assert first.registry.found_by == "catalog scan"
    assert len(set(catalog.loaded)) == 14
    assert WriterRegistry(catalog, WRITER).registered() == [("db", "ahead"), ("db", "behind")]
    props = catalog.namespace_properties(("db",))
    assert props[complete_key(WRITER)] == "1"
    assert props[entry_key(WRITER, "behind")] == "behind"
    assert not any(
        k.startswith("calving.writer.") for k in catalog.namespace_properties(("other",))
    )

    catalog.loaded.clear()
    again = _sink(catalog)
    assert again.starting_ledger() == {("t", 0): 20}
    assert again.registry.found_by == "registry"
    assert sorted(set(catalog.loaded)) == [("db", "ahead"), ("db", "behind")]


def test_a_table_is_registered_before_its_first_commit(tmp_path: Any) -> None:
    catalog = _catalog(tmp_path)
    catalog.create_namespace(("db",))
    _ledgered(catalog, "ahead", 50)
    catalog.create_namespace(("sales",))
    new = _table(catalog, ("sales", "orders"))
    sink = _sink(catalog)
    sink.starting_ledger()
    swapped: list[list[TableIdent]] = []

    def registered_at_swap(commits: list[TableCommit]) -> Any:
        swapped.append(WriterRegistry(catalog, WRITER).registered() or [])
        return {}, False

    import calving.ingest.sink.many.sink as sink_module

    original = sink_module.swap_in
    sink_module.swap_in = lambda c, io, commits: registered_at_swap(commits)  # type: ignore[assignment]  # observe the registry at the swap
    try:
        files = tuple(f for f, _ in write_partitioned(new, [row(1)]))
        claim = LedgerClaim(WRITER, {("s", 0): OffsetRange(0, 1)})
        sink._swap([TableCommit(new.ident, FastAppend(files, ledger=claim))])
    finally:
        sink_module.swap_in = original
    assert swapped == [[("db", "ahead"), ("sales", "orders")]]


def test_a_registered_table_dropped_since_is_left_out(tmp_path: Any) -> None:
    catalog = _catalog(tmp_path)
    catalog.create_namespace(("db",))
    _ledgered(catalog, "ahead", 50)
    _ledgered(catalog, "behind", 20)
    assert _sink(catalog).starting_ledger() == {("t", 0): 20}
    catalog.drop_table_entry(("db", "behind"))
    again = _sink(catalog)
    assert again.starting_ledger() == {("t", 0): 50}
    assert again.registry.found_by == "registry"


def test_without_the_completeness_key_the_start_reads_the_whole_catalog(tmp_path: Any) -> None:
    """Entries alone prove nothing (a namespace holding the key was dropped): a table
    that holds the ledger but is not registered must still hold the restart point."""
    catalog = _catalog(tmp_path)
    catalog.create_namespace(("db",))
    _ledgered(catalog, "ahead", 50)
    _holding(catalog, ("late", "behind"), WRITER, 20)
    catalog.update_namespace_properties(("db",), {entry_key(WRITER, "ahead"): "ahead"})
    sink = _sink(catalog)
    assert sink.starting_ledger() == {("t", 0): 20}
    assert sink.registry.found_by == "catalog scan"


@pytest.mark.parametrize("count", [0, 3])
def test_a_new_writer_registers_its_first_table(tmp_path: Any, count: int) -> None:
    catalog = _catalog(tmp_path)
    catalog.create_namespace(("db",))
    _foreign(catalog, count)
    sink = _sink(catalog)
    assert sink.starting_ledger() == {}
    assert WriterRegistry(catalog, WRITER).registered() is None
    sink.registry.register([("db", "first")], catalog.io)
    assert WriterRegistry(catalog, WRITER).registered() == [("db", "first")]


def test_a_name_too_long_for_a_key_is_registered_by_its_hash(tmp_path: Any) -> None:
    catalog = _catalog(tmp_path)
    catalog.create_namespace(("db",))
    name = "n" * 250
    registry = WriterRegistry(catalog, WRITER)
    registry.register([("db", name)], catalog.io)
    keys = [k for k in catalog.namespace_properties(("db",)) if "sha256" in k]
    assert len(keys) == 1 and len(keys[0]) <= 255
    assert WriterRegistry(catalog, WRITER).registered() == [("db", name)]


class FlakyRegistryCatalog(CountingCatalog):
    """The catalog is unavailable for the first ``failures`` registry reads."""

    def __init__(self, *args: Any, failures: int, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.failures = failures

    def properties_with_prefix(self, prefix: str) -> dict[tuple[str, ...], dict[str, str]]:
        if self.failures > 0:
            self.failures -= 1
            raise CatalogUnavailableError("catalog unavailable (injected)")
        return super().properties_with_prefix(prefix)


def _registered(catalog: Any) -> Any:
    """Two tables of writer db (ledgers at 50 and 20) whose first start wrote the
    writer registry; returns ``catalog``."""
    catalog.create_namespace(("db",))
    _ledgered(catalog, "ahead", 50)
    _ledgered(catalog, "behind", 20)
    assert _sink(catalog).starting_ledger() == {("t", 0): 20}  # the registry is written
    return catalog


@pytest.mark.parametrize(("failures", "starts"), [(1, True), (9, False)])
def test_a_catalog_failing_during_start_is_retried_then_stops_the_start(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, failures: int, starts: bool
) -> None:
    from calving.ingest.sink.many import start as many_start

    monkeypatch.setattr(many_start, "LOAD_RETRY_DELAYS", (0.01, 0.01))
    _registered(_catalog(tmp_path))
    (tmp_path / "warehouse").mkdir(exist_ok=True)
    flaky = FlakyRegistryCatalog(
        "t", f"sqlite:///{tmp_path}/catalog.db", str(tmp_path / "warehouse"), failures=failures
    )
    if starts:
        sink = _sink(flaky)
        assert sink.starting_ledger() == {("t", 0): 20}
        assert sink.registry.found_by == "registry" and flaky.failures == 0
        return
    with pytest.raises(LedgerUnreadableError) as err:
        _sink(flaky).starting_ledger()
    assert str(err.value).startswith("cannot read writer db's registry after 3 tries")


@pytest.mark.parametrize(("action", "starts"), [("once-transient", True), ("transient", False)])
def test_the_catalog_read_at_start_fault_point_fails_the_start_read(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, action: str, starts: bool
) -> None:
    """``catalog-read-at-start`` (what the many-table fault scenarios arm through
    ``CALVING_FAULTS``) fails the start's catalog reads with a transient error: once,
    the start retries and goes on; every time, it stops."""
    from calving.commit import faults
    from calving.ingest.sink.many import start as many_start

    monkeypatch.setattr(many_start, "LOAD_RETRY_DELAYS", (0.01, 0.01))
    catalog = _registered(_catalog(tmp_path))
    faults.arm("catalog-read-at-start", action)
    try:
        if starts:
            sink = _sink(catalog)
            assert sink.starting_ledger() == {("t", 0): 20}
            assert sink.registry.found_by == "registry"
            assert faults.fired() == {"catalog-read-at-start"}
            return
        with pytest.raises(LedgerUnreadableError, match="injected transient fault"):
            _sink(catalog).starting_ledger()
    finally:
        faults.disarm_all()


def test_an_unknown_fault_action_is_refused() -> None:
    from calving.commit import faults

    with pytest.raises(KeyError, match="unknown fault action"):
        faults.arm("catalog-read-at-start", "once-flaky")
