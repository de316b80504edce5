import json

import pytest
from hypothesis import given, settings

from calving.commit.errors import SchemaError
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import (
    INT,
    LONG,
    STRING,
    ListType,
    NestedField,
    can_promote,
    decimal,
    primitive_from_string,
    type_from_json,
    type_to_json,
)
from tests.commit.spec.strategies import primitive_types, schemas


@given(primitive_types)
def test_primitive_json_round_trip(t):
    assert type_from_json(type_to_json(t)) == t


@settings(max_examples=150)
@given(schemas())
def test_schema_json_round_trips_byte_for_byte(schema):
    text = json.dumps(schema.to_json(), separators=(",", ":"))
    again = Schema.from_json(json.loads(text))
    assert again == schema
    assert json.dumps(again.to_json(), separators=(",", ":")) == text


def test_decimal_and_fixed_spellings():
    assert primitive_from_string("decimal(9,2)") == decimal(9, 2)
    assert str(decimal(9, 2)) == "decimal(9, 2)"
    assert str(primitive_from_string("fixed[16]")) == "fixed[16]"
    with pytest.raises(SchemaError, match="unknown or unsupported"):
        primitive_from_string("varchar")


def test_duplicate_field_ids_are_rejected():
    with pytest.raises(SchemaError, match="used twice"):
        Schema((NestedField(1, "a", INT), NestedField(2, "b", ListType(1, STRING))))


def test_identifier_fields_must_be_required_primitives():
    with pytest.raises(SchemaError, match="must be required"):
        Schema((NestedField(1, "id", LONG, required=False),), identifier_field_ids=(1,))
    s = Schema((NestedField(1, "id", LONG, required=True),), identifier_field_ids=(1,))
    assert s.identifier_field_names == ("id",)


def test_promotions_allowed_by_the_spec_only():
    assert can_promote(INT, LONG)
    assert not can_promote(LONG, INT)
    assert can_promote(decimal(9, 2), decimal(18, 2))
    assert not can_promote(decimal(9, 2), decimal(18, 3))
    assert not can_promote(STRING, LONG)


def test_nested_lookup_by_dotted_name():
    from calving.commit.spec.types import StructType

    s = Schema((NestedField(1, "a", StructType((NestedField(2, "b", INT),))),))
    assert s.find_field_by_name("a.b").field_id == 2
    assert s.column_name(2) == "a.b"
    assert s.highest_field_id == 2
