import datetime as dt
import uuid
from decimal import Decimal

import pyarrow as pa
import pyiceberg_core.transform as core
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg import transforms as pyt

from calving.commit.errors import SchemaError, UnsupportedFeatureError
from calving.commit.spec.transforms import (
    DAY,
    HOUR,
    IDENTITY,
    MONTH,
    VOID,
    YEAR,
    Transform,
    bucket,
    civil_from_days,
    hash_value,
    parse_transform,
    truncate,
)
from calving.commit.spec.types import (
    BINARY,
    DATE,
    DOUBLE,
    INT,
    LONG,
    STRING,
    TIME,
    TIMESTAMP,
    TIMESTAMP_NS,
    TIMESTAMPTZ,
    TIMESTAMPTZ_NS,
    UUID,
    decimal,
    fixed,
)
from tests.commit.spec.value_strategies import (
    ALL_TYPES,
    MAX_DAYS,
    MIN_DAYS,
    pyiceberg_type,
    to_arrow,
    values_of,
)

EPOCH = dt.datetime(1970, 1, 1)
INT_RANGES = {INT: (-(2**31), 2**31 - 1), LONG: (-(2**63), 2**63 - 1)}


def _micros(text: str) -> int:
    t = dt.datetime.fromisoformat(text)
    if t.tzinfo is not None:
        t = t.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return (t - EPOCH) // dt.timedelta(microseconds=1)


# ---------------------------------------------------------------- spec Appendix B

APPENDIX_B = [
    (INT, 34, 2017239379),
    (LONG, 34, 2017239379),
    (decimal(9, 2), Decimal("14.20"), -500754589),
    (DATE, (dt.date(2017, 11, 16) - dt.date(1970, 1, 1)).days, -653330422),
    (TIME, (22 * 3600 + 31 * 60 + 8) * 1_000_000, -662762989),
    (TIMESTAMP, _micros("2017-11-16T22:31:08"), -2047944441),
    (TIMESTAMP, _micros("2017-11-16T22:31:08.000001"), -1207196810),
    (TIMESTAMPTZ, _micros("2017-11-16T14:31:08-08:00"), -2047944441),
    (TIMESTAMPTZ, _micros("2017-11-16T14:31:08.000001-08:00"), -1207196810),
    (TIMESTAMP_NS, _micros("2017-11-16T22:31:08") * 1000, -2047944441),
    (TIMESTAMP_NS, _micros("2017-11-16T22:31:08") * 1000 + 1001, -1207196810),
    (TIMESTAMPTZ_NS, _micros("2017-11-16T14:31:08-08:00") * 1000, -2047944441),
    (TIMESTAMPTZ_NS, _micros("2017-11-16T14:31:08-08:00") * 1000 + 1001, -1207196810),
    (STRING, "iceberg", 1210000089),
    (UUID, uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7"), 1488055340),
    (fixed(4), bytes([0, 1, 2, 3]), -188683207),
    (BINARY, bytes([0, 1, 2, 3]), -188683207),
]


@pytest.mark.parametrize(("ptype", "value", "expected"), APPENDIX_B)
def test_spec_hash_vectors(ptype, value, expected):
    assert hash_value(value, ptype) == expected
    assert bucket(16).apply(value, ptype) == (expected & 0x7FFFFFFF) % 16
    array = to_arrow([value, None], ptype)
    assert bucket(16).apply_arrow(array, ptype).to_pylist() == [(expected & 0x7FFFFFFF) % 16, None]


def test_floats_and_booleans_are_not_hashed():
    with pytest.raises(SchemaError):
        hash_value(1.0, DOUBLE)
    with pytest.raises(SchemaError):
        bucket(4).apply(1.0, DOUBLE)


# ---------------------------------------------------------------- parsing and typing


@pytest.mark.parametrize(
    "text",
    ["identity", "bucket[16]", "truncate[10]", "year", "month", "day", "hour", "void"],
)
def test_parse_and_str_round_trip(text):
    assert str(parse_transform(text)) == text


def test_parse_tolerates_spaces_and_rejects_unknown():
    assert parse_transform(" bucket[ 8 ] ") == bucket(8)
    with pytest.raises(UnsupportedFeatureError):
        parse_transform("zorder")
    with pytest.raises(UnsupportedFeatureError):
        parse_transform("bucket[x]")
    with pytest.raises(SchemaError):
        parse_transform("bucket[0]")
    with pytest.raises(SchemaError):
        truncate(-1)


def test_unknown_transform_loads_but_cannot_compute():
    unknown = parse_transform("geo_hash[4]", allow_unknown=True)
    assert str(unknown) == "geo_hash[4]" and not unknown.is_known
    assert not unknown.can_transform(LONG)
    assert unknown.result_type(LONG) == STRING
    with pytest.raises(UnsupportedFeatureError):
        unknown.apply(1, LONG)


PYICEBERG_TRANSFORMS = {
    IDENTITY: pyt.IdentityTransform(),
    VOID: pyt.VoidTransform(),
    bucket(7): pyt.BucketTransform(7),
    truncate(3): pyt.TruncateTransform(3),
    YEAR: pyt.YearTransform(),
    MONTH: pyt.MonthTransform(),
    DAY: pyt.DayTransform(),
    HOUR: pyt.HourTransform(),
}


@pytest.mark.parametrize("transform", list(PYICEBERG_TRANSFORMS), ids=str)
@pytest.mark.parametrize("ptype", ALL_TYPES, ids=str)
def test_can_transform_and_result_type_agree_with_pyiceberg(transform, ptype):
    theirs = PYICEBERG_TRANSFORMS[transform]
    assert transform.can_transform(ptype) == theirs.can_transform(pyiceberg_type(ptype))
    if transform.can_transform(ptype):
        assert transform.result_type(ptype) == _from_pyiceberg(
            theirs.result_type(pyiceberg_type(ptype))
        )


def _from_pyiceberg(t):
    from calving.commit.spec.types import primitive_from_string

    return primitive_from_string(str(t))


# ---------------------------------------------------------------- oracles on random values

TRANSFORM_TYPE_PAIRS = [
    (transform, ptype)
    for transform in PYICEBERG_TRANSFORMS
    for ptype in ALL_TYPES
    if transform.can_transform(ptype) and transform not in (IDENTITY, VOID)
]


def _fits(value, ptype) -> bool:
    """Whether a transform result stays inside the source type's range."""
    if ptype in INT_RANGES:
        return INT_RANGES[ptype][0] <= value <= INT_RANGES[ptype][1]
    if ptype.name == "decimal":
        return len(value.as_tuple().digits) <= ptype.precision
    return True


def _fits_after_truncate(transform, value, ptype) -> bool:
    try:
        transform.apply(value, ptype)
    except SchemaError:
        return False
    return True


@pytest.mark.parametrize(("transform", "ptype"), TRANSFORM_TYPE_PAIRS, ids=str)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_single_values_agree_with_pyiceberg(transform, ptype, data):
    value = data.draw(values_of(ptype, datetime_range=True))
    expected = PYICEBERG_TRANSFORMS[transform].transform(pyiceberg_type(ptype))(value)
    if transform.name == "truncate" and not _fits(expected, ptype):
        with pytest.raises(SchemaError):  # pyiceberg leaves the type's range
            transform.apply(value, ptype)
    else:
        assert transform.apply(value, ptype) == expected


CORE_FUNCTIONS = {
    "bucket": lambda a, t: core.bucket(a, t.param),
    "truncate": lambda a, t: core.truncate(a, t.param),
    "year": lambda a, t: core.year(a),
    "month": lambda a, t: core.month(a),
    "day": lambda a, t: core.day(a),
    "hour": lambda a, t: core.hour(a),
}


def _arrow_as_python(array: pa.Array) -> list:
    return (array.cast(pa.int32()) if array.type == pa.date32() else array).to_pylist()


@pytest.mark.parametrize(("transform", "ptype"), TRANSFORM_TYPE_PAIRS, ids=str)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_arrow_agrees_with_scalar_over_the_whole_range(transform, ptype, data):
    values = data.draw(st.lists(st.one_of(st.none(), values_of(ptype)), max_size=12))
    array = to_arrow(values, ptype)
    try:
        scalar = [transform.apply(v, ptype) for v in values]
    except SchemaError:  # a result outside the type's range: both paths refuse
        with pytest.raises(SchemaError):
            transform.apply_arrow(array, ptype)
        return
    assert _arrow_as_python(transform.apply_arrow(array, ptype)) == scalar


@pytest.mark.parametrize(("transform", "ptype"), TRANSFORM_TYPE_PAIRS, ids=str)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_arrow_agrees_with_pyiceberg_core(transform, ptype, data):
    # datetime range: pyiceberg-core (chrono) answers null beyond +-262143 years
    value = values_of(ptype, datetime_range=True)
    if transform.name == "truncate":  # stay clear of results outside the type
        value = value.filter(lambda v: _fits_after_truncate(transform, v, ptype))
    values = data.draw(st.lists(st.one_of(st.none(), value), max_size=12))
    array = to_arrow(values, ptype)
    theirs = CORE_FUNCTIONS[transform.name](array, transform)
    assert _arrow_as_python(transform.apply_arrow(array, ptype)) == _arrow_as_python(theirs)


@pytest.mark.parametrize("ptype", ALL_TYPES, ids=str)
def test_identity_and_void_on_arrow(ptype):
    values = [None]
    array = to_arrow(values, ptype)
    assert IDENTITY.apply_arrow(array, ptype) is array
    assert VOID.apply_arrow(array, ptype).null_count == len(values)
    assert VOID.apply(object(), ptype) is None


def test_chunked_arrays_are_accepted():
    chunked = pa.chunked_array([pa.array([1, 2], pa.int64()), pa.array([None, -3], pa.int64())])
    assert truncate(2).apply_arrow(chunked, LONG).to_pylist() == [0, 2, None, -4]


# ---------------------------------------------------------------- temporal edges


@pytest.mark.parametrize(
    ("transform", "ptype", "value", "expected"),
    [
        (YEAR, DATE, -1, -1),
        (MONTH, DATE, -1, -1),
        (DAY, TIMESTAMP, -1, -1),
        (HOUR, TIMESTAMP, -1, -1),
        (HOUR, TIMESTAMP_NS, -1, -1),
        (DAY, TIMESTAMPTZ_NS, -1, -1),
        (MONTH, TIMESTAMP, _micros("1969-01-31T23:59:59"), -12),
        (YEAR, TIMESTAMP, _micros("2017-11-16T22:31:08"), 47),
        (MONTH, TIMESTAMP, _micros("2017-11-16T22:31:08"), 574),
        (DAY, TIMESTAMP, _micros("2017-11-16T22:31:08"), 17486),
        (HOUR, TIMESTAMP, _micros("2017-11-16T22:31:08"), 419686),
    ],
)
def test_temporal_examples_floor_before_1970(transform, ptype, value, expected):
    assert transform.apply(value, ptype) == expected
    arrow = transform.apply_arrow(to_arrow([value], ptype), ptype)
    assert arrow.cast(pa.int32()).to_pylist() == [expected]


def test_day_result_is_a_date():
    assert DAY.result_type(TIMESTAMP) == DATE
    assert DAY.apply_arrow(to_arrow([0], TIMESTAMP), TIMESTAMP).type == pa.date32()


@settings(max_examples=200)
@given(st.integers(MIN_DAYS, MAX_DAYS))
def test_civil_from_days_matches_datetime(days):
    d = dt.date(1970, 1, 1) + dt.timedelta(days=days)
    assert civil_from_days(days) == (d.year, d.month, d.day)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=8))
def test_year_and_month_cover_the_whole_long_range(values):
    array = to_arrow(values, TIMESTAMP)
    for transform in (YEAR, MONTH, DAY):
        expected = [transform.apply(v, TIMESTAMP) for v in values]
        assert transform.apply_arrow(array, TIMESTAMP).cast(pa.int32()).to_pylist() == expected


def test_out_of_range_results_raise_schema_error_in_both_paths():
    with pytest.raises(SchemaError):
        HOUR.apply(2**63 - 1, TIMESTAMP)
    with pytest.raises(SchemaError):
        HOUR.apply_arrow(to_arrow([2**63 - 1], TIMESTAMP), TIMESTAMP)
    with pytest.raises(SchemaError):
        truncate(10).apply(-(2**31), INT)
    with pytest.raises(SchemaError):
        truncate(10).apply_arrow(pa.array([-(2**31)], pa.int32()), INT)


def test_transform_on_wrong_type_is_a_schema_error():
    with pytest.raises(SchemaError):
        HOUR.apply(1, DATE)
    with pytest.raises(SchemaError):
        truncate(2).apply_arrow(pa.array([b"ab"], pa.binary(2)), fixed(2))


# ---------------------------------------------------------------- truncate details


def test_truncate_spec_examples():
    assert truncate(10).apply(1, INT) == 0
    assert truncate(10).apply(-1, INT) == -10
    assert truncate(10).apply(-1, LONG) == -10
    assert truncate(50).apply(Decimal("10.65"), decimal(9, 2)) == Decimal("10.50")
    assert truncate(3).apply("iceberg", STRING) == "ice"
    assert truncate(3).apply(b"\x01\x02\x03\x04\x05", BINARY) == b"\x01\x02\x03"
    assert truncate(2).apply("😀é😀", STRING) == "😀é"  # code points, not bytes or UTF-16


# ---------------------------------------------------------------- human strings

HUMAN_TYPES = [
    t for t in ALL_TYPES if t.name not in ("timestamp_ns", "timestamptz_ns", "float", "double")
]


@pytest.mark.parametrize("ptype", HUMAN_TYPES, ids=str)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_identity_human_string_matches_pyiceberg(ptype, data):
    value = data.draw(values_of(ptype, datetime_range=True))
    expected = pyt.IdentityTransform().to_human_string(pyiceberg_type(ptype), value)
    assert IDENTITY.to_human_string(value, ptype) == expected


@pytest.mark.parametrize("transform", [YEAR, MONTH, DAY, HOUR], ids=str)
@settings(max_examples=50, deadline=None)
@given(value=values_of(TIMESTAMP, datetime_range=True))
def test_temporal_human_strings_match_pyiceberg(transform, value):
    result = transform.apply(value, TIMESTAMP)
    theirs = PYICEBERG_TRANSFORMS[transform].to_human_string(pyiceberg_type(TIMESTAMP), result)
    assert transform.to_human_string(result, TIMESTAMP) == theirs


def test_human_string_examples():
    assert YEAR.to_human_string(47, DATE) == "2017"
    assert MONTH.to_human_string(-1, DATE) == "1969-12"
    assert DAY.to_human_string(17486, TIMESTAMP) == "2017-11-16"
    assert HOUR.to_human_string(419686, TIMESTAMP) == "2017-11-16-22"
    assert IDENTITY.to_human_string(1_001, TIMESTAMP_NS) == "1970-01-01T00:00:00.000001001"
    assert IDENTITY.to_human_string(0, TIMESTAMPTZ_NS) == "1970-01-01T00:00:00+00:00"
    assert IDENTITY.to_human_string(None, LONG) == "null"
    assert bucket(4).to_human_string(3, STRING) == "3"
    assert truncate(4).to_human_string(b"\x00\x01", BINARY) == "AAE="
    assert Transform("day") == DAY
