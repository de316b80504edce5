"""Storing ``_row_id``s in an uncommitted data file (an update keeping its rows' ids) and
reading live rows' ``_row_id`` back by (file, position): ``store_row_ids`` appends the
reserved columns to the file (in place locally, as a copy on object storage),
``RowIdReader`` prefers a file's stored value and falls back to its inherited
``first_row_id`` + position."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from calving.commit.catalog import SqlCatalog
from calving.commit.errors import FileNotFoundInTableError
from calving.commit.io import FileIO
from calving.commit.spec import row_lineage as rl
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import LONG, STRING, NestedField
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.rewrite_files import RewriteFiles
from calving.commit.table.row_ids import UNKNOWN, RowIdReader, read_stored_row_ids
from calving.commit.table.table import Table, create_table
from calving.ingest.write import row_ids as row_ids_module
from calving.ingest.write.append_columns import SpliceError
from calving.ingest.write.parquet_writer import write_data_file
from calving.ingest.write.row_ids import store_row_ids
from tests.support.lineage import snapshot_rows
from tests.support.s3 import moto_bucket

SCHEMA = Schema(
    (NestedField(1, "id", LONG, required=True), NestedField(2, "name", STRING)),
    identifier_field_ids=(1,),
)


@pytest.fixture
def table(tmp_path) -> Table:
    catalog = SqlCatalog("t", f"sqlite:///{tmp_path}/c.db", f"{tmp_path}/wh")
    catalog.create_namespace(("db",))
    return create_table(catalog, ("db", "t"), SCHEMA)


def _rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]})


def _field_id_columns(path: str) -> dict[int, list[object]]:
    t = pq.read_table(path.removeprefix("file://"))
    return {
        int(f.metadata[b"PARQUET:field_id"]): t.column(f.name).to_pylist()
        for f in t.schema
        if f.metadata
    }


def _check_stored(stored: DataFile, original: DataFile, io: FileIO) -> None:
    assert stored.record_count == 3 and stored.partition == original.partition
    assert stored.file_size_in_bytes == io.size(stored.file_path)
    t = pq.read_table(pa.py_buffer(io.read(stored.file_path)))
    columns = {
        int(f.metadata[b"PARQUET:field_id"]): t.column(f.name).to_pylist()
        for f in t.schema
        if f.metadata
    }
    assert columns[1] == [5, 6, 7] and columns[2] == ["n5", "n6", "n7"]
    assert columns[rl.ROW_ID_FIELD_ID] == [40, None, 2]
    assert columns[rl.LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID] == [None, None, None]
    # Metrics only for the table's columns, as for any stream file.
    assert stored.value_counts is not None and set(stored.value_counts) == {1, 2}
    assert stored.lower_bounds is not None and not set(stored.lower_bounds) & rl.LINEAGE_FIELD_IDS


def test_a_local_task_file_stores_the_ids_and_nulls_in_place(table: Table) -> None:
    loc = f"{table.metadata.location}/data/task-1.parquet"
    original = write_data_file(table.io, loc, _rows([5, 6, 7]), SCHEMA)
    before = table.io.read(loc)
    stored = store_row_ids(table.io, SCHEMA, original, np.array([40, UNKNOWN, 2], np.int64))

    # Same file: the task's bytes up to its footer are unchanged, the rest is new.
    assert stored.file_path == original.file_path
    footer_start = len(before) - 8 - int.from_bytes(before[-8:-4], "little")
    assert table.io.read(loc)[:footer_start] == before[:footer_start]
    assert stored.file_size_in_bytes > original.file_size_in_bytes
    _check_stored(stored, original, table.io)
    with pytest.raises(ValueError, match="2 row ids for 3 rows"):
        store_row_ids(table.io, SCHEMA, stored, np.array([1, 2], np.int64))


def test_on_object_storage_a_copy_replaces_the_task_file() -> None:
    """An S3 object cannot change in place: the ids go to a copy beside the task's
    file, which is deleted (moto on loopback)."""
    with moto_bucket("lineage") as props:
        io = FileIO(props)
        loc = "s3://lineage/wh/db/t/data/task-1.parquet"
        original = write_data_file(io, loc, _rows([5, 6, 7]), SCHEMA)
        stored = store_row_ids(io, SCHEMA, original, np.array([40, UNKNOWN, 2], np.int64))
        assert stored.file_path != loc and stored.file_path.startswith("s3://lineage/wh/db/t/data/")
        assert not io.exists(loc)
        _check_stored(stored, original, io)


def test_the_reader_prefers_stored_ids_and_falls_back_to_first_row_id(table: Table) -> None:
    io, where = table.io, f"{table.metadata.location}/data"
    plain = write_data_file(io, f"{where}/plain.parquet", _rows([1, 2, 3]), SCHEMA)
    task = write_data_file(io, f"{where}/task.parquet", _rows([4, 5, 6]), SCHEMA)
    stored = store_row_ids(io, SCHEMA, task, np.array([UNKNOWN, 100, UNKNOWN], np.int64))
    table.commit_or_raise(FastAppend((plain, stored)))

    # The spec's derivation (the reference reader): plain 0..2, stored 3, 100, 5.
    want = {r.values["id"]: r.row_id for r in snapshot_rows(table.metadata_location)}
    assert want == {1: 0, 2: 1, 3: 2, 4: 3, 5: 100, 6: 5}
    assert read_stored_row_ids(io, plain.file_path) is None
    reader = RowIdReader(io, max_cached_rows=2)  # one stored file at a time
    for _ in range(2):  # the second round from the caches (the stored one evicted, re-read)
        got = reader.row_ids(
            table.metadata,
            {
                plain.file_path: np.array([2, 0]),
                stored.file_path: np.array([0, 1, 2]),
            },
        )
        assert got[plain.file_path].tolist() == [want[3], want[1]]
        assert got[stored.file_path].tolist() == [want[4], want[5], want[6]]
    with pytest.raises(FileNotFoundInTableError):
        reader.row_ids(table.metadata, {f"{where}/not-committed.parquet": np.array([0])})


def _chunk_sizes(path: str) -> list[int]:
    md = pq.ParquetFile(path.removeprefix("file://")).metadata
    return [md.row_group(0).column(c).total_compressed_size for c in range(md.num_columns)]


def test_the_copy_keeps_the_task_files_column_chunks_as_bytes(table: Table) -> None:
    loc = f"{table.metadata.location}/data/task-2.parquet"
    original = write_data_file(table.io, loc, _rows(list(range(50))), SCHEMA)
    sizes = _chunk_sizes(original.file_path)
    ids = np.where(np.arange(50) % 2 == 0, np.arange(50) + 1000, UNKNOWN).astype(np.int64)
    copy = store_row_ids(table.io, SCHEMA, original, ids)
    assert _chunk_sizes(copy.file_path)[:2] == sizes  # spliced, not encoded again
    assert copy.file_size_in_bytes == table.io.size(copy.file_path)
    columns = _field_id_columns(copy.file_path)
    assert columns[rl.ROW_ID_FIELD_ID] == [i + 1000 if i % 2 == 0 else None for i in range(50)]


def test_a_file_that_cannot_be_spliced_is_written_again_whole(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_: object) -> bytes:
        raise SpliceError("column chunks in other files or encrypted")

    monkeypatch.setattr(row_ids_module, "splice_tail", refuse)
    loc = f"{table.metadata.location}/data/task-3.parquet"
    original = write_data_file(table.io, loc, _rows([1, 2]), SCHEMA)
    copy = store_row_ids(table.io, SCHEMA, original, np.array([UNKNOWN, 7], np.int64))
    assert not table.io.exists(original.file_path)
    columns = _field_id_columns(copy.file_path)
    assert columns[1] == [1, 2] and columns[rl.ROW_ID_FIELD_ID] == [None, 7]
    assert copy.file_size_in_bytes == table.io.size(copy.file_path)


def test_the_reader_forgets_files_that_left_the_table(table: Table) -> None:
    """A long stream's files are rewritten by maintenance: the reader keeps nothing of a
    file that is no longer live (it once kept them all until its row budget filled)."""
    io, where = table.io, f"{table.metadata.location}/data"
    task = write_data_file(io, f"{where}/a.parquet", _rows([1, 2]), SCHEMA)
    a = store_row_ids(io, SCHEMA, task, np.array([10, 11], np.int64))
    table.commit_or_raise(FastAppend((a,)))
    reader = RowIdReader(io)
    assert reader.row_ids(table.metadata, {a.file_path: np.array([1])})[a.file_path].tolist() == [
        11
    ]
    assert reader.cached_files == {a.file_path}

    # A rewrite replaces a by b (same rows, ids kept); then a new file c arrives.
    task = write_data_file(io, f"{where}/b-task.parquet", _rows([1, 2]), SCHEMA)
    b = store_row_ids(io, SCHEMA, task, np.array([10, 11], np.int64))
    table.commit_or_raise(RewriteFiles((a.file_path,), (b,)))
    c = write_data_file(io, f"{where}/c.parquet", _rows([3]), SCHEMA)
    table.commit_or_raise(FastAppend((c,)))
    got = reader.row_ids(table.metadata, {b.file_path: np.array([0]), c.file_path: np.array([0])})
    assert got[b.file_path].tolist() == [10]
    assert reader.cached_files == {b.file_path, c.file_path}


def test_remembered_ids_are_answered_without_the_file_and_count_once(table: Table) -> None:
    """``remember_stored`` (the coordinator, for a copy it just wrote) is what the reader
    answers for that file, without opening it; remembering a file again replaces it in
    the row budget instead of counting it twice."""
    io, where = table.io, f"{table.metadata.location}/data"
    copies, ids = [], []
    for name, keys, stored in (
        ("a", [1, 2, 3], [UNKNOWN, 70, 71]),
        ("b", [4, 5, 6], [80, 81, UNKNOWN]),
    ):
        task = write_data_file(io, f"{where}/{name}-task.parquet", _rows(keys), SCHEMA)
        ids.append(np.array(stored, np.int64))
        copies.append(store_row_ids(io, SCHEMA, task, ids[-1]))
    table.commit_or_raise(FastAppend(tuple(copies)))
    a, b = (c.file_path for c in copies)
    reader = RowIdReader(io, max_cached_rows=6)  # both files, if each counts once
    reader.remember_stored(a, ids[0])
    reader.remember_stored(a, ids[0])
    reader.remember_stored(b, ids[1])
    for path in (a, b):
        io.delete(path)  # answered from what was remembered, not from the files
    got = reader.row_ids(table.metadata, {a: np.array([2, 1, 0]), b: np.array([0, 2])})
    # a's position 0 and b's position 2 inherit: a's first_row_id 0, b's 3.
    assert got[a].tolist() == [71, 70, 0] and got[b].tolist() == [80, 5]
    assert reader.cached_files == {a, b}


def test_only_the_footer_is_read_even_when_it_is_longer_than_the_first_read(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The footer is read from the file's end: a first read of ``FOOTER_GUESS`` bytes,
    a second one of the footer's length when that is longer; the chunks are not read."""
    monkeypatch.setattr(row_ids_module, "FOOTER_GUESS", 16)
    io = table.io
    task = write_data_file(
        io, f"{table.metadata.location}/data/t.parquet", _rows([5, 6, 7]), SCHEMA
    )
    reads: list[tuple[int, int]] = []
    real = FileIO.read_range

    def spy(self: FileIO, location: str, offset: int, length: int) -> bytes:
        reads.append((offset, length))
        return real(self, location, offset, length)

    monkeypatch.setattr(FileIO, "read_range", spy)
    monkeypatch.setattr(FileIO, "read", lambda *_: pytest.fail("the whole file was read"))
    stored = store_row_ids(io, SCHEMA, task, np.array([40, UNKNOWN, 2], np.int64))
    first, second = reads
    assert first == (task.file_size_in_bytes - 16, 16) and second[1] > 16
    assert second[0] + second[1] == task.file_size_in_bytes and second[0] > 4
    monkeypatch.undo()
    _check_stored(stored, task, io)
