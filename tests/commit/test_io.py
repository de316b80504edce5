"""FileIO on real local files: location forms, typed errors, exclusive create, streaming
writes; S3 configuration without a network; and that the canonical ``file:///`` form is
the one pyiceberg and DuckDB read and write."""

from __future__ import annotations

import os
import pickle
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from calving.commit.errors import (
    ConfigError,
    CorruptFileError,
    FileAlreadyExistsError,
    FileIOError,
    FileNotFoundInTableError,
    InvalidLocationError,
    UnsupportedFeatureError,
)
from calving.commit.io import FileIO, local_path, scheme_of, to_uri


@pytest.fixture
def io() -> FileIO:
    return FileIO()


# ---------------------------------------------------------------- location forms


def test_location_forms(tmp_path: Path) -> None:
    assert to_uri("/data/wh") == "file:///data/wh"
    assert to_uri("file:/data/wh") == "file:///data/wh"
    assert to_uri("file://localhost/data/wh") == "file:///data/wh"
    assert to_uri("file:///data/wh") == "file:///data/wh"
    assert to_uri("s3://bucket/wh") == "s3://bucket/wh"
    assert to_uri("relative/wh") == f"file://{os.getcwd()}/relative/wh"
    assert local_path("file:///data/a b/x") == "/data/a b/x"  # used verbatim, as pyiceberg
    assert scheme_of("/x") == scheme_of("file:///x") == "file"
    assert scheme_of("s3a://b/k") == "s3a"
    with pytest.raises(InvalidLocationError):
        local_path("file://otherhost/x")
    with pytest.raises(InvalidLocationError):
        scheme_of("relative/path")


def test_bare_path_and_uri_name_the_same_file(io: FileIO, tmp_path: Path) -> None:
    io.write(str(tmp_path / "a" / "f.bin"), b"hello")
    assert io.read(f"file://{tmp_path}/a/f.bin") == b"hello"
    assert io.list_prefix(str(tmp_path)) == [f"file://{tmp_path}/a/f.bin"]


# ---------------------------------------------------------------- reading and writing


def test_write_many_writes_every_file_and_syncs_each_directory_once(
    io: FileIO, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = [
        (f"file://{tmp_path}/{d}/f{i}.bin", bytes([i]) * (i + 1)) for d in "ab" for i in range(5)
    ]
    synced: list[str] = []
    real_sync = FileIO._sync_dir
    monkeypatch.setattr(FileIO, "_sync_dir", lambda self, d: (synced.append(d), real_sync(self, d)))
    io.write_many(files)
    assert [io.read(location) for location, _ in files] == [data for _, data in files]
    assert sorted(synced) == [str(tmp_path / "a"), str(tmp_path / "b")]
    io.write_many([])  # nothing to do
    io.write_many(files[:1])


def test_write_many_reports_a_failed_file_after_the_others_finish(
    io: FileIO, tmp_path: Path
) -> None:
    (tmp_path / "taken").mkdir()
    good = f"file://{tmp_path}/good.bin"
    with pytest.raises(FileIOError, match="taken"):
        io.write_many([(f"file://{tmp_path}/taken", b"x"), (good, b"ok")])
    assert io.read(good) == b"ok"


def test_write_read_range_size_exists_delete(io: FileIO, tmp_path: Path) -> None:
    location = f"file://{tmp_path}/deep/dir/f.bin"
    assert not io.exists(location)
    io.write(location, b"0123456789")
    assert io.exists(location)
    assert io.size(location) == 10
    assert io.read(location) == b"0123456789"
    assert io.read_range(location, 3, 4) == b"3456"
    assert io.read_range(location, 10, 0) == b""
    io.write(location, b"new")  # plain writes replace
    assert io.read(location) == b"new"
    io.delete(location)
    assert not io.exists(location)
    io.delete(location)  # already gone is fine


def test_missing_files_are_typed(io: FileIO, tmp_path: Path) -> None:
    missing = f"file://{tmp_path}/nope.bin"
    for call in (io.read, io.size, lambda loc: io.read_range(loc, 0, 1)):
        with pytest.raises(FileNotFoundInTableError) as raised:
            call(missing)
        assert raised.value.location == missing and not raised.value.retryable


def test_short_range_is_corrupt_and_other_failures_are_transient(
    io: FileIO, tmp_path: Path
) -> None:
    location = f"file://{tmp_path}/short.bin"
    io.write(location, b"abc")
    with pytest.raises(CorruptFileError) as corrupt:
        io.read_range(location, 1, 10)
    assert corrupt.value.source == location
    with pytest.raises(FileIOError) as failed:
        io.read(f"file://{tmp_path}")  # a directory
    assert failed.value.retryable
    with pytest.raises(InvalidLocationError):
        io.size(f"file://{tmp_path}")


def test_list_prefix(io: FileIO, tmp_path: Path) -> None:
    for name in ("t/metadata/v1.json", "t/metadata/v2.json", "t/data/x.parquet", "t2/y"):
        io.write(f"file://{tmp_path}/{name}", b".")
    base = f"file://{tmp_path}"
    assert io.list_prefix(f"{base}/t/metadata/") == [
        f"{base}/t/metadata/v1.json",
        f"{base}/t/metadata/v2.json",
    ]
    assert io.list_prefix(f"{base}/t") == [  # a directory: its files only, not t2
        f"{base}/t/data/x.parquet",
        f"{base}/t/metadata/v1.json",
        f"{base}/t/metadata/v2.json",
    ]
    assert io.list_prefix(f"{base}/t/metadata/v") == [
        f"{base}/t/metadata/v1.json",
        f"{base}/t/metadata/v2.json",
    ]
    assert io.list_prefix(f"{base}/absent/") == []


def test_streaming_write_of_parquet(io: FileIO, tmp_path: Path) -> None:
    location = f"file://{tmp_path}/data/part-0.parquet"
    table = pa.table({"id": pa.array(range(1000), pa.int64())})
    with io.new_output_stream(location) as sink:
        pq.write_table(table, sink)
        written = sink.tell()
    assert io.size(location) == written
    assert pq.read_table(pa.BufferReader(io.read(location))).equals(table)


# ---------------------------------------------------------------- exclusive create


def test_create_exclusive_never_replaces(io: FileIO, tmp_path: Path) -> None:
    location = f"file://{tmp_path}/m/v2.metadata.json"
    io.create_exclusive(location, b"first")
    with pytest.raises(FileAlreadyExistsError) as exists:
        io.create_exclusive(location, b"second")
    assert exists.value.location == location
    assert io.read(location) == b"first"
    assert os.listdir(tmp_path / "m") == ["v2.metadata.json"]  # no temporary files left


def test_create_exclusive_race_has_one_winner(tmp_path: Path) -> None:
    location = f"file://{tmp_path}/race/v7.metadata.json"
    start = threading.Barrier(8)
    won: list[int] = []

    def contend(n: int) -> None:
        io = FileIO()
        start.wait()
        try:
            io.create_exclusive(location, f"writer {n}".encode())
            won.append(n)
        except FileAlreadyExistsError:
            pass

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert FileIO().read(location) == f"writer {won[0]}".encode()


def test_create_exclusive_on_object_stores_is_unsupported(io: FileIO) -> None:
    with pytest.raises(UnsupportedFeatureError, match="SQL catalog"):
        io.create_exclusive("s3://bucket/t/metadata/v2.metadata.json", b"{}")


# ---------------------------------------------------------------- S3 configuration


def test_s3_options_from_properties_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert FileIO().s3_options() == {"region": "eu-west-1"}

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    io = FileIO({"s3.endpoint": "http://127.0.0.1:9000", "s3.region": "us-east-1"})
    assert io.s3_options() == {
        "access_key": "env-key",
        "secret_key": "env-secret",
        "region": "us-east-1",
        "scheme": "http",
        "endpoint_override": "127.0.0.1:9000",
    }
    given = FileIO({"s3.access-key-id": "k", "s3.secret-access-key": "s", "s3.endpoint": "h:1"})
    assert given.s3_options()["access_key"] == "k"
    assert given.s3_options()["endpoint_override"] == "h:1"


def test_s3_key_without_secret_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    with pytest.raises(ConfigError):
        FileIO({"s3.access-key-id": "k"}).s3_options()


def test_s3_locations_resolve_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.fs as pafs

    io = FileIO(
        {
            "s3.endpoint": "http://127.0.0.1:9",
            "s3.region": "us-east-1",
            "s3.access-key-id": "k",
            "s3.secret-access-key": "s",
        }
    )
    for uri in ("s3://bucket/wh/t/x.parquet", "s3a://bucket/wh/t/x.parquet"):
        fs, path = io.resolve(uri)
        assert isinstance(fs, pafs.S3FileSystem)
        assert path == "bucket/wh/t/x.parquet"
    with pytest.raises(InvalidLocationError):
        io.resolve("s3:///no-bucket")


def test_secrets_stay_out_of_repr_and_pickles_work() -> None:
    io = FileIO({"s3.access-key-id": "AKIAEXAMPLE", "s3.secret-access-key": "very-secret"})
    assert "very-secret" not in repr(io)
    clone = pickle.loads(pickle.dumps(io))
    assert clone.properties == io.properties


def test_unsupported_schemes(io: FileIO) -> None:
    with pytest.raises(UnsupportedFeatureError):
        FileIO.for_location("gs://bucket/wh")
    with pytest.raises(UnsupportedFeatureError):
        io.read("hdfs://nn/wh/x")
    assert isinstance(FileIO.for_location("file:///wh"), FileIO)


# ---------------------------------------------------------------- readers agree on the form


@pytest.mark.integration
def test_pyiceberg_and_duckdb_use_the_canonical_form(io: FileIO, tmp_path: Path) -> None:
    """pyiceberg writes ``file:///`` locations for a ``file://`` warehouse; FileIO reads
    them and lists them back as the very same strings; DuckDB reads Parquet written by
    FileIO at a ``file:///`` location."""
    from pyiceberg.catalog.sql import SqlCatalog as PyIcebergSqlCatalog

    from tests.support.oracles import duckdb_connection

    theirs = PyIcebergSqlCatalog(
        "p", uri=f"sqlite:///{tmp_path}/p.db", warehouse=f"file://{tmp_path}/wh"
    )
    theirs.create_namespace("ns")
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    table = theirs.create_table("ns.t", schema=data.schema)
    table.append(data)
    table = theirs.load_table("ns.t")
    manifest_list = table.current_snapshot().manifest_list
    assert manifest_list.startswith("file:///")
    assert io.size(table.metadata_location) > 0
    listed = io.list_prefix(f"file://{tmp_path}/wh/ns/t/metadata/")
    assert table.metadata_location in listed and manifest_list in listed

    ours = f"file://{tmp_path}/ours/x.parquet"
    with io.new_output_stream(ours) as sink:
        pq.write_table(data, sink)
    con = duckdb_connection()
    try:
        assert con.execute(f"SELECT sum(id) FROM read_parquet('{ours}')").fetchone() == (6,)
    finally:
        con.close()
    from pyiceberg.io.pyarrow import PyArrowFileIO

    with PyArrowFileIO().new_input(ours).open() as f:
        assert pq.read_table(f).equals(data)


@pytest.mark.skipif(
    not hasattr(os, "fork"), reason="os.fork does not exist on this platform (Windows)"
)
def test_write_many_works_in_a_child_forked_after_the_parent_used_it(
    io: FileIO, tmp_path: Path
) -> None:
    io.write_many([(f"file://{tmp_path}/p{i}.bin", b"p") for i in range(3)])  # pool started
    pid = os.fork()
    if pid == 0:  # child: the inherited pool has no threads; a new one must be made
        try:
            FileIO().write_many([(f"file://{tmp_path}/c{i}.bin", b"c") for i in range(3)])
            os._exit(0)
        except BaseException:  # noqa: BLE001 - a forked child must exit, never return
            os._exit(1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("write_many hung in a forked child")
    assert os.waitstatus_to_exitcode(status) == 0
    assert [io.read(f"file://{tmp_path}/c{i}.bin") for i in range(3)] == [b"c"] * 3
