"""Gzip metadata files assembled from pieces compressed apart
(``calving.commit.spec.metadata_gzip``): over random histories (appends, expiry from the
start, a trimmed log, re-parsed entries, two tables in turn) every file decompresses,
with Python's gzip and with zlib's own gzip reader, to exactly ``serialize_metadata``'s
bytes; settled history is compressed once; a damaged file is a typed error naming it."""

from __future__ import annotations

import gzip
import struct
import zlib
from unittest import mock

import pytest
from hypothesis import given, settings

from calving.commit.errors import CorruptFileError
from calving.commit.spec import list_text
from calving.commit.spec import metadata_gzip as mg
from calving.commit.spec.list_text import LIST_TEXTS
from calving.commit.spec.metadata import metadata_json, parse_metadata, serialize_metadata
from calving.commit.spec.partition import PartitionSpec
from calving.commit.table.table import new_table_metadata
from tests.commit.spec.test_list_text import OPS, SCHEMA, commit, history_states


def _unzipped(data: bytes) -> bytes:
    """Both readers: Python's gzip module and zlib's gzip decoder (as C readers use)."""
    one = gzip.decompress(data)
    d = zlib.decompressobj(31)
    two = d.decompress(data) + d.flush()
    assert d.eof and not d.unused_data, "trailing bytes after the gzip member"
    assert one == two
    return one


@pytest.mark.parametrize("segment", [1, 3, list_text.SEGMENT_ENTRIES])
def test_gzip_files_decompress_to_the_plain_bytes_over_random_histories(segment):
    LIST_TEXTS.clear()
    mg.DEFLATED.clear()
    with mock.patch.object(list_text, "SEGMENT_ENTRIES", segment):
        _gzip_equals_plain()


@settings(max_examples=120, deadline=None)
@given(OPS)
def _gzip_equals_plain(ops):
    for m in history_states(ops, mg.gzip_metadata):  # re-parsed from gzip files too
        assert _unzipped(mg.gzip_metadata(m)) == serialize_metadata(m)


def _long_history(n: int):
    m = new_table_metadata(SCHEMA, "file:///w/t", PartitionSpec(0))
    for i in range(1, n + 1):
        m = commit(m, i, f"note {i}")
    return m


def test_settled_segments_are_compressed_once():
    """The point of it: a commit compresses its new entries and the changing fields,
    not the history again."""
    LIST_TEXTS.clear()
    cache = mg.DeflatedPieces()
    m = _long_history(5 * list_text.SEGMENT_ENTRIES)
    calls: list[int] = []
    real = mg.deflate_piece

    def counting(data: bytes, level: int) -> bytes:
        calls.append(len(data))
        return real(data, level)

    with mock.patch.object(mg, "deflate_piece", counting):
        first = cache.gzip("t", mg.metadata_parts(m))
        settled = [len(p) for p, s in mg.metadata_parts(m) if s]
        assert len(settled) >= 4  # full segments of the snapshot list, at least
        calls.clear()
        m = commit(m, 10_000, "one more")
        second = cache.gzip("t", mg.metadata_parts(m))
    assert _unzipped(second) == serialize_metadata(m)
    assert _unzipped(first) != _unzipped(second)
    # Only the unsettled runs between settled pieces were compressed: never a settled one.
    assert all(size not in settled for size in calls), (calls, settled)
    assert sum(calls) < len(serialize_metadata(m)) // 3


def test_the_file_is_one_gzip_member_with_a_fixed_header():
    m = _long_history(3)
    data = mg.gzip_metadata(m)
    assert data.startswith(mg.GZIP_HEADER)
    assert data[-10:-8] == mg.FINAL_BLOCK
    crc, size = struct.unpack("<II", data[-8:])
    plain = serialize_metadata(m)
    assert (crc, size) == (zlib.crc32(plain), len(plain))
    assert mg.gzip_metadata(m) == data  # equal metadata, equal bytes


def test_only_the_pieces_of_each_tables_last_file_are_kept():
    """A long stream expiring its history and trimming its log makes new settled pieces
    all the time: the ones its metadata no longer holds must not pile up."""
    LIST_TEXTS.clear()
    cache = mg.DeflatedPieces(max_tables=2)
    with mock.patch.object(list_text, "SEGMENT_ENTRIES", 4):
        m = _long_history(40)
        held = []
        for n in range(41, 400):
            m = commit(m, n, "x")
            m = m.with_changes(
                snapshots=m.snapshots[-30:],
                snapshot_log=m.snapshot_log[-30:],
                metadata_log=m.metadata_log[-25:],
            )
            assert _unzipped(cache.gzip("t", mg.metadata_parts(m))) == serialize_metadata(m)
            held.append(cache.held_bytes())
        settled = sum(1 for _, s in mg.metadata_parts(m) if s)
    assert len(cache._last["t"]) == settled
    assert max(held[100:]) <= 2 * min(held[100:]), (min(held[100:]), max(held[100:]))
    for name in ("u", "v"):  # a third table drops the least recently used one
        cache.gzip(name, mg.metadata_parts(_long_history(3)))
    assert list(cache._last) == ["u", "v"]


def test_an_equal_piece_of_another_object_is_compressed_again():
    """Pieces are known by identity, not equality: an equal piece that is another object
    (another process's history, parsed again) is compressed, and the file is right."""
    LIST_TEXTS.clear()
    cache = mg.DeflatedPieces()
    m = _long_history(3 * list_text.SEGMENT_ENTRIES)
    first = cache.gzip("t", mg.metadata_parts(m))
    LIST_TEXTS.clear()  # the history's text made again: equal bytes, new objects
    again = cache.gzip("t", mg.metadata_parts(m))
    assert _unzipped(again) == _unzipped(first) == serialize_metadata(m)


def test_metadata_files_are_read_plain_or_gzip_and_a_damaged_one_is_named():
    m = _long_history(4)
    plain = serialize_metadata(m)
    packed = mg.metadata_file_bytes(m, "gzip")
    assert mg.metadata_file_bytes(m, "none") == plain
    assert metadata_json(packed, "x") == plain and metadata_json(plain, "x") == plain
    assert parse_metadata(packed, "x") == parse_metadata(plain, "x")
    for bad in (packed[:-5], packed[:12], packed[:20] + b"\x00" * 8 + packed[28:]):
        with pytest.raises(CorruptFileError, match="m1.gz.metadata.json"):
            parse_metadata(bad, "s3://b/t/metadata/m1.gz.metadata.json")
    with pytest.raises(ValueError, match="zstd"):
        mg.metadata_file_bytes(m, "zstd")
