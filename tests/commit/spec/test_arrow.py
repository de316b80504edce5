"""The one Iceberg <-> Arrow type mapping (``calving.commit.spec.arrow``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from calving.commit.errors import SchemaError
from calving.commit.spec.arrow import (
    FIELD_ID_KEY,
    primitive_from_arrow,
    primitive_to_arrow,
    schema_to_arrow,
)
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import (
    LONG,
    PRIMITIVE_NAMES,
    STRING,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
    decimal,
    fixed,
)

PRIMITIVES = [PrimitiveType(n) for n in PRIMITIVE_NAMES if n not in ("unknown", "uuid")]
PRIMITIVES += [decimal(1, 0), decimal(10, 2), decimal(38, 38), fixed(1), fixed(7)]


@pytest.mark.parametrize("ptype", PRIMITIVES, ids=str)
def test_every_primitive_maps_to_arrow_and_back(ptype: PrimitiveType) -> None:
    assert primitive_from_arrow(primitive_to_arrow(ptype)) == ptype


def test_uuid_is_sixteen_fixed_bytes_and_reads_back_as_fixed() -> None:
    arrow = primitive_to_arrow(PrimitiveType("uuid"))
    assert arrow == pa.binary(16)
    assert primitive_from_arrow(arrow) == fixed(16)


@pytest.mark.parametrize(
    ("arrow", "name"),
    [
        (pa.string(), "string"),
        (pa.large_string(), "string"),
        (pa.binary(), "binary"),
        (pa.timestamp("us", tz="Europe/Paris"), "timestamptz"),
        (pa.timestamp("ns", tz="+02:00"), "timestamptz_ns"),
        (pa.timestamp("us"), "timestamp"),
    ],
)
def test_other_encodings_of_the_same_values(arrow: pa.DataType, name: str) -> None:
    assert primitive_from_arrow(arrow) == PrimitiveType(name)


@pytest.mark.parametrize(
    "arrow", [pa.int8(), pa.uint64(), pa.timestamp("ms", tz="UTC"), pa.timestamp("s"), pa.null()]
)
def test_arrow_types_without_an_iceberg_type_are_refused(arrow: pa.DataType) -> None:
    with pytest.raises(SchemaError, match="no Iceberg type"):
        primitive_from_arrow(arrow)


def test_unknown_has_no_arrow_type() -> None:
    with pytest.raises(SchemaError, match="no Arrow type"):
        primitive_to_arrow(PrimitiveType("unknown"))


def test_nested_fields_carry_their_ids_and_nullability() -> None:
    schema = Schema(
        (
            NestedField(1, "id", LONG, required=True),
            NestedField(2, "s", StructType((NestedField(5, "a", STRING, required=True),))),
            NestedField(3, "l", ListType(6, LONG, element_required=False)),
            NestedField(4, "m", MapType(7, STRING, 8, LONG, value_required=True)),
        )
    )
    arrow = schema_to_arrow(schema)

    def ids(field: pa.Field) -> tuple[int, bool]:
        return int(field.metadata[FIELD_ID_KEY]), field.nullable

    assert [ids(f) for f in arrow] == [(1, False), (2, True), (3, True), (4, True)]
    assert ids(arrow.field("s").type.field(0)) == (5, False)
    assert arrow.field("s").type.field(0).type == pa.large_string()
    assert ids(arrow.field("l").type.value_field) == (6, True)
    m = arrow.field("m").type
    assert (ids(m.key_field), ids(m.item_field)) == ((7, False), (8, False))
