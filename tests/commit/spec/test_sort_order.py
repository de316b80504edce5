import json

import pytest
from pyiceberg.table.sorting import SortOrder as PySortOrder

from calving.commit.errors import SchemaError, UnsupportedFeatureError
from calving.commit.spec.schema import Schema
from calving.commit.spec.sort_order import (
    UNSORTED,
    SortField,
    SortOrder,
    asc,
    desc,
)
from calving.commit.spec.transforms import DAY, IDENTITY, bucket
from calving.commit.spec.types import DOUBLE, LONG, STRING, TIMESTAMPTZ, ListType, NestedField

SCHEMA = Schema(
    (
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "name", STRING),
        NestedField(3, "ts", TIMESTAMPTZ),
        NestedField(4, "tags", ListType(5, STRING)),
        NestedField(6, "score", DOUBLE),
    )
)

SPEC_EXAMPLE = {
    "order-id": 1,
    "fields": [
        {"transform": "identity", "source-id": 2, "direction": "asc", "null-order": "nulls-first"},
        {"transform": "bucket[4]", "source-id": 3, "direction": "desc", "null-order": "nulls-last"},
    ],
}


def test_spec_example_round_trips():
    order = SortOrder.from_json(SPEC_EXAMPLE)
    assert order == SortOrder(1, (asc(2), desc(3, bucket(4))))
    assert order.to_json() == SPEC_EXAMPLE


def test_json_agrees_with_pyiceberg():
    order = SortOrder(3, (desc(1), asc(3, DAY, null_order="nulls-last")))
    theirs = PySortOrder.model_validate(order.to_json())
    assert json.loads(theirs.model_dump_json()) == order.to_json()
    assert SortOrder.from_json(json.loads(theirs.model_dump_json())) == order


def test_unsorted():
    assert UNSORTED.order_id == 0 and UNSORTED.is_unsorted
    assert UNSORTED.to_json() == {"order-id": 0, "fields": []}
    assert SortOrder.from_json({"order-id": 0, "fields": []}) == UNSORTED


def test_defaults_follow_java_builder():
    assert asc(1).null_order == "nulls-first"
    assert desc(1).null_order == "nulls-last"
    assert SortField(1).transform == IDENTITY


@pytest.mark.parametrize(
    "make",
    [
        lambda: SortField(1, direction="up"),
        lambda: SortField(1, null_order="nulls-middle"),
        lambda: SortOrder(0, (asc(1),)),
        lambda: SortOrder(2),
        lambda: SortOrder(-1, (asc(1),)),
        lambda: SortOrder.from_json({"order-id": 1}),
        lambda: SortOrder.from_json({"order-id": 1, "fields": [{"source-id": 1}]}),
    ],
)
def test_invalid_orders_raise_schema_error(make):
    with pytest.raises(SchemaError):
        make()


def test_single_source_ids_read_multi_refused():
    field = {
        "transform": "identity",
        "source-ids": [2],
        "direction": "asc",
        "null-order": "nulls-first",
    }
    assert SortOrder.from_json({"order-id": 1, "fields": [field]}).fields[0].source_id == 2
    with pytest.raises(UnsupportedFeatureError):
        SortOrder.from_json({"order-id": 1, "fields": [{**field, "source-ids": [1, 2]}]})


def test_validate_against_schema():
    SortOrder(1, (asc(1), desc(3, DAY))).validate(SCHEMA)
    with pytest.raises(SchemaError, match="99"):
        SortOrder(1, (asc(99),)).validate(SCHEMA)
    with pytest.raises(SchemaError, match="'tags'"):
        SortOrder(1, (asc(4),)).validate(SCHEMA)
    with pytest.raises(SchemaError, match="'score'.*bucket"):
        SortOrder(1, (asc(6, bucket(2)),)).validate(SCHEMA)
    unknown = SortOrder.from_json(
        {
            "order-id": 1,
            "fields": [
                {
                    "transform": "zorder",
                    "source-id": 1,
                    "direction": "asc",
                    "null-order": "nulls-first",
                }
            ],
        }
    )
    assert unknown.to_json()["fields"][0]["transform"] == "zorder"
    with pytest.raises(UnsupportedFeatureError):
        unknown.validate(SCHEMA)


def test_same_order_ignores_id():
    assert SortOrder(1, (asc(1),)).same_order(SortOrder(7, (asc(1),)))
    assert not SortOrder(1, (asc(1),)).same_order(SortOrder(1, (desc(1),)))
