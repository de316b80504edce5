"""Local files fsynced together (``calving.commit.io_sync``) on real files: inside a
``synced_together()`` block a closed file (a stream, or a whole-file ``write``) is synced
when the block ends, not when it closes, while an exclusive create (a commit point)
syncs at once; a failed block syncs nothing; nested blocks join the outer one; the number of
descriptors kept open is bounded; outside a block nothing changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from calving.commit import io_sync
from calving.commit.errors import FileIOError
from calving.commit.io import FileIO
from calving.commit.io_sync import synced_together


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The path of every file and directory fsynced, in order, by either module."""
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return synced


def _write(io: FileIO, location: str, data: bytes) -> None:
    with io.new_output_stream(location) as out:
        out.write(data)


def test_files_closed_in_a_block_are_synced_when_it_ends(tmp_path: Path, fsyncs: list[str]) -> None:
    io = FileIO()
    files = [tmp_path / d / f"f{i}.bin" for d in "ab" for i in range(3)]
    with synced_together():
        for i, path in enumerate(files):
            _write(io, f"file://{path}", bytes([i]) * 10)
            assert path.read_bytes() == bytes([i]) * 10, "readable once closed"
        assert fsyncs == [], "nothing synced before the block ends"
    assert sorted(fsyncs[:6]) == sorted(str(p) for p in files), "every file, then..."
    assert sorted(fsyncs[6:]) == [str(tmp_path / "a"), str(tmp_path / "b")], "each dir once"
    assert _open_fds_to(tmp_path) == [], "every kept descriptor closed"


def test_whole_file_writes_are_synced_with_the_block_but_exclusive_creates_at_once(
    tmp_path: Path, fsyncs: list[str]
) -> None:
    io = FileIO()
    with synced_together():
        io.write(f"file://{tmp_path}/a/data.parquet", b"rows")
        assert fsyncs == []
        io.create_exclusive(f"file://{tmp_path}/b/v2.metadata.json", b"{}")
        assert fsyncs[-1] == str(tmp_path / "b"), "a commit point is durable when it returns"
        synced_before_end = list(fsyncs)
    assert str(tmp_path / "a" / "data.parquet") not in synced_before_end
    assert fsyncs[len(synced_before_end) :] == [
        str(tmp_path / "a" / "data.parquet"),
        str(tmp_path / "a"),
    ]
    assert io.read(f"file://{tmp_path}/a/data.parquet") == b"rows"


def test_outside_a_block_each_file_syncs_as_it_closes(tmp_path: Path, fsyncs: list[str]) -> None:
    _write(FileIO(), f"file://{tmp_path}/f.bin", b"x")
    assert fsyncs == [str(tmp_path / "f.bin"), str(tmp_path)]


def test_a_failed_block_syncs_nothing_and_closes_its_descriptors(
    tmp_path: Path, fsyncs: list[str]
) -> None:
    with pytest.raises(RuntimeError, match="task failed"), synced_together():
        _write(FileIO(), f"file://{tmp_path}/f.bin", b"x")
        raise RuntimeError("task failed")
    assert fsyncs == []
    assert _open_fds_to(tmp_path) == []
    _write(FileIO(), f"file://{tmp_path}/g.bin", b"y")  # the thread's group is gone
    assert fsyncs == [str(tmp_path / "g.bin"), str(tmp_path)]


def test_nested_blocks_join_the_outermost(tmp_path: Path, fsyncs: list[str]) -> None:
    io = FileIO()
    with synced_together():
        with synced_together():
            _write(io, f"file://{tmp_path}/inner.bin", b"1")
        assert fsyncs == [], "the inner block's end syncs nothing"
        _write(io, f"file://{tmp_path}/outer.bin", b"2")
    assert sorted(fsyncs[:2]) == [str(tmp_path / "inner.bin"), str(tmp_path / "outer.bin")]
    assert fsyncs[2:] == [str(tmp_path)]


def test_at_most_max_kept_descriptors_are_held(
    tmp_path: Path, fsyncs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(io_sync, "MAX_KEPT", 3)
    io = FileIO()
    with synced_together():
        for i in range(7):
            _write(io, f"file://{tmp_path}/f{i}.bin", b"x")
            assert len(_open_fds_to(tmp_path)) < 3
        assert len([p for p in fsyncs if p.endswith(".bin")]) == 6, "two full groups synced"
    assert len([p for p in fsyncs if p.endswith(".bin")]) == 7


def test_a_failed_fsync_is_a_file_io_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with pytest.raises(FileIOError, match=r"f\.bin: fsync failed"), synced_together():
        _write(FileIO(), f"file://{tmp_path}/f.bin", b"x")
        monkeypatch.setattr(os, "fsync", broken)
    assert _open_fds_to(tmp_path) == []


def _open_fds_to(directory: Path) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            out.append(target)
    return out


def test_a_tail_replaced_in_place_is_synced_at_once_or_with_the_block(
    tmp_path: Path, fsyncs: list[str]
) -> None:
    """``replace_tail`` keeps the first bytes, writes the new tail, cuts what is past it
    (a shorter tail too) and syncs the file: as it returns outside a block, when the
    block ends inside one. Object storage refuses it, changing nothing."""
    io, path = FileIO(), tmp_path / "f.bin"
    path.write_bytes(b"0123456789")
    assert io.replace_tail(f"file://{path}", 4, b"abcdefghij")
    assert path.read_bytes() == b"0123abcdefghij" and fsyncs == [str(path)]
    with synced_together():
        assert io.replace_tail(f"file://{path}", 2, b"Z")
        assert path.read_bytes() == b"01Z" and fsyncs == [str(path)]
    assert fsyncs[1:] == [str(path), str(tmp_path)]
    assert _open_fds_to(tmp_path) == []
    assert not FileIO().replace_tail("s3://bucket/f.bin", 0, b"x")
