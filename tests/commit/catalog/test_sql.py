"""SqlCatalog on real SQLite files and a real PostgreSQL: CRUD, typed errors, the swap and
its fault outcomes, pyiceberg sharing the same database both ways, and many processes
swapping one table entry."""

from __future__ import annotations

import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from pyiceberg.catalog.sql import IcebergNamespaceProperties, IcebergTables
from pyiceberg.catalog.sql import SqlCatalog as PyIcebergSqlCatalog

from calving.commit.catalog import FaultPlan, SqlCatalog, SwapFault
from calving.commit.errors import (
    CatalogError,
    CatalogUnavailableError,
    CommitStateUnknownError,
    CommitSwapLostError,
    ConfigError,
    InvalidIdentifierError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from calving.commit.io import FileIO
from tests.commit.catalog.swap_workers import chain_from, run_workers, sql_swapper

PG = pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.integration])
T = ("db", "events")


@pytest.fixture(params=["sqlite", PG])
def db_uri(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """A URI of an empty database: a new SQLite file, or a new PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/catalog.db"
        return
    pg_url = request.getfixturevalue("pg_url")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    yield f"{pg_url}?options=-csearch_path%3D{schema}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
    admin.dispose()


@pytest.fixture
def make(db_uri: str, tmp_path: Any) -> Iterator[Callable[..., SqlCatalog]]:
    made: list[SqlCatalog] = []

    def factory(name: str = "cat", **kwargs: Any) -> SqlCatalog:
        kwargs.setdefault("io", FileIO({"calving.local.fsync": "false"}))
        catalog = SqlCatalog(name, db_uri, f"{tmp_path}/warehouse", **kwargs)
        made.append(catalog)
        return catalog

    yield factory
    for catalog in made:
        catalog.close()


@pytest.fixture
def cat(make: Callable[..., SqlCatalog]) -> SqlCatalog:
    catalog = make()
    catalog.create_namespace(("db",))
    catalog.create_table_entry(T, "file:///m/v0.metadata.json")
    return catalog


def _row(catalog: SqlCatalog, ident: tuple[str, ...]) -> tuple[str, str | None]:
    with catalog.engine.connect() as conn:
        row = conn.execute(
            sa.text(
                "SELECT metadata_location, previous_metadata_location FROM iceberg_tables "
                "WHERE catalog_name = :c AND table_namespace = :n AND table_name = :t"
            ),
            {"c": catalog.name, "n": ".".join(ident[:-1]), "t": ident[-1]},
        ).one()
    return row[0], row[1]


# ---------------------------------------------------------------- schema


def test_tables_match_pyicebergs_definitions(make: Callable[..., SqlCatalog]) -> None:
    catalog = make()
    inspector = sa.inspect(catalog.engine)
    for theirs in (IcebergTables.__table__, IcebergNamespaceProperties.__table__):
        ours = {c["name"]: c for c in inspector.get_columns(theirs.name)}
        assert set(ours) == {c.name for c in theirs.columns}
        for column in theirs.columns:
            assert ours[column.name]["nullable"] == column.nullable, column.name
            assert getattr(ours[column.name]["type"], "length", None) == column.type.length
        pk = inspector.get_pk_constraint(theirs.name)["constrained_columns"]
        assert sorted(pk) == sorted(c.name for c in theirs.primary_key.columns)


# ---------------------------------------------------------------- namespaces


def test_namespace_crud(make: Callable[..., SqlCatalog]) -> None:
    catalog = make()
    catalog.create_namespace(("a",), {"owner": "ops"})
    catalog.create_namespace(("a", "b"))
    catalog.create_namespace(("z",))
    assert catalog.namespace_properties(("a",)) == {"exists": "true", "owner": "ops"}
    assert catalog.list_namespaces() == [("a",), ("z",)]
    assert catalog.list_namespaces(("a",)) == [("a", "b")]
    with pytest.raises(NamespaceAlreadyExistsError):
        catalog.create_namespace(("a",))
    with pytest.raises(NamespaceNotEmptyError):
        catalog.drop_namespace(("a",))  # ("a", "b") is below it
    catalog.drop_namespace(("a", "b"))
    catalog.drop_namespace(("a",))
    assert catalog.list_namespaces() == [("z",)]
    assert not catalog.namespace_exists(("a",))
    with pytest.raises(NoSuchNamespaceError):
        catalog.drop_namespace(("a",))
    with pytest.raises(NoSuchNamespaceError):
        catalog.namespace_properties(("a",))
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_namespaces(("a",))
    catalog.create_namespace_if_missing(("z",))


def test_namespace_with_a_table_is_not_empty(cat: SqlCatalog) -> None:
    with pytest.raises(NamespaceNotEmptyError):
        cat.drop_namespace(("db",))
    cat.drop_table_entry(T)
    cat.drop_namespace(("db",))


def test_like_wildcards_in_names_match_exactly(make: Callable[..., SqlCatalog]) -> None:
    catalog = make()
    catalog.create_namespace(("a_b",))
    assert not catalog.namespace_exists(("a%b",))
    assert not catalog.namespace_exists(("axb",))
    assert not catalog.namespace_exists(("A_B",))


@pytest.mark.parametrize("bad", [(), ("",), ("a.b",), "db"])
def test_bad_namespaces_are_typed(make: Callable[..., SqlCatalog], bad: Any) -> None:
    with pytest.raises(InvalidIdentifierError):
        make().create_namespace(bad)


def test_catalog_names_partition_one_database(make: Callable[..., SqlCatalog]) -> None:
    first, second = make("first"), make("second")
    first.create_namespace(("db",))
    first.create_table_entry(T, "file:///x.metadata.json")
    assert second.list_namespaces() == []
    with pytest.raises(NoSuchTableError):
        second.load_metadata_location(T)


# ---------------------------------------------------------------- tables


def test_table_crud_and_rename(cat: SqlCatalog) -> None:
    assert cat.list_tables(("db",)) == [T]
    assert cat.load_metadata_location(T) == "file:///m/v0.metadata.json"
    assert cat.table_exists(T)
    with pytest.raises(TableAlreadyExistsError):
        cat.create_table_entry(T, "file:///other.metadata.json")
    with pytest.raises(NoSuchNamespaceError):
        cat.create_table_entry(("nope", "t"), "file:///x.metadata.json")
    with pytest.raises(NoSuchNamespaceError):
        cat.list_tables(("nope",))
    cat.create_table_entry(("db", "other"), "file:///o.metadata.json")
    with pytest.raises(TableAlreadyExistsError):
        cat.rename_table(T, ("db", "other"))
    with pytest.raises(NoSuchNamespaceError):
        cat.rename_table(T, ("nope", "t"))
    cat.create_namespace(("archive",))
    cat.rename_table(T, ("archive", "events_2025"))
    assert cat.load_metadata_location(("archive", "events_2025")) == "file:///m/v0.metadata.json"
    with pytest.raises(NoSuchTableError):
        cat.load_metadata_location(T)
    with pytest.raises(NoSuchTableError):
        cat.rename_table(T, ("db", "x"))
    cat.drop_table_entry(("db", "other"))
    with pytest.raises(NoSuchTableError):
        cat.drop_table_entry(("db", "other"))
    assert cat.list_tables(("db",)) == []
    with pytest.raises(InvalidIdentifierError):
        cat.load_metadata_location(("events",))


def test_rows_of_other_types_are_not_tables(cat: SqlCatalog) -> None:
    with cat.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, "
                "metadata_location, iceberg_type) VALUES (:c, 'db', 'a_view', 'file:///v', 'VIEW')"
            ),
            {"c": cat.name},
        )
    assert cat.list_tables(("db",)) == [T]
    with pytest.raises(NoSuchTableError):
        cat.load_metadata_location(("db", "a_view"))


def test_many_tables_load_together_as_one_by_one(
    cat: SqlCatalog, make: Callable[..., SqlCatalog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One query (per 500 tables) reads what a query per table would: in input order,
    across namespaces and past a chunk, never another catalog's row or a view."""
    cat.create_namespace(("db", "sub"))
    idents = [("db", f"t{i}") for i in range(7)] + [("db", "sub", "deep"), T]
    for ident in idents[:-1]:
        cat.create_table_entry(ident, f"file:///{'/'.join(ident)}.metadata.json")
    other = make("other")
    other.create_namespace(("db",))
    other.create_table_entry(("db", "t0"), "file:///not-ours.metadata.json")
    monkeypatch.setattr("calving.commit.catalog.sql._LOAD_CHUNK", 3)
    assert cat.load_metadata_locations(idents) == [cat.load_metadata_location(i) for i in idents]
    assert cat.load_metadata_locations([]) == []
    with pytest.raises(NoSuchTableError, match=r"db\.gone"):
        cat.load_metadata_locations([T, ("db", "gone"), ("db", "also_gone")])


def test_older_schema_without_iceberg_type_is_used_as_is(tmp_path: Any) -> None:
    uri = f"sqlite:///{tmp_path}/v0.db"
    with sqlite3.connect(f"{tmp_path}/v0.db") as conn:
        conn.executescript(
            "CREATE TABLE iceberg_tables (catalog_name VARCHAR(255) NOT NULL, "
            "table_namespace VARCHAR(255) NOT NULL, table_name VARCHAR(255) NOT NULL, "
            "metadata_location VARCHAR(1000), previous_metadata_location VARCHAR(1000), "
            "PRIMARY KEY (catalog_name, table_namespace, table_name));"
            "CREATE TABLE iceberg_namespace_properties (catalog_name VARCHAR(255) NOT NULL, "
            "namespace VARCHAR(255) NOT NULL, property_key VARCHAR(255) NOT NULL, "
            "property_value VARCHAR(1000) NOT NULL, "
            "PRIMARY KEY (catalog_name, namespace, property_key));"
        )
    catalog = SqlCatalog("old", uri)
    catalog.create_namespace(("db",))
    catalog.create_table_entry(T, "file:///a")
    catalog.swap_metadata_location(T, "file:///a", "file:///b")
    assert catalog.load_metadata_location(T) == "file:///b"
    with sqlite3.connect(f"{tmp_path}/v0.db") as conn:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(iceberg_tables)")]
    assert "iceberg_type" not in columns


def test_default_table_location(make: Callable[..., SqlCatalog], tmp_path: Any) -> None:
    catalog = make()
    catalog.create_namespace(("db",))
    catalog.create_namespace(("custom",), {"location": "s3://bucket/custom/"})
    assert catalog.default_table_location(T) == f"file://{tmp_path}/warehouse/db/events"
    assert catalog.default_table_location(("custom", "t")) == "s3://bucket/custom/t"
    with pytest.raises(NoSuchNamespaceError):
        catalog.default_table_location(("nope", "t"))
    bare = SqlCatalog(catalog.name, catalog.uri)
    with pytest.raises(ConfigError):
        bare.default_table_location(T)
    bare.close()


def test_in_memory_sqlite_is_refused() -> None:
    with pytest.raises(ConfigError):
        SqlCatalog("mem", "sqlite://")


def test_repr_hides_the_password() -> None:
    catalog = SqlCatalog.__new__(SqlCatalog)
    catalog.name, catalog.warehouse = "c", None
    catalog._url = sa.engine.make_url("postgresql+psycopg://u:hunter2@h/db")
    assert "hunter2" not in repr(catalog)


# ---------------------------------------------------------------- the swap


def test_swap_moves_the_pointer_and_records_the_previous(cat: SqlCatalog) -> None:
    cat.swap_metadata_location(T, "file:///m/v0.metadata.json", "file:///m/v1.metadata.json")
    assert _row(cat, T) == ("file:///m/v1.metadata.json", "file:///m/v0.metadata.json")


def test_lost_swap_changes_nothing(cat: SqlCatalog) -> None:
    cat.swap_metadata_location(T, "file:///m/v0.metadata.json", "file:///m/v1.metadata.json")
    with pytest.raises(CommitSwapLostError) as lost:
        cat.swap_metadata_location(T, "file:///m/v0.metadata.json", "file:///m/v2.metadata.json")
    assert lost.value.retryable and lost.value.cleanable
    assert _row(cat, T) == ("file:///m/v1.metadata.json", "file:///m/v0.metadata.json")
    with pytest.raises(NoSuchTableError):
        cat.swap_metadata_location(("db", "missing"), "file:///a", "file:///b")


@pytest.mark.parametrize(
    ("fault", "error", "applied"),
    [
        (SwapFault.UNAVAILABLE, CatalogUnavailableError, False),
        (SwapFault.NOT_APPLIED_REPLY_LOST, CommitStateUnknownError, False),
        (SwapFault.APPLIED_REPLY_LOST, CommitStateUnknownError, True),
    ],
)
def test_injected_faults_report_the_typed_outcome(
    cat: SqlCatalog, fault: SwapFault, error: type[Exception], applied: bool
) -> None:
    cat.fault_plan = FaultPlan(None, fault)
    cat.swap_metadata_location(T, "file:///m/v0.metadata.json", "file:///m/v1.metadata.json")
    with pytest.raises(error):
        cat.swap_metadata_location(T, "file:///m/v1.metadata.json", "file:///m/v2.metadata.json")
    expected = "file:///m/v2.metadata.json" if applied else "file:///m/v1.metadata.json"
    assert cat.load_metadata_location(T) == expected
    assert [e.performed for e in cat.fault_plan.events] == [True, applied]
    assert cat.fault_plan.pending == 0
    cat.swap_metadata_location(T, expected, "file:///m/v3.metadata.json")  # plan spent


def test_sqlite_lock_held_past_the_busy_timeout_is_unavailable(tmp_path: Any) -> None:
    catalog = SqlCatalog("c", f"sqlite:///{tmp_path}/c.db", sqlite_busy_timeout_s=0.2)
    catalog.create_namespace(("db",))
    catalog.create_table_entry(T, "file:///a")
    other = sqlite3.connect(f"{tmp_path}/c.db", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    with pytest.raises(CatalogUnavailableError):
        catalog.swap_metadata_location(T, "file:///a", "file:///b")
    with pytest.raises(CatalogUnavailableError):
        catalog.load_metadata_location(T)
    other.execute("ROLLBACK")
    assert catalog.load_metadata_location(T) == "file:///a"


def test_sqlite_commit_refused_by_a_reader_lock_is_known_not_applied(tmp_path: Any) -> None:
    """COMMIT needs the exclusive lock; a reader holding its shared lock past the busy
    timeout makes COMMIT fail with 'database is locked', which SQLite guarantees rolled
    nothing forward."""
    catalog = SqlCatalog("c", f"sqlite:///{tmp_path}/c.db", sqlite_busy_timeout_s=0.2)
    catalog.create_namespace(("db",))
    catalog.create_table_entry(T, "file:///a")
    reader = sqlite3.connect(f"{tmp_path}/c.db", isolation_level=None)

    def hold_shared_lock(_conn: Any) -> None:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM iceberg_tables").fetchall()

    catalog.fault_plan = FaultPlan(before_commit=hold_shared_lock)
    with pytest.raises(CatalogUnavailableError):
        catalog.swap_metadata_location(T, "file:///a", "file:///b")
    reader.execute("ROLLBACK")
    assert catalog.load_metadata_location(T) == "file:///a"


@pytest.mark.postgres
@pytest.mark.integration
def test_postgres_connection_killed_before_commit_is_unknown(pg_url: str) -> None:
    """A real dropped connection at COMMIT: the caller cannot know; here PostgreSQL in fact
    aborted the transaction, which a reload shows."""
    catalog = SqlCatalog(f"c_{uuid.uuid4().hex[:8]}", pg_url)
    catalog.create_namespace(("db",))
    catalog.create_table_entry(T, "file:///a")
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")

    def kill(conn: Any) -> None:
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        with admin.connect() as other:
            other.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")

    catalog.fault_plan = FaultPlan(before_commit=kill)
    with pytest.raises(CommitStateUnknownError):
        catalog.swap_metadata_location(T, "file:///a", "file:///b")
    catalog.fault_plan = None
    assert catalog.load_metadata_location(T) == "file:///a"
    catalog.swap_metadata_location(T, "file:///a", "file:///b")  # the pool recovered
    admin.dispose()
    catalog.close()


def test_unreachable_database_is_unavailable() -> None:
    with pytest.raises(CatalogUnavailableError):
        SqlCatalog("c", "postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=2")


# ---------------------------------------------------------------- metadata files


def test_create_table_and_commit_metadata_write_unique_files(cat: SqlCatalog) -> None:
    location = cat.default_table_location(("db", "t"))
    first = cat.create_table(("db", "t"), location, b'{"v": 0}')
    assert first.startswith(f"{location}/metadata/00000-") and first.endswith(".metadata.json")
    assert cat.io.read(first) == b'{"v": 0}'
    with pytest.raises(TableAlreadyExistsError):
        cat.create_table(("db", "t"), location, b'{"v": "dup"}')
    assert cat.io.list_prefix(f"{location}/metadata/") == [first]  # the loser's file is gone

    second = cat.new_metadata_location(("db", "t"), first)
    assert second.startswith(f"{location}/metadata/00001-")
    cat.commit_metadata(("db", "t"), first, second, b'{"v": 1}')
    assert cat.load_metadata_location(("db", "t")) == second

    stale = cat.new_metadata_location(("db", "t"), first)
    with pytest.raises(CommitSwapLostError):
        cat.commit_metadata(("db", "t"), first, stale, b'{"v": "late"}')
    assert not cat.io.exists(stale)  # certainly not committed: removed

    cat.fault_plan = FaultPlan(SwapFault.NOT_APPLIED_REPLY_LOST)
    unknown = cat.new_metadata_location(("db", "t"), second)
    with pytest.raises(CommitStateUnknownError):
        cat.commit_metadata(("db", "t"), second, unknown, b'{"v": 2}')
    assert cat.io.exists(unknown)  # outcome unknown: never deleted


def test_new_metadata_location_follows_metadata_location_and_path(cat: SqlCatalog) -> None:
    current = "s3://b/t/metadata/00041-3f2a.metadata.json"
    plain = SimpleNamespace(location="s3://b/t", properties={})
    assert cat.new_metadata_location(T, current, plain).startswith("s3://b/t/metadata/00042-")
    moved = SimpleNamespace(location="s3://b/t", properties={"write.metadata.path": "s3://m/"})
    assert cat.new_metadata_location(T, current, moved).startswith("s3://m/00042-")
    assert cat.new_metadata_location(T, "s3://b/t/metadata/odd.json").startswith(
        "s3://b/t/metadata/00000-"
    )
    # A gzip table's next file says so in its name (readers tell the codec by it), and
    # its version still counts on from a compressed one.
    packed = SimpleNamespace(
        location="s3://b/t", properties={"write.metadata.compression-codec": "gzip"}
    )
    gz = cat.new_metadata_location(T, current, packed)
    assert gz.startswith("s3://b/t/metadata/00042-") and gz.endswith(".gz.metadata.json")
    assert cat.new_metadata_location(T, gz, packed).startswith("s3://b/t/metadata/00043-")
    after = cat.new_metadata_location(T, gz, plain)
    assert after.endswith(".metadata.json") and not after.endswith(".gz.metadata.json")


# ---------------------------------------------------------------- pyiceberg on the same DB


def _pyiceberg(db_uri: str, name: str, warehouse: str) -> PyIcebergSqlCatalog:
    return PyIcebergSqlCatalog(name, uri=db_uri, warehouse=f"file://{warehouse}")


def _pyiceberg_table(theirs: PyIcebergSqlCatalog, name: str) -> Any:
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": ["a", "b", "c"]})
    table = theirs.create_table(name, schema=data.schema, properties={"format-version": "2"})
    table.append(data)
    return theirs.load_table(name)


def _share_both_ways(ours: SqlCatalog, theirs: PyIcebergSqlCatalog, tmp_path: Any) -> None:
    # pyiceberg -> calving
    theirs.create_namespace("py", {"owner": "pyiceberg"})
    made = _pyiceberg_table(theirs, "py.items")
    assert ours.list_namespaces() == [("py",)]
    assert ours.list_tables(("py",)) == [("py", "items")]
    assert ours.load_metadata_location(("py", "items")) == made.metadata_location
    assert ours.namespace_properties(("py",)) == theirs.load_namespace_properties("py")

    # calving -> pyiceberg: a copy of valid metadata, registered under another name
    ours.create_namespace(("cv",))
    copy = f"file://{tmp_path}/copies/cv/copied/metadata/00000-{uuid.uuid4()}.metadata.json"
    ours.io.write(copy, ours.io.read(made.metadata_location))
    ours.create_table_entry(("cv", "copied"), copy)
    assert ("cv",) in theirs.list_namespaces()
    assert theirs.list_tables("cv") == [("cv", "copied")]
    loaded = theirs.load_table("cv.copied")
    assert loaded.metadata_location == copy
    assert sorted(loaded.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]

    # a calving swap is seen by pyiceberg, whose own check-and-put then follows it
    moved = copy.replace("00000-", "00001-")
    ours.io.write(moved, ours.io.read(copy))
    ours.swap_metadata_location(("cv", "copied"), copy, moved)
    table = theirs.load_table("cv.copied")
    assert table.metadata_location == moved
    table.append(pa.table({"id": pa.array([4], pa.int64()), "s": ["d"]}))
    after = ours.load_metadata_location(("cv", "copied"))
    assert after != moved
    assert _row(ours, ("cv", "copied")) == (after, moved)
    with pytest.raises(CommitSwapLostError):
        ours.swap_metadata_location(("cv", "copied"), moved, moved + ".late")


@pytest.mark.integration
def test_pyiceberg_creates_the_database_then_calving_shares_it(db_uri: str, tmp_path: Any) -> None:
    theirs = _pyiceberg(db_uri, "shared", f"{tmp_path}/wh")
    ours = SqlCatalog("shared", db_uri, f"{tmp_path}/wh")
    _share_both_ways(ours, theirs, tmp_path)
    ours.close()


@pytest.mark.integration
def test_calving_creates_the_database_then_pyiceberg_shares_it(db_uri: str, tmp_path: Any) -> None:
    ours = SqlCatalog("shared", db_uri, f"{tmp_path}/wh")
    theirs = _pyiceberg(db_uri, "shared", f"{tmp_path}/wh")
    assert theirs._schema_version == "v1"  # it found calving's tables complete
    _share_both_ways(ours, theirs, tmp_path)
    ours.close()


# ---------------------------------------------------------------- many processes


WORKERS, COMMITS = 8, 25


@pytest.mark.integration
def test_eight_processes_swap_one_entry_linearly(make: Callable[..., SqlCatalog]) -> None:
    catalog = make(f"mp_{uuid.uuid4().hex[:8]}")
    catalog.create_namespace(("db",))
    catalog.create_table_entry(T, "file:///swaps/start.metadata.json")
    results = run_workers(sql_swapper, (catalog.uri, catalog.name, T), WORKERS, COMMITS)
    swaps = [s for _, done, _ in results for s in done]
    assert len(swaps) == WORKERS * COMMITS
    assert len({expected for expected, _ in swaps}) == len(swaps)
    chain = chain_from("file:///swaps/start.metadata.json", swaps)
    assert len(chain) == WORKERS * COMMITS + 1
    assert _row(catalog, T) == (chain[-1], chain[-2])


def test_threads_share_one_catalog(cat: SqlCatalog) -> None:
    errors: list[BaseException] = []
    done: list[tuple[str, str]] = []

    def work(worker: int) -> None:
        try:
            for step in range(10):
                while True:
                    current = cat.load_metadata_location(T)
                    new = f"file:///t/{worker}-{step}.metadata.json"
                    try:
                        cat.swap_metadata_location(T, current, new)
                    except CommitSwapLostError:
                        continue
                    done.append((current, new))
                    break
        except Exception as err:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(chain_from("file:///m/v0.metadata.json", done)) == 41


def test_catalog_errors_are_typed_not_raw(make: Callable[..., SqlCatalog]) -> None:
    catalog = make()
    with catalog.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE iceberg_namespace_properties")
    with pytest.raises(CatalogError):
        catalog.list_namespaces()


def test_forked_child_does_not_reuse_parent_connections(cat: SqlCatalog) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    pid = os.fork()
    if pid == 0:  # child: must work on its own connections, then leave at once
        code = 0
        try:
            cat.swap_metadata_location(T, "file:///m/v0.metadata.json", "file:///m/f.json")
        except Exception:  # noqa: BLE001 - the exit code carries it
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert cat.load_metadata_location(T) == "file:///m/f.json"
