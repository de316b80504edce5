import struct

import mmh3
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.spec.murmur3 import hash_long, hash_long_array, murmur3_32

INT64 = st.integers(-(2**63), 2**63 - 1)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0),
        (bytes([0, 1, 2, 3]), -188683207),  # spec Appendix B, fixed/binary
        (b"iceberg", 1210000089),  # spec Appendix B, string
        (struct.pack("<q", 34), 2017239379),  # spec Appendix B, int/long
    ],
)
def test_spec_vectors(data, expected):
    assert murmur3_32(data) == expected


@settings(max_examples=200)
@given(st.binary(max_size=67))
def test_matches_mmh3_on_every_tail_length(data):
    assert murmur3_32(data) == mmh3.hash(data, 0, signed=True)


def test_accepts_bytearray_and_memoryview():
    data = b"calving-murmur"
    assert murmur3_32(bytearray(data)) == murmur3_32(memoryview(data)) == mmh3.hash(data)


@settings(max_examples=200)
@given(INT64)
def test_hash_long_is_hash_of_little_endian_bytes(value):
    assert hash_long(value) == mmh3.hash(struct.pack("<q", value))


@settings(max_examples=50)
@given(st.lists(st.one_of(st.none(), INT64), max_size=40))
def test_hash_long_array_matches_scalar_and_keeps_nulls(values):
    out = hash_long_array(pa.array(values, pa.int64()))
    assert out.type == pa.int32()
    assert out.to_pylist() == [None if v is None else hash_long(v) for v in values]


def test_hash_long_array_promotes_int32():
    values = [-(2**31), -1, 0, 34, 2**31 - 1]
    out = hash_long_array(pa.array(values, pa.int32()))
    assert out.to_pylist() == [hash_long(v) for v in values]
