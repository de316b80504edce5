"""Canonical key bytes, their Arrow input forms, null and type errors, hash stability."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.errors import SchemaError, Terminal
from calving.commit.index.keys import (
    DEFAULT_HASHER,
    ByteKeys,
    IntKeys,
    KeyCodec,
    KeyTypeError,
    NullKeyError,
    partition_of,
)
from calving.commit.spec.types import (
    BINARY,
    BOOLEAN,
    DATE,
    DOUBLE,
    INT,
    LONG,
    STRING,
    TIMESTAMPTZ,
    UUID,
    fixed,
)
from calving.commit.spec.types import (
    decimal as decimal_type,
)


def _rows(keys: ByteKeys) -> list[bytes]:
    return [bytes(keys.data[keys.offsets[i] : keys.offsets[i + 1]]) for i in range(len(keys))]


def _encode(types, **columns) -> ByteKeys:
    keys = KeyCodec(types).encode(pa.table(columns))
    assert isinstance(keys, ByteKeys)
    return keys


def test_one_integer_column_is_kept_as_int64_values() -> None:
    keys = KeyCodec([LONG]).encode(pa.table({"id": pa.array([-(2**63), 0, 2**63 - 1])}))
    assert isinstance(keys, IntKeys)
    assert keys.values.tolist() == [-(2**63), 0, 2**63 - 1]


def test_integers_are_big_endian_with_the_sign_bit_flipped() -> None:
    keys = _encode([LONG, LONG], a=pa.array([-1, 0]), b=pa.array([1, -(2**63)]))
    assert _rows(keys) == [
        bytes.fromhex("7fffffffffffffff") + bytes.fromhex("8000000000000001"),
        bytes.fromhex("8000000000000000") + bytes.fromhex("0000000000000000"),
    ]


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=30))
@settings(max_examples=50, deadline=None)
def test_integer_bytes_sort_like_the_values(values: list[int]) -> None:
    rows = _rows(
        _encode([LONG, BOOLEAN], a=pa.array(values, pa.int64()), b=pa.array([True] * len(values)))
    )
    assert [v for _, v in sorted(zip(rows, values))] == sorted(values)


def test_strings_carry_a_length_except_in_the_last_column() -> None:
    keys = _encode([STRING, STRING], a=["a", "ab", ""], b=["bc", "c", "é"])
    assert _rows(keys) == [
        b"\x00\x00\x00\x01abc",
        b"\x00\x00\x00\x02abc",
        b"\x00\x00\x00\x00\xc3\xa9",
    ]
    assert _rows(_encode([STRING], k=["é", ""])) == ["é".encode(), b""]


def test_string_then_long_layout() -> None:
    keys = _encode([STRING, LONG], k=["a"], i=[7])
    assert _rows(keys) == [b"\x00\x00\x00\x01a" + bytes.fromhex("8000000000000007")]


def test_int_and_long_encode_alike_so_type_promotion_keeps_the_index() -> None:
    as_int = _encode([INT, STRING], a=pa.array([-5, 7], pa.int32()), b=["x", "y"])
    as_long = _encode([LONG, STRING], a=pa.array([-5, 7], pa.int64()), b=["x", "y"])
    assert _rows(as_int) == _rows(as_long)
    assert KeyCodec([INT, STRING]).encoding_class() == KeyCodec([LONG, STRING]).encoding_class()


def test_decimal_bytes_keep_across_precision_and_sort_by_value() -> None:
    values = [decimal.Decimal("-1.50"), decimal.Decimal("0.00"), decimal.Decimal("2.25")]
    narrow = _encode(
        [decimal_type(9, 2), BOOLEAN], a=pa.array(values, pa.decimal128(9, 2)), b=[True] * 3
    )
    wide = _encode(
        [decimal_type(30, 2), BOOLEAN], a=pa.array(values, pa.decimal128(30, 2)), b=[True] * 3
    )
    assert _rows(narrow) == _rows(wide)
    assert _rows(narrow) == sorted(_rows(narrow))
    assert _rows(narrow)[1] == b"\x80" + b"\x00" * 15 + b"\x01"


def test_uuid_fixed_binary_and_boolean_bytes() -> None:
    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    keys = _encode(
        [UUID, fixed(3), BOOLEAN, BINARY],
        u=pa.array([u.bytes], pa.binary(16)),
        f=pa.array([b"xyz"], pa.binary(3)),
        b=[True],
        c=pa.array([b"\x00\x01"], pa.binary()),
    )
    assert _rows(keys) == [u.bytes + b"xyz" + b"\x01" + b"\x00\x01"]
    ext = _encode([UUID, BOOLEAN], u=pa.array([u.bytes], pa.uuid()), b=[False])
    assert _rows(ext) == [u.bytes + b"\x00"]


def test_temporal_keys_in_iceberg_units() -> None:
    ts = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    millis = pa.array([ts], pa.timestamp("ms", tz="UTC"))
    keys = KeyCodec([TIMESTAMPTZ]).encode(pa.table({"ts": millis}))
    assert isinstance(keys, IntKeys)
    assert keys.values.tolist() == [int(ts.timestamp()) * 1_000_000]
    days = KeyCodec([DATE]).encode(pa.table({"d": pa.array([dt.date(1970, 1, 3)])}))
    assert days.values.tolist() == [2]  # type: ignore[union-attr]  # encode returns IntKeys | BytesKeys; a DATE key is IntKeys


def test_arrow_forms_of_the_same_strings_encode_and_hash_alike() -> None:
    values = ["alpha", "", "a-much-longer-key-than-eight-bytes", "é", "alpha"]
    forms = [
        pa.array(values, pa.string()),
        pa.array(values, pa.large_string()),
        pa.array(values, pa.string()).dictionary_encode(),
        pa.chunked_array([values[:2], values[2:]], pa.string()),
        pa.array(["junk"] + values + ["more junk"], pa.string()).slice(1, len(values)),
    ]
    codec = KeyCodec([STRING])
    encoded = [codec.encode(pa.table({"k": f})) for f in forms]
    for keys in encoded:
        assert _rows(keys) == [v.encode() for v in values]  # type: ignore[arg-type]  # encode returns IntKeys | BytesKeys; a STRING key is BytesKeys
        assert DEFAULT_HASHER.hash(keys).tolist() == DEFAULT_HASHER.hash(encoded[0]).tolist()
    hashes = DEFAULT_HASHER.hash(encoded[0])
    assert hashes[0] == hashes[4] and len(set(hashes.tolist())) == 4


def test_hashes_are_pinned_so_partitions_agree_across_processes() -> None:
    keys = KeyCodec([STRING]).encode(pa.table({"k": ["customer-1", "", "é"]}))
    hashes = DEFAULT_HASHER.hash(keys)
    assert [hex(h) for h in hashes.tolist()] == [
        "0x6e6ad191f65a7c89",
        "0x6393d51c06c618dc",
        "0x29d28aa5cae1c59c",
    ]
    assert partition_of(hashes, 16).tolist() == [9, 0, 5]
    assert partition_of(DEFAULT_HASHER.hash(IntKeys(np.array([5], np.int64))), 1).tolist() == [0]


def test_distinct_keys_get_distinct_hashes_at_scale() -> None:
    keys = KeyCodec([STRING]).encode(pa.table({"k": [f"k{i}" for i in range(200_000)]}))
    assert len(np.unique(DEFAULT_HASHER.hash(keys))) == 200_000


def test_null_keys_are_rejected_with_a_typed_error() -> None:
    codec = KeyCodec([STRING, LONG], field_ids=[2, 1])
    with pytest.raises(NullKeyError) as info:
        codec.encode(pa.table({"r": ["a", "b", "c"], "id": pa.array([1, None, None], pa.int64())}))
    assert (info.value.column, info.value.field_id, info.value.row, info.value.count) == (
        1,
        1,
        1,
        2,
    )
    assert isinstance(info.value, Terminal)


def test_unfit_types_and_values_are_rejected() -> None:
    with pytest.raises(SchemaError):
        KeyCodec([DOUBLE])
    with pytest.raises(KeyTypeError):
        KeyCodec([LONG]).encode(pa.table({"id": ["not a number"]}))
    with pytest.raises(KeyTypeError):
        KeyCodec([INT, STRING]).encode(pa.table({"i": pa.array([2**40]), "s": ["x"]}))
    with pytest.raises(KeyTypeError):
        KeyCodec([LONG]).encode(pa.table({"a": [1], "b": [2]}))


def test_byte_keys_take_concat_and_arrow_round_trip() -> None:
    keys = _encode([STRING], k=["x", "", "yyyyyyyyyyyy", "z"])
    taken = keys.take(np.array([2, 0, 1]))
    assert _rows(taken) == [b"yyyyyyyyyyyy", b"x", b""]
    joined = ByteKeys.concat([keys, taken])
    assert _rows(joined) == _rows(keys) + _rows(taken)
    assert _rows(ByteKeys.from_arrow(joined.to_arrow())) == _rows(joined)
    assert joined.equal_at(np.array([0, 1, 2]), taken, np.array([1, 2, 0])).tolist() == [
        True,
        True,
        True,
    ]
    assert joined.equal_at(np.array([0, 3]), taken, np.array([2, 0])).tolist() == [False, False]


def test_a_key_hashes_the_same_whatever_batch_it_comes_in() -> None:
    codec = KeyCodec([STRING])
    uniform = ["abcdefghij", "klmnopqrst", "0123456789"]  # one length: the 2-d fast path
    short = ["ab", "cd"]  # one word each: the short path
    mixed = [*uniform, *short, "a-key-of-another-length"]
    alone = [DEFAULT_HASHER.hash(codec.encode(pa.table({"k": [v]})))[0] for v in mixed]
    together = DEFAULT_HASHER.hash(codec.encode(pa.table({"k": mixed}))).tolist()
    assert together == alone
    assert DEFAULT_HASHER.hash(codec.encode(pa.table({"k": uniform}))).tolist() == together[:3]
    assert DEFAULT_HASHER.hash(codec.encode(pa.table({"k": short}))).tolist() == together[3:5]


def test_fixed_width_keys_keep_no_offsets_and_mix_with_variable_ones() -> None:
    fixed_keys = _encode([STRING], k=[f"customer-{i:012d}" for i in range(1000)])
    assert fixed_keys.width == 21
    assert fixed_keys.nbytes == len(fixed_keys.data)  # no per-key offsets
    varied = _encode([STRING], k=["x", "", "customer-000000000007", "zz"])
    assert varied.width is None
    assert varied.nbytes == len(varied.data) + 5 * 4  # int32 offsets

    taken = fixed_keys.take(np.array([7, 3]))
    assert taken.width == 21
    assert _rows(taken) == [b"customer-000000000007", b"customer-000000000003"]
    joined = ByteKeys.concat([taken, varied])
    assert joined.width is None
    assert _rows(joined) == _rows(taken) + _rows(varied)
    assert _rows(ByteKeys.from_arrow(fixed_keys.to_arrow())) == _rows(fixed_keys)
    # The same key equal across layouts, and hashed alike in both.
    assert fixed_keys.equal_at(np.array([7, 7]), varied, np.array([2, 0])).tolist() == [True, False]
    assert DEFAULT_HASHER.hash(fixed_keys)[7] == DEFAULT_HASHER.hash(varied)[2]
