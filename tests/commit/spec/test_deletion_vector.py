"""deletion-vector-v1 blobs: round trips, recorded and hand-built vectors, corrupt input,
and pyiceberg's DV reader as oracle."""

from __future__ import annotations

import struct
import zlib
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap, BitMap64

from calving.commit.errors import CorruptFileError
from calving.commit.spec.deletion_vector import (
    DV_BLOB_TYPE,
    MAX_WRITE_POSITION,
    ROW_POSITION_FIELD_ID,
    DVBlobRef,
    deserialize_dv,
    dv_blob_metadata,
    read_dvs,
    serialize_dv,
    write_dv_puffin,
)
from calving.commit.spec.puffin import PuffinWriter, read_blob, read_footer
from tests.commit.spec.puffin_vectors import DV_CASES, DV_DIR, HAND_BUILT_DVS
from tests.commit.spec.test_puffin import mutate, mutations

SOURCE = "s3://bucket/t/data/dv-1.puffin"
HIGH = 1 << 32


ALL_KEYS = (0, 1, 2, 7, 2**20, 2**31 - 2)


@st.composite
def position_sets(draw: st.DrawFn, key_choices: tuple[int, ...] = ALL_KEYS) -> BitMap64:
    """Sparse points and dense runs over a few high keys (so array, bitset and run
    containers all appear), up to the largest position Java can read."""
    keys = draw(st.lists(st.sampled_from(key_choices), max_size=3))
    bitmap = BitMap64()
    for key in keys:
        base = key * HIGH
        for low in draw(st.lists(st.integers(0, 2**31), max_size=40)):
            bitmap.add(base + low)
        for _ in range(draw(st.integers(0, 2))):
            start = draw(st.integers(0, 2**31 - 70_000))
            length = draw(st.integers(1, 70_000))
            step = draw(st.sampled_from([1, 1, 2, 3]))
            bitmap.update(range(base + start, base + start + length, step))
    return bitmap


def _independent_vector_matches(vector: bytes, positions: BitMap64) -> bool:
    """Whether ``vector`` is the portable 64-bit layout of ``positions``, checked against
    32-bit pyroaring bitmaps built key by key.

    Per key, either the plain or the run-optimised 32-bit serialization is accepted: both
    are valid Roaring encodings, and the 64-bit and 32-bit run heuristics differ when a
    run container and an array are the same size (e.g. {0, 1, 2})."""
    keys = sorted({p >> 32 for p in positions})
    if vector[:8] != struct.pack("<Q", len(keys)):
        return False
    offset = 8
    for key in keys:
        low = BitMap(p & 0xFFFFFFFF for p in positions if p >> 32 == key)
        plain = low.serialize()
        low.run_optimize()
        candidates = {plain, low.serialize()}
        if vector[offset : offset + 4] != struct.pack("<I", key):
            return False
        offset += 4
        match = next((c for c in candidates if vector.startswith(c, offset)), None)
        if match is None:
            return False
        offset += len(match)
    return offset == len(vector)


def _reframe(vector: bytes) -> bytes:
    """A DV blob around ``vector`` with a correct length and CRC."""
    body = b"\xd1\xd3\x39\x64" + vector
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


# ---------------------------------------------------------------- round trips


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(positions=position_sets())
def test_round_trip_is_byte_exact(positions: BitMap64) -> None:
    blob = serialize_dv(positions)
    decoded = deserialize_dv(blob, SOURCE)
    assert decoded == positions
    assert len(decoded) == len(positions)
    assert serialize_dv(decoded) == blob
    # pyroaring's BitMap64 layout is the spec's: the same bytes as building it key by key.
    assert _independent_vector_matches(blob[8:-4], positions)
    assert struct.unpack(">I", blob[:4])[0] == len(blob) - 8
    assert struct.unpack(">I", blob[-4:])[0] == zlib.crc32(blob[4:-4])


def test_round_trip_from_plain_iterables() -> None:
    positions = [5, 3, 3, HIGH * 9 + 1, 0]
    decoded = deserialize_dv(serialize_dv(positions), SOURCE)
    assert list(decoded) == [0, 3, 5, HIGH * 9 + 1]
    assert HIGH * 9 + 1 in decoded and 4 not in decoded
    assert list(decoded.to_array()) == [0, 3, 5, HIGH * 9 + 1]
    assert decoded | BitMap64([4]) == BitMap64([0, 3, 4, 5, HIGH * 9 + 1])


def test_run_containers_are_used() -> None:
    blob = serialize_dv(range(1_000_000))
    assert len(blob) < 300  # 16 run containers, not 16 bitsets of 8 KiB
    assert struct.unpack("<I", blob[20:24])[0] & 0xFFFF == 12347  # cookie with run containers


def test_positions_out_of_range_are_refused() -> None:
    serialize_dv([MAX_WRITE_POSITION])
    with pytest.raises(ValueError):
        serialize_dv([MAX_WRITE_POSITION + 1])
    with pytest.raises((ValueError, OverflowError)):
        serialize_dv([-1])


# ---------------------------------------------------------------- recorded vectors


@pytest.mark.parametrize("name", sorted(DV_CASES))
def test_recorded_vector(name: str) -> None:
    recorded = (DV_DIR / f"{name}.bin").read_bytes()
    positions = DV_CASES[name]()
    assert serialize_dv(positions) == recorded
    assert deserialize_dv(recorded, name) == positions


@pytest.mark.parametrize("name", sorted(HAND_BUILT_DVS))
def test_hand_built_vector(name: str) -> None:
    blob, positions, canonical = HAND_BUILT_DVS[name]
    assert list(deserialize_dv(blob, name)) == positions
    assert (serialize_dv(positions) == blob) == canonical


# ---------------------------------------------------------------- Puffin files of DVs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dvs=st.lists(position_sets().filter(bool), max_size=4),
    compress_footer=st.booleans(),
)
def test_dv_puffin_round_trip(dvs: list[BitMap64], compress_footer: bool) -> None:
    named = [(f"s3://b/t/data/file-{i}.parquet", positions) for i, positions in enumerate(dvs)]
    data, refs = write_dv_puffin(named, compress_footer=compress_footer)
    assert read_dvs(data, SOURCE) == dict(named)

    blobs = read_footer(data, SOURCE).blobs
    assert [
        DVBlobRef(
            b.properties["referenced-data-file"],
            b.offset,
            b.length,
            int(b.properties["cardinality"]),
        )
        for b in blobs
    ] == refs
    for (name, positions), ref, blob in zip(named, refs, blobs):
        assert ref.cardinality == len(positions)
        # A reader holding only the manifest's offset and size finds the DV.
        content = data[ref.content_offset : ref.content_offset + ref.content_size_in_bytes]
        assert deserialize_dv(content, SOURCE) == positions
        assert blob.type == DV_BLOB_TYPE and blob.fields == (ROW_POSITION_FIELD_ID,)
        assert (blob.snapshot_id, blob.sequence_number, blob.compression_codec) == (-1, -1, None)


# pyiceberg 0.12 materialises one bitmap per key below the highest (so keys stay small
# here) and fails when key 0 holds no position (an empty first Arrow chunk has no type),
# so every set gets a position below 2**32.
pyiceberg_position_sets = st.builds(
    lambda positions, low: positions | BitMap64([low]),
    position_sets(key_choices=(0, 1, 3)),
    st.integers(0, 2**32 - 1),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dvs=st.lists(pyiceberg_position_sets, min_size=1, max_size=3))
def test_pyiceberg_reads_our_dvs(dvs: list[BitMap64]) -> None:
    from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file
    from pyiceberg.table.puffin import PuffinFile

    named = [(f"file-{i}.parquet", positions) for i, positions in enumerate(dvs)]
    data, _ = write_dv_puffin(named)  # pyiceberg 0.12 cannot read compressed footers
    theirs = {
        dv.referenced_data_file: dv.to_vector().to_pylist()
        for dv in deletion_vectors_from_puffin_file(PuffinFile(data))
    }
    assert theirs == {name: list(positions) for name, positions in named}


def test_dv_blob_metadata_fields() -> None:
    assert dv_blob_metadata("s3://b/f.parquet", 12) == {
        "type": "deletion-vector-v1",
        "fields": (2147483645,),
        "snapshot_id": -1,
        "sequence_number": -1,
        "properties": {"referenced-data-file": "s3://b/f.parquet", "cardinality": "12"},
    }


def test_other_blob_types_are_skipped() -> None:
    writer = PuffinWriter()
    writer.add_blob("apache-datasketches-theta-v1", b"sketch", [1], 3, 4)
    writer.add_blob(data=serialize_dv([1, 2]), **dv_blob_metadata("f.parquet", 2))
    assert read_dvs(writer.finish(), SOURCE) == {"f.parquet": BitMap64([1, 2])}


def test_duplicate_or_empty_dvs_are_refused_on_write() -> None:
    with pytest.raises(ValueError, match="two deletion vectors"):
        write_dv_puffin([("f.parquet", [1]), ("f.parquet", [2])])
    with pytest.raises(ValueError, match="empty"):
        write_dv_puffin([("f.parquet", BitMap64())])


# ---------------------------------------------------------------- corrupt DV blobs

SMALL = serialize_dv(BitMap64([1, 2, 3, HIGH + 7]))
SMALL_VECTOR = SMALL[8:-4]
ARRAY_1 = BitMap([1]).serialize()


def _corrupt_blobs() -> dict[str, bytes]:
    vector = SMALL_VECTOR
    body_end = len(SMALL) - 4
    return {
        "empty": b"",
        "truncated_header": SMALL[:10],
        "truncated_tail": SMALL[:-1],
        "extended": SMALL + b"\x00",
        "length_too_big": struct.pack(">I", len(SMALL) - 7) + SMALL[4:],
        "length_too_small": struct.pack(">I", len(SMALL) - 9) + SMALL[4:],
        "bad_magic": _reframe(vector)[:4] + b"\xd1\xd3\x39\x65" + SMALL[8:],
        "bad_crc": SMALL[:-4] + struct.pack(">I", zlib.crc32(SMALL[4:-4]) ^ 1),
        # A changed roaring byte with the old CRC: only the CRC can notice.
        "roaring_byte_changed": SMALL[: body_end - 2] + b"\x09" + SMALL[body_end - 1 :],
        "count_too_large": _reframe(struct.pack("<Q", 3) + vector[8:]),
        "count_huge": _reframe(struct.pack("<Q", 2**64 - 1) + vector[8:]),
        "count_too_small": _reframe(struct.pack("<Q", 1) + vector[8:]),
        "no_count": _reframe(b"\x00" * 4),
        "keys_unsorted": _reframe(
            struct.pack("<QI", 2, 5) + ARRAY_1 + struct.pack("<I", 2) + ARRAY_1
        ),
        "keys_duplicate": _reframe(
            struct.pack("<QI", 2, 5) + ARRAY_1 + struct.pack("<I", 5) + ARRAY_1
        ),
        "key_sign_bit": _reframe(struct.pack("<QI", 1, 2**31) + ARRAY_1),
        "key_max_unsigned": _reframe(struct.pack("<QI", 1, 2**32 - 1) + ARRAY_1),
        "truncated_in_key": _reframe(struct.pack("<Q", 1) + b"\x00" * 11),
        "bitmap_truncated": _reframe(struct.pack("<QI", 1, 0) + ARRAY_1[:-1]),
        "bitmap_trailing": _reframe(struct.pack("<QI", 1, 0) + ARRAY_1 + b"\x00"),
        "bitmap_bad_cookie": _reframe(struct.pack("<QI", 1, 0) + b"\x00" + ARRAY_1[1:]),
        "array_unsorted": _reframe(
            struct.pack("<QIIIHHI", 1, 0, 12346, 1, 0, 1, 16) + struct.pack("<HH", 9, 3)
        ),
        "array_card_mismatch": _reframe(
            struct.pack("<QIIIHHI", 1, 0, 12346, 1, 0, 2, 16) + struct.pack("<HH", 3, 9)
        ),
        "wrong_offset_header": _reframe(
            struct.pack("<QIIIHHI", 1, 0, 12346, 1, 0, 1, 17) + struct.pack("<HH", 3, 9)
        ),
        "run_card_mismatch": _reframe(
            struct.pack("<QII", 1, 0, 12347) + b"\x01" + struct.pack("<HHHHH", 0, 5, 1, 10, 99)
        ),
    }


def test_hand_built_corrupt_templates_are_otherwise_valid() -> None:
    """The crafted structures above differ from these valid ones in one field only."""
    array = _reframe(struct.pack("<QIIIHHI", 1, 0, 12346, 1, 0, 1, 16) + struct.pack("<HH", 3, 9))
    assert list(deserialize_dv(array, SOURCE)) == [3, 9]
    run = _reframe(
        struct.pack("<QII", 1, 0, 12347) + b"\x01" + struct.pack("<HHHHH", 0, 99, 1, 10, 99)
    )
    assert list(deserialize_dv(run, SOURCE)) == list(range(10, 110))
    keys = _reframe(struct.pack("<QI", 2, 2) + ARRAY_1 + struct.pack("<I", 5) + ARRAY_1)
    assert list(deserialize_dv(keys, SOURCE)) == [2 * HIGH + 1, 5 * HIGH + 1]


@pytest.mark.parametrize("name", sorted(_corrupt_blobs()))
def test_corrupt_blob_is_rejected(name: str) -> None:
    with pytest.raises(CorruptFileError) as info:
        deserialize_dv(_corrupt_blobs()[name], SOURCE)
    assert info.value.source == SOURCE
    assert SOURCE in str(info.value)


def test_changed_roaring_byte_is_caught_by_crc() -> None:
    with pytest.raises(CorruptFileError, match="CRC"):
        deserialize_dv(_corrupt_blobs()["roaring_byte_changed"], SOURCE)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(DV_CASES)),
    mutation_list=st.lists(mutations, min_size=1, max_size=3),
)
def test_fuzzed_dv_never_decodes_wrong(
    name: str, mutation_list: list[tuple[str, int, int]]
) -> None:
    original = (DV_DIR / f"{name}.bin").read_bytes()
    data = original
    for mutation in mutation_list:
        data = mutate(data, mutation)
    try:
        decoded = deserialize_dv(data, SOURCE)
    except CorruptFileError as exc:
        assert exc.source == SOURCE
    else:
        assert decoded == DV_CASES[name]()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutation_list=st.lists(mutations, min_size=1, max_size=3))
def test_fuzzed_dv_puffin_never_yields_a_wrong_bitmap(
    mutation_list: list[tuple[str, int, int]],
) -> None:
    """The footer JSON has no checksum, so a mutation may rename a data file or change a
    blob's type (and so skip it); but every bitmap returned is one that was written."""
    written = {"a.parquet": DV_CASES["small"](), "b.parquet": DV_CASES["high_keys"]()}
    data, _ = write_dv_puffin(list(written.items()))
    for mutation in mutation_list:
        data = mutate(data, mutation)
    try:
        decoded = read_dvs(data, SOURCE)
    except CorruptFileError as exc:
        assert SOURCE in str(exc)
    else:
        for positions in decoded.values():
            assert positions in written.values()


# ---------------------------------------------------------------- corrupt DV Puffin files


def _dv_file_with(properties: dict[str, str], compression: str | None = None) -> bytes:
    writer = PuffinWriter()
    writer.add_blob(
        DV_BLOB_TYPE,
        serialize_dv([1, 2, 3]),
        [ROW_POSITION_FIELD_ID],
        -1,
        -1,
        properties,
        compression,
    )
    return writer.finish()


@pytest.mark.parametrize(
    ("properties", "compression"),
    [
        ({"referenced-data-file": "f", "cardinality": "4"}, None),
        ({"referenced-data-file": "f", "cardinality": "three"}, None),
        ({"referenced-data-file": "f", "cardinality": "-3"}, None),
        ({"cardinality": "3"}, None),
        ({"referenced-data-file": "f", "cardinality": "3"}, "lz4"),
    ],
)
def test_bad_dv_blob_metadata_is_rejected(
    properties: dict[str, str], compression: str | None
) -> None:
    with pytest.raises(CorruptFileError, match=SOURCE):
        read_dvs(_dv_file_with(properties, compression), SOURCE)


def test_missing_cardinality_is_tolerated() -> None:
    assert read_dvs(_dv_file_with({"referenced-data-file": "f"}), SOURCE) == {
        "f": BitMap64([1, 2, 3])
    }


def test_two_dvs_for_one_data_file_are_rejected() -> None:
    writer = PuffinWriter()
    for _ in range(2):
        writer.add_blob(data=serialize_dv([1]), **dv_blob_metadata("f.parquet", 1))
    with pytest.raises(CorruptFileError, match="second deletion vector"):
        read_dvs(writer.finish(), SOURCE)


def test_dv_blob_offset_pointing_elsewhere_is_rejected() -> None:
    data, _ = write_dv_puffin([("a", [1, 2]), ("b", [HIGH + 5])])
    shifted = replace(
        read_footer(data, SOURCE).blobs[1], offset=read_footer(data, SOURCE).blobs[1].offset - 1
    )
    with pytest.raises(CorruptFileError, match=SOURCE):
        deserialize_dv(read_blob(data, shifted, SOURCE), SOURCE)
