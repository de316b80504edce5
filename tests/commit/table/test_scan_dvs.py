"""``scan.read_dvs_of_file``: the deletion vectors of one Puffin file from one read."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyroaring import BitMap64

from calving.commit.errors import CorruptFileError
from calving.commit.io import FileIO
from calving.commit.spec.data_file import DataFile, FileContent
from calving.commit.spec.deletion_vector import write_dv_puffin
from calving.commit.table import scan

POSITIONS = {"a.parquet": [0, 5, 9], "b.parquet": [1], "c.parquet": list(range(100, 400, 3))}


def _puffin(tmp_path: Path, name: str = "dv.puffin") -> tuple[FileIO, list[DataFile]]:
    data, refs = write_dv_puffin([(f, BitMap64(p)) for f, p in POSITIONS.items()])
    location = str(tmp_path / name)
    Path(location).write_bytes(data)
    dvs = [
        DataFile(
            content=FileContent.POSITION_DELETES,
            file_path=location,
            file_format="PUFFIN",
            partition=(),
            record_count=ref.cardinality,
            file_size_in_bytes=len(data),
            referenced_data_file=ref.referenced_data_file,
            content_offset=ref.content_offset,
            content_size_in_bytes=ref.content_size_in_bytes,
        )
        for ref in refs
    ]
    return FileIO(), dvs


def test_each_vector_in_the_order_asked_equal_to_one_read_each(tmp_path: Path) -> None:
    scan.clear_caches()
    io, dvs = _puffin(tmp_path)
    asked = [dvs[2], dvs[0]]  # not in file order, one left out
    got = scan.read_dvs_of_file(io, asked)
    assert got == [scan.read_dv(io, dv) for dv in asked]
    assert [list(b) for b in got] == [POSITIONS["c.parquet"], POSITIONS["a.parquet"]]


def test_a_cached_vector_is_a_copy_and_the_rest_are_read(tmp_path: Path) -> None:
    scan.clear_caches()
    io, dvs = _puffin(tmp_path)
    scan.remember_written_dv(
        dvs[1].file_path, dvs[1].content_offset or 0, BitMap64([1]), "b.parquet"
    )
    got = scan.read_dvs_of_file(io, dvs)
    got[1].add(77)  # the caller's copy: the cache keeps its own
    assert list(scan.read_dvs_of_file(io, [dvs[1]])[0]) == [1]
    assert [list(b) for b in got[::2]] == [POSITIONS["a.parquet"], POSITIONS["c.parquet"]]


def test_a_damaged_vector_names_its_file_and_offset(tmp_path: Path) -> None:
    scan.clear_caches()
    io, dvs = _puffin(tmp_path)
    raw = bytearray(Path(dvs[0].file_path).read_bytes())
    raw[(dvs[2].content_offset or 0) + 9] ^= 0xFF  # inside c.parquet's vector
    Path(dvs[0].file_path).write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError, match=rf"dv\.puffin@{dvs[2].content_offset}"):
        scan.read_dvs_of_file(io, dvs)


def test_vectors_of_two_files_are_refused(tmp_path: Path) -> None:
    _, one = _puffin(tmp_path, "one.puffin")
    io, two = _puffin(tmp_path, "two.puffin")
    with pytest.raises(ValueError, match="more than one file"):
        scan.read_dvs_of_file(io, [one[0], two[0]])
