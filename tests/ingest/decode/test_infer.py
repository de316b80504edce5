"""Schema inference from sample JSON values."""

from __future__ import annotations

import json
from typing import Any

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
        "a": "values of different kinds, as many of each: number, text",
        "b": "only empty lists (or lists of nulls) seen; element type unknown",
        "c": "values of different kinds, as many of each: number, struct",
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
    assert result.conflicts == {
        "a.b": "nested deeper than the inference limit",
        "a": "an object none of whose fields could be typed",
    }
    assert result.schema.fields == ()  # never a struct<> without fields


def _empty_structs(t: Any, path: str = "") -> list[str]:
    if isinstance(t, StructType):
        found = [path] if not t.fields and path else []  # the root may be empty
        for f in t.fields:
            found += _empty_structs(f.field_type, f"{path}.{f.name}".lstrip("."))
        return found
    if isinstance(t, ListType):
        return _empty_structs(t.element_type, path + "[]")
    return []


def test_a_poison_record_cannot_reshape_the_schema():
    """Issue 20: 200 records {id, name} and one {"id": "x", "evilcol": 5}. Before, id was
    left out ("different kinds") and evilcol became a column; now the 200 agreeing
    records decide, the poison one is left out and decodes as a dead letter."""
    values = [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(200)]
    values.insert(57, b'{"id": "x", "evilcol": 5}')
    result = infer_schema(values)
    assert [(f.name, f.field_type) for f in result.schema.fields] == [
        ("id", LONG),
        ("name", STRING),
    ]
    assert result.conflicts == {} and result.disagreeing == 1 and result.records_read == 201
    out = JsonValueDecoder(result.schema).decode(kafka_batch(values, first_offset=0))
    assert out.rows.num_rows == 200
    assert out.dead_letters.column("offset").to_pylist() == [57]
    assert out.unknown_fields == {}


def test_a_nested_mixed_type_field_never_makes_an_empty_struct():
    good = [json.dumps({"id": i, "evil2": {"k": i}}).encode() for i in range(20)]
    minority = infer_schema([*good, b'{"id": 99, "evil2": {"k": "x", "z": [1]}}'])
    types = {f.name: f.field_type for f in minority.schema.fields}
    assert isinstance(types["evil2"], StructType)
    assert [(f.name, f.field_type) for f in types["evil2"].fields] == [("k", LONG)]
    assert minority.disagreeing == 1
    # Only conflicting values inside the object (a tie, a list of mixed elements).
    alone = infer_schema([b'{"id": 1, "evil2": {"k": [1, "x"]}}', b'{"id": 2, "e3": {"a": null}}'])
    assert [f.name for f in alone.schema.fields] == ["id"]
    assert set(alone.conflicts) == {"evil2.k[]", "evil2", "e3.a", "e3"}
    for result in (minority, alone):
        assert _empty_structs(result.schema.as_struct()) == []


def test_a_tie_leaves_the_field_out_and_kinds_of_one_family_widen():
    tie = infer_schema([b'{"a": 1, "b": 1}', b'{"a": "x", "b": 2.5}'])
    assert [(f.name, f.field_type) for f in tie.schema.fields] == [("b", DOUBLE)]
    assert tie.conflicts == {"a": "values of different kinds, as many of each: number, text"}
    assert tie.disagreeing == 0


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
    # Exactly the records that disagree with the majority are dead letters.
    assert out.dead_letters.num_rows == result.disagreeing
    assert set(out.unknown_fields) >= conflicted
    assert _empty_structs(result.schema.as_struct()) == []


def test_a_double_in_a_column_typed_long_disagrees():
    """Found by the sample property above: a record left out for another field holds a
    double where the others' longs typed the column; the decoder refuses it, so it is
    counted as disagreeing."""
    objs = [{"a": 0}, {"a": "", "b": 0}, {"a": 0, "b": 0, "d": 0},
            {"b": "", "a": 0.0, "d": False}, {"d": False}]  # fmt: skip
    values = [json.dumps(o).encode() for o in objs]
    result = infer_schema(values)
    assert {f.name: str(f.field_type) for f in result.schema.fields}["a"] == "long"
    out = JsonValueDecoder(result.schema).decode(kafka_batch(values))
    assert out.dead_letters.num_rows == result.disagreeing == 3
