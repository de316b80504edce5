"""coerce: lossless conversions only, errors name the field path."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.errors import ConfigError
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import (
    BINARY,
    DATE,
    DOUBLE,
    FLOAT,
    INT,
    LONG,
    STRING,
    TIME,
    TIMESTAMP,
    TIMESTAMP_NS,
    TIMESTAMPTZ,
    UUID,
    ListType,
    MapType,
    NestedField,
    StructType,
    decimal,
    fixed,
)
from calving.ingest.decode.batch import RowConverter
from calving.ingest.decode.coerce import (
    CoercionError,
    CoercionOptions,
    EpochTime,
    days_from_civil,
    parse_timestamp,
    primitive_converter,
)
from calving.ingest.decode.json_values import arrow_gate_pattern

OPTS = CoercionOptions()


def conv(t, options=OPTS):
    return primitive_converter(t, options)


def rejects(t, value, options=OPTS, match=None):
    with pytest.raises(CoercionError, match=match):
        conv(t, options)(value)


def test_integers_are_range_checked_and_never_bools_or_floats():
    assert conv(INT)(2**31 - 1) == 2**31 - 1
    rejects(INT, 2**31, match="out of range for int")
    assert conv(LONG)(-(2**63)) == -(2**63)
    rejects(LONG, 2**63)
    rejects(LONG, True)
    rejects(LONG, 1.0)
    rejects(LONG, "1")


def test_doubles_take_ints_and_exact_decimals():
    assert conv(DOUBLE)(3) == 3.0
    assert conv(DOUBLE)(Decimal("0.1")) == 0.1
    rejects(DOUBLE, "1.5")
    rejects(DOUBLE, False)
    rejects(FLOAT, 1e39, match="out of range for float")
    assert conv(FLOAT)(float("inf")) == float("inf")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (Decimal("1.2"), Decimal("1.20")),
        (5, Decimal("5.00")),
        ("-0.05", Decimal("-0.05")),
        ("1e2", Decimal("100.00")),
        (".5", Decimal("0.50")),
        (12.25, Decimal("12.25")),
        (Decimal("99999999.99"), Decimal("99999999.99")),
    ],
)
def test_decimal_accepts_exact_values(value, expected):
    got = conv(decimal(10, 2))(value)
    assert got == expected and got.as_tuple().exponent == -2


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (Decimal("1.234"), "more than 2 decimal places"),
        ("100000000.00", "more than 10 digits"),
        ("1_000", "not a decimal number"),
        (" 1", "not a decimal number"),
        ("NaN", "not a decimal number"),
        (float("nan"), "finite"),
        (True, "expected decimal"),
    ],
)
def test_decimal_rejects_lossy_values(value, why):
    rejects(decimal(10, 2), value, match=why)


def test_timestamps_follow_the_offset_rules():
    us = conv(TIMESTAMPTZ)
    assert us("1970-01-01T00:00:01Z") == 1_000_000
    assert us("1970-01-01T02:00:00+02:00") == 0
    assert us("1970-01-01 00:00:00.5-0100") == 3_600_500_000
    rejects(TIMESTAMPTZ, "1970-01-01T00:00:00", match="no UTC offset")
    lenient = CoercionOptions(naive_timestamps_as_utc=True)
    assert conv(TIMESTAMPTZ, lenient)("1970-01-01T00:00:00") == 0
    naive = conv(TIMESTAMP)
    assert (
        naive("2024-02-29T12:00:00")
        == days_from_civil(2024, 2, 29) * 86_400_000_000 + 43_200 * 10**6
    )
    assert naive("2024-02-29T12:00:00Z") == naive("2024-02-29T12:00:00")
    rejects(TIMESTAMP, "2024-02-29T12:00:00+01:00", match="without time zone")
    rejects(TIMESTAMP, "2023-02-29T12:00:00", match="day 29 out of range")
    rejects(TIMESTAMP, "2024-01-01T00:00:00.0000001", match="more precision")
    assert naive("2024-01-01T00:00:00.1234560") == naive("2024-01-01T00:00:00.123456")
    assert conv(TIMESTAMP_NS)("1970-01-01T00:00:00.000000001") == 1
    rejects(TIMESTAMP, "2024-01-01", match="not an ISO-8601 timestamp")
    rejects(TIMESTAMP, 1_700_000_000, match="expected timestamp")


def test_timestamps_from_objects_and_epoch_counts():
    aware = dt.datetime(2024, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert conv(TIMESTAMPTZ)(aware) == conv(TIMESTAMPTZ)("2024-01-01T00:00:00Z")
    rejects(TIMESTAMP, aware, match="UTC offset")
    assert conv(TIMESTAMP)(EpochTime(1500, "ms")) == 1_500_000
    rejects(TIMESTAMP, EpochTime(1, "ns"), match="more precision")
    assert conv(TIMESTAMP_NS)(EpochTime(1, "ns")) == 1
    auto = CoercionOptions(epoch_unit="auto")
    assert conv(TIMESTAMP, auto)(1_700_000_000_123) == 1_700_000_000_123_000
    assert conv(TIMESTAMP, auto)(1_700_000_000_123_456) == 1_700_000_000_123_456
    assert conv(TIMESTAMP, CoercionOptions(epoch_unit="ms"))(5) == 5000


def test_dates_and_times():
    assert conv(DATE)("1970-01-02") == 1
    assert conv(DATE)(dt.date(1969, 12, 31)) == -1
    assert conv(DATE)(EpochTime(19000, "D")) == 19000
    rejects(DATE, dt.datetime(2024, 1, 1))
    rejects(DATE, 5)
    assert conv(DATE, CoercionOptions(epoch_unit="auto"))(5) == 5
    assert conv(TIME)("01:00:00.25") == 3_600_250_000
    assert conv(TIME)(dt.time(0, 0, 1)) == 1_000_000
    assert conv(TIME)(EpochTime(1, "ms")) == 1000
    rejects(TIME, "24:00:00", match="out of range")
    rejects(TIME, EpochTime(86_400_000, "ms"), match="out of range")


def test_binary_uuid_fixed():
    assert conv(BINARY)("AAE=") == b"\x00\x01"
    assert conv(BINARY)(b"\x01") == b"\x01"
    rejects(BINARY, "not base64!", match="base64")
    u = uuid.uuid4()
    assert conv(UUID)(str(u)) == u.bytes == conv(UUID)(u)
    rejects(UUID, "{" + str(u) + "}", match="canonical")
    assert conv(fixed(2))("AAE=") == b"\x00\x01"
    rejects(fixed(3), "AAE=", match="expected 3 bytes")


def test_nested_errors_name_the_path():
    schema = Schema(
        (
            NestedField(1, "a", StructType((NestedField(2, "b", ListType(3, LONG)),))),
            NestedField(4, "m", MapType(5, INT, 6, STRING, value_required=True)),
        )
    )
    rc = RowConverter(schema)
    with pytest.raises(CoercionError) as info:
        rc.convert({"a": {"b": [1, "x"]}})
    assert info.value.describe().startswith("field 'a.b[1]': expected long")
    assert rc.convert({"m": {"1": "x", "-2": "y"}}) == [None, [(1, "x"), (-2, "y")]]
    with pytest.raises(CoercionError, match="required map value"):
        rc.convert({"m": {"1": None}})
    with pytest.raises(CoercionError, match="expected int"):
        rc.convert({"m": {"x": "y"}})


def test_unknown_fields_are_collected_with_types():
    schema = Schema((NestedField(1, "a", StructType((NestedField(2, "b", LONG),))),))
    unknown: dict = {}
    RowConverter(schema).convert({"a": {"b": 1, "z": [1]}, "q": 1.5, "r": None}, unknown)
    assert unknown == {"a.z": {"list"}, "q": {"double"}, "r": {"null"}}


def test_case_insensitive_matching():
    schema = Schema((NestedField(1, "UserId", LONG, required=True),))
    rc = RowConverter(schema, CoercionOptions(case_insensitive=True))
    assert rc.convert({"userid": 5}) == [5]
    with pytest.raises(CoercionError, match="twice"):
        rc.convert({"userid": 5, "USERID": 6})
    with pytest.raises(CoercionError, match="required"):
        RowConverter(schema).convert({"userid": 5})


def test_meta_column_names_are_reserved_and_bad_options_refused():
    with pytest.raises(ConfigError):
        RowConverter(Schema((NestedField(1, "_op", LONG),)))
    with pytest.raises(ConfigError):
        CoercionOptions(epoch_unit="s")


# Arrow's cast is used for strings matching the gate pattern; it must agree with coerce.
_digits = st.integers(0, 99).map(lambda n: f"{n:02d}")
_timestamps = st.builds(
    lambda y, mo, d, h, mi, s, frac, sep, off: (
        f"{y:04d}-{mo:02d}-{d:02d}{sep}{h}:{mi}{s}{frac}{off}"
    ),
    st.integers(1, 9999),
    st.integers(0, 13),
    st.integers(0, 32),
    _digits,
    _digits,
    st.one_of(st.just(""), _digits.map(lambda x: ":" + x)),
    st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=10).map(lambda x: "." + x)),
    st.sampled_from(["T", " "]),
    st.one_of(
        st.just(""),
        st.just("Z"),
        st.builds(
            lambda sign, h, m, colon: f"{sign}{h}{colon}{m}",
            st.sampled_from("+-"),
            _digits,
            st.one_of(st.just(""), _digits),
            st.sampled_from(["", ":"]),
        ),
    ),
)


@settings(max_examples=300, deadline=None)
@given(_timestamps, st.sampled_from([TIMESTAMP, TIMESTAMPTZ, TIMESTAMP_NS]), st.booleans())
def test_arrow_gate_agrees_with_coerce(text, ice_type, naive_as_utc):
    import re

    from calving.ingest.write.arrow_schema import primitive_to_arrow

    arrow_type = primitive_to_arrow(ice_type)
    pattern = arrow_gate_pattern(arrow_type, naive_as_utc)
    assert pattern is not None
    if not re.search(pattern, text):
        return
    unit = 1 if ice_type == TIMESTAMP_NS else 1000
    try:
        expected = parse_timestamp(text, unit, arrow_type.tz is not None, naive_as_utc)
    except CoercionError:
        expected = None
    try:
        got = pa.array([text]).cast(arrow_type).cast(pa.int64())[0].as_py()
    except pa.ArrowInvalid:
        got = None  # the vectorized path then falls back to coerce for the column
    if got is not None:
        assert got == expected, text


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 9999), st.integers(0, 13), st.integers(0, 32))
def test_arrow_date_gate_agrees_with_coerce(year, month, day):
    import re

    from calving.ingest.decode.coerce import parse_date

    text = f"{year:04d}-{month:02d}-{day:02d}"
    if not re.search(arrow_gate_pattern(pa.date32(), False) or "", text):
        return
    try:
        expected = parse_date(text)
    except CoercionError:
        expected = None
    try:
        got = pa.array([text]).cast(pa.date32()).cast(pa.int32())[0].as_py()
    except pa.ArrowInvalid:
        got = None
    if got is not None:
        assert got == expected, text
