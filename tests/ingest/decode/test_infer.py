"""Schema inference from sample JSON values."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.spec.types import (
    BOOLEAN,
    DATE,
    DOUBLE,
    LONG,
    STRING,
    TIMESTAMP,
    TIMESTAMPTZ,
    ListType,
    StructType,
)
from calving.ingest.decode.infer import infer_schema
from calving.ingest.decode.json_values import JsonValueDecoder
from tests.ingest.decode import kafka_batch


def test_types_widening_and_ids():
    samples = [
        b'{"a": 1, "b": {"c": [1, 2]}, "d": true, "e": "x"}',
        b'{"a": 2.5, "b": {"c": [3.5], "f": "y"}, "g": null}',
        "not json",
        b"[1]",
        {"h": [{"i": 1}]},
    ]
    result = infer_schema(samples)
    s = result.schema
    assert result.records_read == 3 and result.skipped == 2
    assert [f.name for f in s.fields] == ["a", "b", "d", "e", "h"]
    assert [f.field_id for f in s.fields] == [1, 2, 3, 4, 5]
    assert all(not f.required for f in s.all_fields())
    assert s.find_field_by_name("a").field_type == DOUBLE
    assert s.find_field_by_name("d").field_type == BOOLEAN
    assert s.find_field_by_name("e").field_type == STRING
    b = s.find_field_by_name("b").field_type
    assert isinstance(b, StructType) and [f.field_id for f in b.fields] == [6, 7]
    c = b.fields[0].field_type
    assert isinstance(c, ListType) and c.element_type == DOUBLE and c.element_id == 8
    h = s.find_field_by_name("h").field_type
    assert isinstance(h, ListType) and isinstance(h.element_type, StructType)
    assert h.element_type.fields[0].field_type == LONG
    assert result.conflicts == {"g": "only null values seen; type unknown"}


def test_conflicts_are_reported_and_left_out():
    result = infer_schema(
        [b'{"a": 1, "b": []}', b'{"a": "x", "b": [], "c": {"d": 1}}', b'{"c": 5}']
    )
    assert result.schema.fields == ()
    assert result.conflicts == {
        "a": "values of different kinds: long, string",
        "b": "only empty lists (or lists of nulls) seen; element type unknown",
        "c": "values of different kinds: long, struct",
    }


def test_temporal_detection_is_opt_in():
    samples = [
        b'{"z": "2024-01-01T00:00:00Z", "n": "2024-01-01 10:00:00", "d": "2024-01-01", "m": "2024-01-01"}',
        b'{"z": "2024-01-02T00:00:00+02:00", "m": "soon"}',
    ]
    plain = infer_schema(samples).schema
    assert {f.field_type for f in plain.fields} == {STRING}
    detected = infer_schema(samples, detect_temporal=True).schema
    types = {f.name: f.field_type for f in detected.fields}
    assert types == {"z": TIMESTAMPTZ, "n": TIMESTAMP, "d": DATE, "m": STRING}


def test_depth_limit():
    deep = {"a": {"b": {"c": {"d": 1}}}}
    result = infer_schema([deep], max_depth=2)
    assert result.conflicts == {"a.b": "nested deeper than the inference limit"}


_objects = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]),
    st.one_of(
        st.integers(-(2**62), 2**62),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=4),
        st.booleans(),
        st.lists(st.integers(-100, 100), min_size=1, max_size=3),
    ),
)


@settings(max_examples=50, deadline=None)
@given(st.lists(_objects, min_size=1, max_size=20))
def test_inferred_schema_decodes_its_own_sample(objs):
    values = [json.dumps(o).encode() for o in objs]
    result = infer_schema(values)
    out = JsonValueDecoder(result.schema).decode(kafka_batch(values))
    conflicted = set(result.conflicts)
    if not conflicted:
        assert out.dead_letters.num_rows == 0
    assert set(out.unknown_fields) == conflicted
