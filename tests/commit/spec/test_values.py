import math
import struct
import uuid
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg import conversions

from calving.commit.errors import CorruptFileError, SchemaError
from calving.commit.spec.types import (
    BINARY,
    BOOLEAN,
    DATE,
    DOUBLE,
    FLOAT,
    INT,
    LONG,
    STRING,
    TIMESTAMP,
    TIMESTAMP_NS,
    UNKNOWN,
    UUID,
    decimal,
    fixed,
)
from calving.commit.spec.values import (
    decimal_from_unscaled,
    from_bytes,
    min_big_endian,
    to_bytes,
    truncate_lower_bound,
    truncate_upper_bound,
    unscaled_value,
)
from tests.commit.spec.value_strategies import (
    ALL_TYPES,
    pyiceberg_type,
    utf8_text,
    values_of,
)

typed_values = st.sampled_from(ALL_TYPES).flatmap(lambda t: st.tuples(st.just(t), values_of(t)))


def _same(a, b):
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b and type(a) is type(b)


@settings(max_examples=300)
@given(typed_values)
def test_round_trip_every_type(typed_value):
    ptype, value = typed_value
    data = to_bytes(ptype, value)
    back = from_bytes(ptype, data, "test")
    assert _same(back, value)
    assert to_bytes(ptype, back) == data  # byte for byte


@settings(max_examples=300)
@given(typed_values)
def test_to_bytes_matches_pyiceberg(typed_value):
    ptype, value = typed_value
    assert to_bytes(ptype, value) == conversions.to_bytes(pyiceberg_type(ptype), value)


@settings(max_examples=150)
@given(typed_values)
def test_from_bytes_matches_pyiceberg(typed_value):
    ptype, value = typed_value
    data = to_bytes(ptype, value)
    expected = conversions.from_bytes(pyiceberg_type(ptype), data)
    if ptype.name == "uuid":  # pyiceberg keeps the raw 16 bytes
        expected = uuid.UUID(bytes=expected)
    assert _same(from_bytes(ptype, data), expected)


@pytest.mark.parametrize(
    ("ptype", "value", "hex_bytes"),
    [
        (BOOLEAN, True, "01"),
        (BOOLEAN, False, "00"),
        (INT, 34, "22000000"),
        (LONG, -2, "feffffffffffffff"),
        (DOUBLE, 1.0, "000000000000f03f"),
        (FLOAT, -0.0, "00000080"),
        (DATE, 17486, "4e440000"),
        (STRING, "iceberg", "69636562657267"),
        (
            UUID,
            uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7"),
            "f79c3e09677c4bbda4793f349cb785e7",
        ),
        (decimal(9, 2), Decimal("14.20"), "058c"),
        (decimal(9, 2), Decimal("-1.28"), "80"),
        (decimal(9, 2), Decimal("1.28"), "0080"),
        (decimal(9, 2), Decimal("-1.29"), "ff7f"),
        (decimal(9, 2), Decimal("0.00"), "00"),
        (fixed(3), b"\x00\x01\x02", "000102"),
        (BINARY, b"", ""),
    ],
)
def test_known_encodings(ptype, value, hex_bytes):
    assert to_bytes(ptype, value).hex() == hex_bytes
    assert _same(from_bytes(ptype, bytes.fromhex(hex_bytes)), value)


def test_boolean_reads_any_non_zero_byte_as_true():
    assert from_bytes(BOOLEAN, b"\x07") is True


def test_decimal_trailing_zeros_beyond_scale_are_exact_but_extra_digits_are_refused():
    assert to_bytes(decimal(9, 2), Decimal("14.2000")) == to_bytes(decimal(9, 2), Decimal("14.20"))
    with pytest.raises(SchemaError, match="fractional digits"):
        to_bytes(decimal(9, 2), Decimal("14.201"))


def test_decimal_38_digits_do_not_round_through_the_decimal_context():
    value = Decimal("1234567890123456789012345678.9012345678")
    ptype = decimal(38, 10)
    assert unscaled_value(value, ptype.scale) == 12345678901234567890123456789012345678
    assert from_bytes(ptype, to_bytes(ptype, value)) == value


@settings(max_examples=200)
@given(st.integers(-(2**127), 2**127 - 1))
def test_min_big_endian_is_minimal_and_exact(unscaled):
    data = min_big_endian(unscaled)
    assert int.from_bytes(data, "big", signed=True) == unscaled
    if len(data) > 1:  # one byte fewer would not hold it
        with pytest.raises(OverflowError):
            unscaled.to_bytes(len(data) - 1, "big", signed=True)
    assert decimal_from_unscaled(unscaled, 3).as_tuple().exponent == -3


@pytest.mark.parametrize(
    ("ptype", "data"),
    [
        (BOOLEAN, b""),
        (INT, b"\x00\x00\x00"),
        (LONG, b"\x00" * 5),
        (FLOAT, b"\x00" * 8),
        (DOUBLE, b"\x00" * 7),
        (DATE, b"\x00" * 8),
        (TIMESTAMP, b"\x00" * 9),
        (UUID, b"\x00" * 15),
        (fixed(4), b"\x00" * 5),
        (decimal(9, 2), b""),
        (decimal(38, 0), b"\x01" * 17),
    ],
)
def test_bad_length_is_corrupt_and_names_the_source(ptype, data):
    with pytest.raises(CorruptFileError, match="s3://bucket/m.avro"):
        from_bytes(ptype, data, "s3://bucket/m.avro")


def test_invalid_utf8_is_corrupt():
    with pytest.raises(CorruptFileError, match="manifest-x"):
        from_bytes(STRING, b"\xff\xfe", "manifest-x")


def test_bounds_written_before_a_promotion_still_read():
    assert from_bytes(LONG, struct.pack("<i", -5)) == -5
    assert from_bytes(DOUBLE, struct.pack("<f", 1.5)) == 1.5
    assert from_bytes(TIMESTAMP, struct.pack("<i", -1)) == -86_400_000_000
    assert from_bytes(TIMESTAMP_NS, struct.pack("<i", 2)) == 2 * 86_400_000_000_000


@pytest.mark.parametrize(
    ("ptype", "value"),
    [(INT, 2**31), (LONG, "x"), (STRING, "\ud800"), (fixed(2), b"abc"), (UNKNOWN, None)],
)
def test_unserializable_values_raise_schema_error(ptype, value):
    with pytest.raises(SchemaError):
        to_bytes(ptype, value)


# ---------------------------------------------------------------- bounds

widths = st.integers(1, 6)
max_heavy_text = st.text(
    alphabet=st.sampled_from(["a", "\U0010ffff", "\ud7ff", "\uffff", "\x7f", "é"]), max_size=10
)


@settings(max_examples=300)
@given(st.one_of(utf8_text, max_heavy_text), widths)
def test_string_bounds_enclose_the_value(value, width):
    lower = truncate_lower_bound(STRING, value, width)
    upper = truncate_upper_bound(STRING, value, width)
    encoded = value.encode("utf-8")
    assert len(lower) <= width and lower.encode("utf-8") <= encoded
    if upper is None:
        assert len(value) > width
        assert all(c == "\U0010ffff" for c in value[:width])
        return
    assert len(upper) <= width
    assert upper.encode("utf-8") >= encoded  # encodable: no surrogate produced
    if len(value) > width:  # an upper bound for every value sharing the prefix
        assert upper.encode("utf-8") > value[:width].encode("utf-8") + b"\xff" * 8


@settings(max_examples=300)
@given(
    st.one_of(st.binary(max_size=12), st.lists(st.sampled_from([0, 0xFF, 0xFE])).map(bytes)), widths
)
def test_binary_bounds_enclose_the_value(value, width):
    lower = truncate_lower_bound(BINARY, value, width)
    upper = truncate_upper_bound(BINARY, value, width)
    assert len(lower) <= width and lower <= value
    if upper is None:
        assert value[:width] == b"\xff" * width and len(value) > width
        return
    assert len(upper) <= width and upper >= value
    if len(value) > width:
        assert upper > value[:width] + b"\xff" * 16


@settings(max_examples=200)
@given(utf8_text, widths)
def test_string_upper_bound_matches_pyiceberg_when_no_carry(value, width):
    from pyiceberg.utils.truncate import truncate_upper_bound_text_string

    upper = truncate_upper_bound(STRING, value, width)
    if upper is not None and len(upper) == min(len(value), width):
        last = value[: len(upper)][-1:]
        if not last or ord(last) != 0xD7FF:  # pyiceberg would step into the surrogates
            assert upper == truncate_upper_bound_text_string(value, width)


@pytest.mark.parametrize(
    ("value", "width", "upper"),
    [
        ("iceberg", 3, "icf"),
        ("ice", 3, "ice"),
        ("a\U0010ffffz", 2, "b"),
        ("\U0010ffff\U0010ffffx", 2, None),
        ("a\ud7ffz", 2, "a\ue000"),
    ],
)
def test_string_upper_bound_examples(value, width, upper):
    assert truncate_upper_bound(STRING, value, width) == upper


@pytest.mark.parametrize(
    ("value", "width", "upper"),
    [(b"\x01\x02\x03", 2, b"\x01\x03"), (b"\x01\xff\x00", 2, b"\x02"), (b"\xff\xff\x00", 2, None)],
)
def test_binary_upper_bound_examples(value, width, upper):
    assert truncate_upper_bound(BINARY, value, width) == upper


def test_other_types_pass_unchanged_and_width_must_be_positive():
    assert truncate_upper_bound(LONG, 5, 1) == 5
    assert truncate_lower_bound(fixed(4), b"abcd", 2) == b"abcd"
    with pytest.raises(SchemaError):
        truncate_lower_bound(STRING, "abc", 0)
