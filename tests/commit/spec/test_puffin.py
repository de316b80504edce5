"""Puffin reader/writer: round trips, recorded vectors, corrupt input, pyiceberg as oracle."""

from __future__ import annotations

import json
import struct

import lz4.frame
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calving.commit.errors import CorruptFileError, UnsupportedFeatureError
from calving.commit.spec.puffin import (
    CREATED_BY,
    MAGIC,
    BlobMetadata,
    PuffinFile,
    PuffinWriter,
    footer_size_from_tail,
    parse_footer,
    read_blob,
    read_footer,
    serialize_footer,
)
from tests.commit.spec.puffin_vectors import PUFFIN_CASES, PUFFIN_DIR

SOURCE = "s3://bucket/t/metadata/x.puffin"


def _raw_file(
    payload: bytes, blob_area: bytes = b"", flags: int = 0, size: int | None = None
) -> bytes:
    """A Puffin file assembled by hand around an arbitrary footer payload."""
    size = len(payload) if size is None else size
    return MAGIC + blob_area + MAGIC + payload + struct.pack("<iI", size, flags) + MAGIC


def _blob_json(**overrides: object) -> dict[str, object]:
    blob: dict[str, object] = {
        "type": "t",
        "fields": [1],
        "snapshot-id": 1,
        "sequence-number": 1,
        "offset": 4,
        "length": 3,
    }
    blob.update(overrides)
    return {k: v for k, v in blob.items() if v is not None}


def _json(obj: object) -> bytes:
    return json.dumps(obj).encode()


def _rewritten(data: bytes, puffin: PuffinFile) -> bytes:
    """The file again from its blob bytes and a freshly serialized footer."""
    footer_size = footer_size_from_tail(data, SOURCE)
    return data[: len(data) - footer_size] + serialize_footer(puffin)


# ---------------------------------------------------------------- round trips

blob_specs = st.lists(
    st.tuples(
        st.sampled_from(["deletion-vector-v1", "apache-datasketches-theta-v1", "x-ü-blob"]),
        st.binary(max_size=300),
        st.lists(st.integers(-(2**31), 2**31 - 1), max_size=3),
        st.integers(-1, 2**63 - 1),
        st.integers(-1, 2**63 - 1),
        st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=3),
        st.sampled_from([None, "lz4", "zstd"]),
    ),
    max_size=5,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    blobs=blob_specs,
    compress_footer=st.booleans(),
    properties=st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
)
def test_round_trip(
    blobs: list[tuple[str, bytes, list[int], int, int, dict[str, str], str | None]],
    compress_footer: bool,
    properties: dict[str, str],
) -> None:
    writer = PuffinWriter()
    written = [writer.add_blob(t, d, f, s, q, p, c) for t, d, f, s, q, p, c in blobs]
    data = writer.finish(compress_footer=compress_footer, properties=properties)

    puffin = read_footer(data, SOURCE)
    assert puffin.blobs == tuple(written)
    assert puffin.footer_compressed == compress_footer
    assert puffin.properties["created-by"] == CREATED_BY
    expected_props = {k: v for k, v in properties.items() if k != "created-by"}
    assert {k: v for k, v in puffin.properties.items() if k != "created-by"} == expected_props
    for blob, (_, payload, *_rest) in zip(puffin.blobs, blobs):
        assert read_blob(data, blob, SOURCE) == payload
    # Byte-exact: the footer re-serializes to the same bytes.
    assert _rewritten(data, puffin) == data

    # A reader holding only the tail of the file gets the same footer.
    footer_size = footer_size_from_tail(data[-12:], SOURCE)
    assert parse_footer(data[-footer_size:], len(data), SOURCE) == puffin


def test_offsets_are_contiguous_after_magic() -> None:
    writer = PuffinWriter()
    first = writer.add_blob("a", b"12345", [1], -1, -1)
    second = writer.add_blob("b", b"678", [2], -1, -1)
    data = writer.finish()
    assert (first.offset, first.length, second.offset, second.length) == (4, 5, 9, 3)
    assert data[:12] == b"PFA112345678"
    assert data[12:16] == MAGIC


def test_footer_json_is_compact_with_fixed_key_order() -> None:
    writer = PuffinWriter()
    writer.add_blob("t", b"x", [7], 5, 6, {"k": "v"}, "lz4")
    data = writer.finish(properties={"z": "1"})
    size = struct.unpack("<i", data[-12:-8])[0]
    payload = data[-12 - size : -12]
    assert payload.startswith(b'{"blobs":[{"type":"t","fields":[7],"snapshot-id":5,')
    assert b'"compression-codec":"lz4","properties":{"k":"v"}}]' in payload
    assert payload.endswith(b',"properties":{"created-by":"' + CREATED_BY.encode() + b'","z":"1"}}')
    assert b", " not in payload and b": " not in payload


def test_writer_keeps_its_own_created_by() -> None:
    data = PuffinWriter().finish(properties={"created-by": "someone else"})
    assert read_footer(data, SOURCE).properties == {"created-by": CREATED_BY}


# ---------------------------------------------------------------- recorded vectors


@pytest.mark.parametrize("name", sorted(PUFFIN_CASES))
def test_recorded_vector(name: str) -> None:
    recorded = (PUFFIN_DIR / f"{name}.puffin").read_bytes()
    assert PUFFIN_CASES[name]() == recorded
    puffin = read_footer(recorded, name)
    assert _rewritten(recorded, puffin) == recorded
    assert puffin.footer_compressed == ("compressed" in name)


def test_recorded_mixed_blobs_content() -> None:
    recorded = (PUFFIN_DIR / "mixed_blobs.puffin").read_bytes()
    puffin = read_footer(recorded, "mixed")
    sketch, raw = puffin.blobs
    assert sketch == BlobMetadata(
        "some-sketch-v1", (1, 2), 42, 7, 4, sketch.length, "lz4", {"ndv": "3"}
    )
    assert read_blob(recorded, sketch, "mixed") == b"sketch bytes " * 20
    assert read_blob(recorded, raw, "mixed") == b"\x00\x01\x02"
    assert puffin.properties == {"created-by": CREATED_BY, "note": "mixed"}


# ---------------------------------------------------------------- pyiceberg oracle


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blobs=blob_specs)
def test_pyiceberg_reads_our_files(
    blobs: list[tuple[str, bytes, list[int], int, int, dict[str, str], str | None]],
) -> None:
    from pyiceberg.table.puffin import PuffinFile as PyicebergPuffin

    writer = PuffinWriter()
    for t, d, f, s, q, p, c in blobs:
        # pyiceberg 0.12 reads neither LZ4 blobs nor compressed footers.
        writer.add_blob(t, d, f, s, q, p, None if c == "lz4" else c)
    data = writer.finish()
    theirs = PyicebergPuffin(data)
    assert theirs.footer.properties == {"created-by": CREATED_BY}
    ours = read_footer(data, SOURCE)
    assert len(theirs.footer.blobs) == len(ours.blobs)
    for their_blob, our_blob in zip(theirs.footer.blobs, ours.blobs):
        assert (their_blob.type, tuple(their_blob.fields)) == (our_blob.type, our_blob.fields)
        assert (their_blob.offset, their_blob.length) == (our_blob.offset, our_blob.length)
        assert their_blob.snapshot_id == our_blob.snapshot_id
        assert their_blob.sequence_number == our_blob.sequence_number
        assert their_blob.compression_codec == our_blob.compression_codec
        assert their_blob.properties == dict(our_blob.properties)
        assert theirs.get_blob_payload(their_blob) == read_blob(data, our_blob, SOURCE)


# ---------------------------------------------------------------- corrupt input

VALID = _raw_file(_json({"blobs": [_blob_json()]}), blob_area=b"abc")


def _corrupt_cases() -> dict[str, bytes]:
    good_payload = _json({"blobs": [_blob_json()]})
    compressed = lz4.frame.compress(good_payload)
    return {
        "empty": b"",
        "too_short": MAGIC * 4,
        "bad_start_magic": b"PFA2" + VALID[4:],
        "bad_end_magic": VALID[:-4] + b"PFA0",
        "bad_footer_magic": _raw_file(good_payload, b"abc").replace(b"abcPFA1", b"abcPFA0"),
        "size_beyond_file": _raw_file(good_payload, b"abc", size=len(good_payload) + 4),
        "size_eats_start_magic": _raw_file(good_payload, b"abc", size=len(good_payload) + 7),
        "size_huge": _raw_file(good_payload, b"abc", size=2**31 - 1),
        "size_negative": _raw_file(good_payload, b"abc", size=-1),
        "unknown_flag_bit": _raw_file(good_payload, b"abc", flags=0x02),
        "unknown_flag_byte": _raw_file(good_payload, b"abc", flags=0x0100),
        "not_json": _raw_file(b"{blobs:", b"abc"),
        "not_utf8": _raw_file(b'{"blobs":[],"x":"\xff"}'),
        "json_array": _raw_file(b"[]"),
        "no_blobs_key": _raw_file(b"{}"),
        "blobs_not_list": _raw_file(_json({"blobs": {}})),
        "blob_not_object": _raw_file(_json({"blobs": [1]})),
        "missing_type": _raw_file(_json({"blobs": [_blob_json(type=None)]}), b"abc"),
        "missing_offset": _raw_file(_json({"blobs": [_blob_json(offset=None)]}), b"abc"),
        "missing_fields": _raw_file(_json({"blobs": [_blob_json(fields=None)]}), b"abc"),
        "string_length": _raw_file(_json({"blobs": [_blob_json(length="3")]}), b"abc"),
        "bool_snapshot": _raw_file(_json({"blobs": [_blob_json(**{"snapshot-id": True})]})),
        "float_field": _raw_file(_json({"blobs": [_blob_json(fields=[1.5])]}), b"abc"),
        "codec_not_string": _raw_file(
            _json({"blobs": [_blob_json(**{"compression-codec": 4})]}), b"abc"
        ),
        "blob_property_not_string": _raw_file(
            _json({"blobs": [_blob_json(properties={"a": 1})]}), b"abc"
        ),
        "file_properties_not_object": _raw_file(_json({"blobs": [], "properties": []})),
        "blob_in_leading_magic": _raw_file(_json({"blobs": [_blob_json(offset=2)]}), b"abc"),
        "blob_into_footer": _raw_file(_json({"blobs": [_blob_json(length=4)]}), b"abc"),
        "blob_negative_length": _raw_file(_json({"blobs": [_blob_json(length=-1)]}), b"abc"),
        "lz4_garbage": _raw_file(b"\x04\x22\x4d\x18garbage", flags=1),
        "lz4_truncated": _raw_file(compressed[:-3], b"abc", flags=1),
        "lz4_trailing": _raw_file(compressed + b"\x00", b"abc", flags=1),
        "lz4_not_lz4": _raw_file(good_payload, b"abc", flags=1),
    }


def test_valid_hand_built_file_reads() -> None:
    puffin = read_footer(VALID, SOURCE)
    assert read_blob(VALID, puffin.blobs[0], SOURCE) == b"abc"
    assert puffin.properties == {}


@pytest.mark.parametrize("name", sorted(_corrupt_cases()))
def test_corrupt_file_is_rejected(name: str) -> None:
    data = _corrupt_cases()[name]
    with pytest.raises(CorruptFileError) as info:
        read_footer(data, SOURCE)
    assert info.value.source == SOURCE
    assert SOURCE in str(info.value)


def test_tail_reader_errors() -> None:
    with pytest.raises(CorruptFileError, match="too short"):
        footer_size_from_tail(b"PFA1", SOURCE)
    size = footer_size_from_tail(VALID[-12:], SOURCE)
    with pytest.raises(CorruptFileError, match=SOURCE):
        parse_footer(VALID[-size + 1 :], len(VALID), SOURCE)
    with pytest.raises(CorruptFileError, match="does not fit"):
        parse_footer(VALID[-size:], size, SOURCE)


def test_corrupt_compressed_blob() -> None:
    writer = PuffinWriter()
    blob = writer.add_blob("t", b"hello world" * 10, [1], 1, 1, compression="lz4")
    data = bytearray(writer.finish())
    data[blob.offset + blob.length - 2] ^= 0xFF  # inside the LZ4 frame's data
    with pytest.raises(CorruptFileError, match=SOURCE):
        read_blob(bytes(data), blob, SOURCE)
    truncated = BlobMetadata("t", (1,), 1, 1, blob.offset, blob.length - 1, "lz4")
    with pytest.raises(CorruptFileError, match=SOURCE):
        read_blob(bytes(data), truncated, SOURCE)


def test_blob_beyond_data_is_rejected() -> None:
    beyond = BlobMetadata("t", (1,), 1, 1, 4, len(VALID), None)
    with pytest.raises(CorruptFileError, match=SOURCE):
        read_blob(VALID, beyond, SOURCE)


def test_unknown_codec_is_unsupported() -> None:
    data = _raw_file(_json({"blobs": [_blob_json(**{"compression-codec": "brotli"})]}), b"abc")
    blob = read_footer(data, SOURCE).blobs[0]
    with pytest.raises(UnsupportedFeatureError, match="brotli"):
        read_blob(data, blob, SOURCE)
    with pytest.raises(UnsupportedFeatureError):
        PuffinWriter().add_blob("t", b"x", [1], 1, 1, compression="brotli")


mutations = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.just(0)),
    st.tuples(st.just("extend"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.just(0)),
)


def mutate(data: bytes, mutation: tuple[str, int, int]) -> bytes:
    kind, where, value = mutation
    index = where % (len(data) + 1)
    if kind == "flip" and data:
        index %= len(data)
        return data[:index] + bytes([data[index] ^ value]) + data[index + 1 :]
    if kind == "truncate":
        return data[:index]
    if kind == "extend":
        return data[:index] + bytes([value]) + data[index:]
    return data[:index] + data[index + 1 :]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(PUFFIN_CASES)),
    mutation_list=st.lists(mutations, min_size=1, max_size=3),
)
def test_fuzzed_files_fail_only_with_typed_errors(
    name: str, mutation_list: list[tuple[str, int, int]]
) -> None:
    data = (PUFFIN_DIR / f"{name}.puffin").read_bytes()
    for mutation in mutation_list:
        data = mutate(data, mutation)
    try:
        puffin = read_footer(data, SOURCE)
        for blob in puffin.blobs:
            read_blob(data, blob, SOURCE)
    except CorruptFileError as exc:
        assert exc.source == SOURCE
    except UnsupportedFeatureError as exc:  # a mutated codec name
        assert SOURCE in str(exc)
