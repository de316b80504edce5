"""The reference lineage reader's own pieces, checked against inputs it did not make:
deletion vectors serialized by pyroaring (framed here) and the recorded DV vectors, and
first-row-id inheritance on the spec's own example manifest (written with fastavro)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap64

from tests.commit.spec.puffin_vectors import DV_CASES, DV_DIR
from tests.support.lineage import LineageError, LiveFile, data_files_of, dv_positions


def _frame(vector: bytes) -> bytes:
    body = b"\xd1\xd3\x39\x64" + vector
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


@pytest.mark.parametrize("name", sorted(DV_CASES))
def test_recorded_deletion_vectors(name: str) -> None:
    blob = (DV_DIR / f"{name}.bin").read_bytes()
    assert dv_positions(blob) == set(DV_CASES[name]())


@st.composite
def _bitmaps(draw: st.DrawFn) -> BitMap64:
    bitmap = BitMap64()
    for key in draw(st.lists(st.sampled_from([0, 1, 5, 2**31 - 2]), max_size=3)):
        base = key << 32
        bitmap.update(base + v for v in draw(st.lists(st.integers(0, 2**32 - 1), max_size=30)))
        for _ in range(draw(st.integers(0, 3))):
            start = draw(st.integers(0, 2**32 - 80_000))
            step = draw(st.sampled_from([1, 2, 7]))
            bitmap.update(range(base + start, base + start + draw(st.integers(1, 80_000)), step))
    return bitmap


@settings(max_examples=60, deadline=None)
@given(_bitmaps(), st.booleans())
def test_pyroaring_vectors_read_back(bitmap: BitMap64, run_optimize: bool) -> None:
    if run_optimize:
        bitmap.run_optimize()
    assert dv_positions(_frame(bitmap.serialize())) == set(bitmap)


def test_a_corrupt_vector_is_refused() -> None:
    blob = bytearray(_frame(BitMap64([1, 2, 3]).serialize()))
    blob[-5] ^= 1
    with pytest.raises(LineageError, match="CRC"):
        dv_positions(bytes(blob))


_ENTRY = {
    "type": "record",
    "name": "manifest_entry",
    "fields": [
        {"name": "status", "type": "int"},
        {"name": "snapshot_id", "type": ["null", "long"]},
        {"name": "sequence_number", "type": ["null", "long"]},
        {
            "name": "data_file",
            "type": {
                "type": "record",
                "name": "data_file",
                "fields": [
                    {"name": "file_path", "type": "string"},
                    {"name": "record_count", "type": "long"},
                    {"name": "first_row_id", "type": ["null", "long"]},
                ],
            },
        },
    ],
}


def test_first_row_ids_follow_the_spec_example(tmp_path: Path) -> None:
    """Spec, "Row lineage example": manifest ``added1`` has first_row_id 1000 and holds
    EXISTING data1 (25 rows, first_row_id 800), ADDED data2 and data3 (50 rows each,
    null): they get 1000 and 1050. A DELETED entry in between takes no ids."""

    def entry(status: int, path: str, rows: int, first: int | None) -> dict[str, object]:
        data_file = {"file_path": path, "record_count": rows, "first_row_id": first}
        return {"status": status, "snapshot_id": 9, "sequence_number": 4, "data_file": data_file}

    path = tmp_path / "added1.avro"
    entries = [
        entry(0, "data1", 25, 800),
        entry(1, "data2", 50, None),
        entry(2, "gone", 70, 600),
        entry(1, "data3", 50, None),
    ]
    with path.open("wb") as f:
        fastavro.writer(f, _ENTRY, entries)
    manifest = {"manifest_path": str(path), "first_row_id": 1000, "sequence_number": 5}
    assert data_files_of(manifest) == [
        LiveFile("data1", 25, 800, 4),
        LiveFile("data2", 50, 1000, 4),
        LiveFile("data3", 50, 1050, 4),
    ]
