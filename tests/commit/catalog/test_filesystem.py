"""FilesystemCatalog on real local directories: layout, typed errors, the exclusive-create
commit, fault outcomes, readers (pyiceberg, DuckDB through the version hint), and many
processes committing to one table."""

from __future__ import annotations

import itertools
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog as PyIcebergSqlCatalog
from pyiceberg.table import StaticTable

from calving.commit.catalog import FaultPlan, FilesystemCatalog, SwapFault
from calving.commit.catalog.filesystem import NAMESPACE_PROPERTIES_FILE, VERSION_HINT
from calving.commit.errors import (
    CatalogUnavailableError,
    CommitStateUnknownError,
    CommitSwapLostError,
    InvalidIdentifierError,
    InvalidLocationError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
    UnsupportedFeatureError,
)
from calving.commit.io import FileIO, local_path
from tests.commit.catalog.swap_workers import chain_from, fs_committer, run_workers
from tests.support.oracles import duckdb_connection

T = ("db", "events")


@pytest.fixture
def cat(tmp_path: Any) -> FilesystemCatalog:
    catalog = FilesystemCatalog(str(tmp_path / "wh"), io=FileIO({"calving.local.fsync": "false"}))
    catalog.create_namespace(("db",))
    return catalog


def _create(catalog: FilesystemCatalog, ident: tuple[str, ...] = T, body: bytes = b"{}") -> str:
    return catalog.create_table(ident, catalog.default_table_location(ident), body)


def _metadata_files(catalog: FilesystemCatalog, ident: tuple[str, ...] = T) -> list[str]:
    return sorted(os.listdir(local_path(catalog.default_table_location(ident)) + "/metadata"))


# ---------------------------------------------------------------- layout and CRUD


def test_namespaces_are_directories(cat: FilesystemCatalog, tmp_path: Any) -> None:
    cat.create_namespace(("a", "b"), {"owner": "ops"})
    assert (tmp_path / "wh" / "a" / "b").is_dir()
    assert cat.namespace_properties(("a", "b")) == {"exists": "true", "owner": "ops"}
    assert cat.namespace_properties(("a",)) == {}  # made as a parent directory
    assert cat.list_namespaces() == [("a",), ("db",)]
    assert cat.list_namespaces(("a",)) == [("a", "b")]
    with pytest.raises(NamespaceAlreadyExistsError):
        cat.create_namespace(("a", "b"))
    with pytest.raises(NamespaceNotEmptyError):
        cat.drop_namespace(("a",))
    cat.drop_namespace(("a", "b"))
    cat.drop_namespace(("a",))
    assert cat.list_namespaces() == [("db",)]
    with pytest.raises(NoSuchNamespaceError):
        cat.drop_namespace(("a",))
    with pytest.raises(NoSuchNamespaceError):
        cat.list_tables(("a",))
    for bad in [(), ("..",), ("a/b",), (".hidden",), ("a.b",)]:
        with pytest.raises(InvalidIdentifierError):
            cat.create_namespace(bad)


def test_tables_and_namespaces_do_not_mix(cat: FilesystemCatalog) -> None:
    first = _create(cat)
    assert first == f"{cat.warehouse}/db/events/metadata/v1.metadata.json"
    cat.create_namespace(("db", "sub"))
    assert cat.list_tables(("db",)) == [T]
    assert cat.list_namespaces(("db",)) == [("db", "sub")]
    with pytest.raises(NamespaceAlreadyExistsError):
        cat.create_namespace(T)
    with pytest.raises(InvalidIdentifierError):
        cat.create_namespace((*T, "inside"))
    with pytest.raises(TableAlreadyExistsError):
        _create(cat, ("db", "sub"))
    with pytest.raises(NamespaceNotEmptyError):
        cat.drop_namespace(("db",))


def test_table_crud(cat: FilesystemCatalog) -> None:
    with pytest.raises(NoSuchTableError):
        cat.load_metadata_location(T)
    location = _create(cat, body=b'{"v": 1}')
    assert cat.load_metadata_location(T) == location
    assert cat.io.read(location) == b'{"v": 1}'
    with pytest.raises(TableAlreadyExistsError):
        _create(cat, body=b'{"v": "dup"}')
    assert cat.io.read(location) == b'{"v": 1}'
    with pytest.raises(NoSuchNamespaceError):
        _create(cat, ("nope", "t"))
    with pytest.raises(InvalidLocationError):
        cat.create_table(("db", "x"), "file:///elsewhere/x", b"{}")
    with pytest.raises(UnsupportedFeatureError):
        cat.rename_table(T, ("db", "renamed"))
    with pytest.raises(UnsupportedFeatureError):
        cat.create_table_entry(("db", "x"), location)
    cat.drop_table_entry(T)
    assert not os.path.exists(local_path(cat.default_table_location(T)))
    with pytest.raises(NoSuchTableError):
        cat.drop_table_entry(T)
    assert cat.list_tables(("db",)) == []


def test_object_store_warehouse_is_refused() -> None:
    with pytest.raises(UnsupportedFeatureError):
        FilesystemCatalog("s3://bucket/warehouse")


# ---------------------------------------------------------------- commits


def test_commit_creates_the_next_version_exclusively(cat: FilesystemCatalog) -> None:
    v1 = _create(cat)
    v2 = cat.new_metadata_location(T, v1)
    assert v2.endswith("/metadata/v2.metadata.json")
    cat.commit_metadata(T, v1, v2, b'{"v": 2}')
    assert cat.load_metadata_location(T) == v2
    assert _metadata_files(cat) == ["v1.metadata.json", "v2.metadata.json", VERSION_HINT]

    with pytest.raises(CommitSwapLostError):  # stale: v1 is no longer the highest
        cat.commit_metadata(T, v1, v2, b'{"v": "late"}')
    assert cat.io.read(v2) == b'{"v": 2}'
    with pytest.raises(InvalidLocationError):
        cat.commit_metadata(T, v2, v2.replace("v2.", "v9."), b"{}")
    with pytest.raises(InvalidLocationError):
        cat.new_metadata_location(T, "file:///elsewhere/v1.metadata.json")
    with pytest.raises(UnsupportedFeatureError):
        cat.swap_metadata_location(T, v1, v2)


def test_losing_the_create_race_is_a_clean_loss(cat: FilesystemCatalog) -> None:
    v1 = _create(cat)
    v2 = cat.new_metadata_location(T, v1)

    def rival_commits_first(stage: str, ident: tuple[str, ...]) -> None:
        if stage == "before":  # after our check that v1 is current, before our create
            cat.io.create_exclusive(v2, b'{"rival": true}')

    cat.swap_hook = rival_commits_first
    with pytest.raises(CommitSwapLostError):
        cat.commit_metadata(T, v1, v2, b'{"ours": true}')
    assert cat.io.read(v2) == b'{"rival": true}'
    assert not [n for n in _metadata_files(cat) if n.endswith(".tmp")]


def test_version_hint_is_written_but_never_trusted(cat: FilesystemCatalog) -> None:
    v1 = _create(cat)
    hint = local_path(v1).replace("v1.metadata.json", VERSION_HINT)
    assert Path(hint).read_text() == "1"
    v2 = cat.new_metadata_location(T, v1)
    cat.commit_metadata(T, v1, v2, b"{}")
    assert Path(hint).read_text() == "2"
    with open(hint, "w") as f:
        f.write("1")
    assert cat.load_metadata_location(T) == v2
    os.unlink(hint)
    assert cat.load_metadata_location(T) == v2


@pytest.mark.parametrize(
    ("fault", "error", "applied"),
    [
        (SwapFault.UNAVAILABLE, CatalogUnavailableError, False),
        (SwapFault.NOT_APPLIED_REPLY_LOST, CommitStateUnknownError, False),
        (SwapFault.APPLIED_REPLY_LOST, CommitStateUnknownError, True),
    ],
)
def test_injected_faults_report_the_typed_outcome(
    cat: FilesystemCatalog, fault: SwapFault, error: type[Exception], applied: bool
) -> None:
    v1 = _create(cat)
    cat.fault_plan = FaultPlan(fault)
    v2 = cat.new_metadata_location(T, v1)
    with pytest.raises(error):
        cat.commit_metadata(T, v1, v2, b"{}")
    assert cat.load_metadata_location(T) == (v2 if applied else v1)
    assert [e.performed for e in cat.fault_plan.events] == [applied]


def test_a_failed_create_is_resolved_by_reading_back(
    cat: FilesystemCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exclusive create reports an I/O error after the file landed: the catalog looks
    and finds its own bytes, so the commit counts."""
    from calving.commit.errors import FileIOError

    v1 = _create(cat)
    v2 = cat.new_metadata_location(T, v1)
    real = FileIO.create_exclusive

    def lands_then_fails(self: FileIO, location: str, data: bytes) -> None:
        real(self, location, data)
        raise FileIOError(f"{location}: fsync failed")

    monkeypatch.setattr(FileIO, "create_exclusive", lands_then_fails)
    cat.commit_metadata(T, v1, v2, b'{"v": 2}')
    assert cat.load_metadata_location(T) == v2


# ---------------------------------------------------------------- readers


@pytest.fixture
def pyiceberg_metadata(tmp_path: Any) -> tuple[bytes, int]:
    """Metadata JSON of a small table written by pyiceberg, and its row count."""
    theirs = PyIcebergSqlCatalog(
        "src", uri=f"sqlite:///{tmp_path}/src.db", warehouse=f"file://{tmp_path}/src"
    )
    theirs.create_namespace("src")
    data = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64())})
    table = theirs.create_table("src.t", schema=data.schema)
    table.append(data)
    location = theirs.load_table("src.t").metadata_location
    return FileIO().read(location), data.num_rows


@pytest.mark.integration
def test_readers_open_filesystem_tables(
    cat: FilesystemCatalog, pyiceberg_metadata: tuple[bytes, int]
) -> None:
    body, rows = pyiceberg_metadata
    metadata = json.loads(body)
    metadata["location"] = cat.default_table_location(T)
    v1 = _create(cat, body=json.dumps(metadata).encode())
    assert StaticTable.from_metadata(v1).scan().to_arrow().num_rows == rows
    con = duckdb_connection()
    try:
        table_dir = local_path(cat.default_table_location(T))
        count = con.execute(f"SELECT count(*) FROM iceberg_scan('{table_dir}')").fetchone()
    finally:
        con.close()
    assert count == (rows,)  # found v1 through metadata/version-hint.text


def test_a_gzip_table_writes_plain_versions_here(cat: FilesystemCatalog) -> None:
    """A commit here is the exclusive create of ``v<N+1>.metadata.json``: one name per
    version, so the table's ``write.metadata.compression-codec = gzip`` (what calving
    creates its tables with) is not followed and every version stays plain JSON."""
    from calving.commit.table.actions.update_properties import UpdateProperties
    from tests.support.tables import make_table

    table = make_table(cat)
    assert table.metadata.properties["write.metadata.compression-codec"] == "gzip"
    table.commit_or_raise(UpdateProperties({"owner": "fs"}))
    assert table.metadata_location.endswith("/v2.metadata.json")
    assert cat.io.read(table.metadata_location)[:1] == b"{"
    assert cat.metadata_codec(table.metadata) == "none"


# ---------------------------------------------------------------- many processes


WORKERS, COMMITS = 8, 25


@pytest.mark.integration
def test_eight_processes_commit_a_contiguous_chain(tmp_path: Any) -> None:
    catalog = FilesystemCatalog(str(tmp_path / "wh"))
    catalog.create_namespace(("db",))
    start = _create(catalog, body=b'{"start": true}')
    results = run_workers(fs_committer, (catalog.warehouse, T), WORKERS, COMMITS)
    swaps = [s for _, done, _ in results for s in done]
    assert len(swaps) == WORKERS * COMMITS
    chain = chain_from(start, swaps)
    assert chain == [
        f"{catalog.warehouse}/db/events/metadata/v{n}.metadata.json"
        for n in range(1, WORKERS * COMMITS + 2)
    ]
    versions = [n for n in _metadata_files(catalog) if n.endswith(".metadata.json")]
    assert len(versions) == WORKERS * COMMITS + 1  # v1..v201, nothing else
    for previous, location in itertools.pairwise(chain):
        assert json.loads(catalog.io.read(location))["expected"] == previous
    acknowledged = {(w, step) for w, done, _ in results for step in range(len(done))}
    written = {
        (body["worker"], body["step"])
        for body in (json.loads(catalog.io.read(loc)) for loc in chain[1:])
    }
    assert written == acknowledged
    hint = Path(local_path(start).replace("v1.metadata.json", VERSION_HINT))
    assert hint.read_text() == str(WORKERS * COMMITS + 1)


def test_namespace_properties_file_is_not_a_namespace_or_table(
    cat: FilesystemCatalog, tmp_path: Any
) -> None:
    assert (tmp_path / "wh" / "db" / NAMESPACE_PROPERTIES_FILE).is_file()
    assert cat.list_namespaces(("db",)) == []
    assert cat.list_tables(("db",)) == []
    shutil.rmtree(tmp_path / "wh" / "db")
    os.makedirs(tmp_path / "wh" / "handmade")
    assert cat.list_namespaces() == [("handmade",)]
