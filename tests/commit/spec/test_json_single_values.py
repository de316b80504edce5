"""JSON single-value serialization (spec Appendix C), the form of ``initial-default`` and
``write-default``: the spec's own examples both ways, round trips over each type's range,
and refusals naming the type."""

from __future__ import annotations

import re
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.errors import SchemaError
from calving.commit.spec.json_values import default_value, value_from_json, value_to_json
from calving.commit.spec.types import (
    BINARY,
    BOOLEAN,
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
    PrimitiveType,
    decimal,
    fixed,
)

# (type, the spec's JSON example, calving's internal value)
EXAMPLES = [
    (BOOLEAN, True, True),
    (INT, 34, 34),
    (LONG, 34, 34),
    (DOUBLE, 1.0, 1.0),
    (decimal(9, 2), "14.20", Decimal("14.20")),
    (DATE, "2017-11-16", 17486),
    (TIME, "22:31:08.123456", 81_068_123_456),
    (TIMESTAMP, "2017-11-16T22:31:08.123456", 1_510_871_468_123_456),
    (TIMESTAMPTZ, "2017-11-16T22:31:08.123456+00:00", 1_510_871_468_123_456),
    (TIMESTAMP_NS, "2017-11-16T22:31:08.123456789", 1_510_871_468_123_456_789),
    (TIMESTAMPTZ_NS, "2017-11-16T22:31:08.123456789+00:00", 1_510_871_468_123_456_789),
    (STRING, "iceberg", "iceberg"),
    (
        UUID,
        "f79c3e09-677c-4bbd-a479-3f349cb785e7",
        uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7"),
    ),
    (fixed(4), "000102ff", b"\x00\x01\x02\xff"),
    (BINARY, "000102ff", b"\x00\x01\x02\xff"),
]


@pytest.mark.parametrize(("ptype", "text", "value"), EXAMPLES, ids=lambda x: str(x)[:20])
def test_spec_examples(ptype: PrimitiveType, text: Any, value: Any) -> None:
    assert value_from_json(ptype, text) == value
    assert value_to_json(ptype, value) == text


_RANGES = {
    TIMESTAMP: (-(2**62), 2**62),
    TIMESTAMPTZ: (-(2**62), 2**62),
    TIMESTAMP_NS: (-(2**62), 2**62),
    TIMESTAMPTZ_NS: (-(2**62), 2**62),
    DATE: (-700_000, 2_900_000),
    TIME: (0, 86_400 * 10**6 - 1),
}


@pytest.mark.parametrize("ptype", list(_RANGES), ids=str)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_temporal_round_trips(ptype: PrimitiveType, data: st.DataObject) -> None:
    lo, hi = _RANGES[ptype]
    value = data.draw(st.integers(lo, hi))
    try:
        text = value_to_json(ptype, value)
    except OverflowError:
        return  # beyond Python's datetime (years 1-9999): not a default anyone writes
    assert value_from_json(ptype, text) == value


@pytest.mark.parametrize(
    ("ptype", "text"),
    [
        (INT, "34"),
        (BOOLEAN, 1),
        (TIMESTAMPTZ, "2017-11-16T22:31:08.123456"),  # no offset
        (TIMESTAMPTZ, "2017-11-16T22:31:08.123456+01:00"),  # not +00:00
        (TIMESTAMP, "2017-11-16T22:31:08.123456+00:00"),  # an offset
        (TIMESTAMP, "2017-11-16T22:31:08.1234567"),  # finer than the type
        (decimal(9, 2), "14.205"),
        (PrimitiveType("unknown"), None),
    ],
)
def test_refusals_name_the_type(ptype: PrimitiveType, text: Any) -> None:
    with pytest.raises(SchemaError, match=re.escape(f"is not a valid {ptype}")):
        value_from_json(ptype, text if text is not None else "x")


def test_default_values_as_arrow_stores_them() -> None:
    assert default_value(UUID, "f79c3e09-677c-4bbd-a479-3f349cb785e7") == bytes.fromhex(
        "f79c3e09677c4bbda4793f349cb785e7"
    )
    assert default_value(LONG, None) is None
