import json
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.partitioning import PartitionSpec as PyPartitionSpec
from pyiceberg.schema import Schema as PySchema
from pyiceberg.typedef import Record

from calving.commit.errors import SchemaError, UnsupportedFeatureError
from calving.commit.spec.partition import (
    UNPARTITIONED,
    PartitionField,
    PartitionSpec,
    PartitionSpecBuilder,
    spec_builder,
)
from calving.commit.spec.schema import Schema
from calving.commit.spec.transforms import DAY, IDENTITY, VOID, bucket, truncate
from calving.commit.spec.types import (
    BINARY,
    DATE,
    DOUBLE,
    INT,
    LONG,
    STRING,
    TIMESTAMP,
    TIMESTAMP_NS,
    TIMESTAMPTZ,
    UUID,
    ListType,
    NestedField,
    StructType,
    decimal,
)
from tests.commit.spec.value_strategies import to_arrow, values_of

SCHEMA = Schema(
    (
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "name", STRING),
        NestedField(3, "ts", TIMESTAMPTZ),
        NestedField(4, "price", decimal(9, 2)),
        NestedField(5, "payload", BINARY),
        NestedField(6, "score", DOUBLE),
        NestedField(7, "tags", ListType(8, STRING)),
        NestedField(9, "loc", StructType((NestedField(10, "city", STRING),))),
        NestedField(11, "day", DATE),
        NestedField(12, "key", UUID),
        NestedField(13, "local_ts", TIMESTAMP),
        NestedField(14, "n", INT),
        NestedField(15, "ts_ns", TIMESTAMP_NS),
    )
)


def full_spec() -> PartitionSpec:
    return (
        PartitionSpecBuilder(SCHEMA, spec_id=3)
        .bucket("id", 16)
        .day("ts")
        .truncate("name", 4)
        .identity("loc.city")
        .truncate("price", 50)
        .truncate("payload", 3)
        .identity("day")
        .bucket("key", 8)
        .hour("local_ts")
        .month("day", name="day_month")
        .year("ts_ns")
        .void("score")
        .build()
    )


def test_builder_assigns_java_default_names_and_ids_from_1000():
    spec = full_spec()
    assert [(f.field_id, f.name, str(f.transform)) for f in spec.fields] == [
        (1000, "id_bucket", "bucket[16]"),
        (1001, "ts_day", "day"),
        (1002, "name_trunc", "truncate[4]"),
        (1003, "loc.city", "identity"),
        (1004, "price_trunc", "truncate[50]"),
        (1005, "payload_trunc", "truncate[3]"),
        (1006, "day", "identity"),
        (1007, "key_bucket", "bucket[8]"),
        (1008, "local_ts_hour", "hour"),
        (1009, "day_month", "month"),
        (1010, "ts_ns_year", "year"),
        (1011, "score_null", "void"),
    ]
    assert spec.last_assigned_field_id == 1011
    evolved = PartitionSpecBuilder(SCHEMA, spec_id=4, last_assigned_field_id=1011).identity("n")
    assert evolved.build().fields[0].field_id == 1012


def test_json_matches_the_spec_layout_and_round_trips():
    spec = PartitionSpecBuilder(SCHEMA).day("ts").bucket("id", 16).build()
    assert spec.to_json() == {
        "spec-id": 0,
        "fields": [
            {"name": "ts_day", "transform": "day", "source-id": 3, "field-id": 1000},
            {"name": "id_bucket", "transform": "bucket[16]", "source-id": 1, "field-id": 1001},
        ],
    }
    full = full_spec()
    assert PartitionSpec.from_json(json.loads(json.dumps(full.to_json()))) == full
    assert PartitionSpec.from_fields_json(full.fields_to_json(), 3) == full


def test_json_agrees_with_pyiceberg():
    spec = full_spec()
    theirs = PyPartitionSpec.model_validate(spec.to_json())
    assert json.loads(theirs.model_dump_json()) == spec.to_json()


def test_v1_json_without_field_ids_and_single_source_ids():
    spec = PartitionSpec.from_json(
        {
            "spec-id": 0,
            "fields": [
                {"name": "a", "transform": "identity", "source-id": 1},
                {"name": "b", "transform": "bucket[2]", "source-ids": [2]},
            ],
        }
    )
    assert [(f.field_id, f.source_id) for f in spec.fields] == [(1000, 1), (1001, 2)]


def test_malformed_json():
    with pytest.raises(SchemaError, match="name"):
        PartitionSpec.from_json({"spec-id": 0, "fields": [{"transform": "day", "source-id": 1}]})
    with pytest.raises(SchemaError, match="spec-id"):
        PartitionSpec.from_json({"fields": []})
    with pytest.raises(UnsupportedFeatureError, match="multi-argument"):
        PartitionSpec.from_json(
            {"spec-id": 0, "fields": [{"name": "z", "transform": "zorder", "source-ids": [1, 2]}]}
        )


def test_unknown_transform_loads_round_trips_but_cannot_bind():
    obj = {
        "spec-id": 1,
        "fields": [{"name": "g", "transform": "geo[3]", "source-id": 2, "field-id": 1000}],
    }
    spec = PartitionSpec.from_json(obj)
    assert spec.to_json() == obj
    with pytest.raises(UnsupportedFeatureError, match="'g'"):
        spec.validate(SCHEMA)


def test_partition_type_uses_partition_ids_names_and_result_types():
    spec = PartitionSpecBuilder(SCHEMA).bucket("id", 16).day("ts").truncate("name", 4).build()
    assert spec.partition_type(SCHEMA) == StructType(
        (
            NestedField(1000, "id_bucket", INT, required=False),
            NestedField(1001, "ts_day", DATE, required=False),
            NestedField(1002, "name_trunc", STRING, required=False),
        )
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ((PartitionField(99, 1000, IDENTITY, "ghost"),), "'ghost'.*not in the schema"),
        ((PartitionField(8, 1000, IDENTITY, "tag"),), "'tag'.*'tags.element'.*outside lists"),
        ((PartitionField(9, 1000, IDENTITY, "loc"),), "'loc'.*primitive"),
        ((PartitionField(6, 1000, bucket(4), "score_bucket"),), "'score_bucket'.*'score'.*double"),
        ((PartitionField(2, 1000, DAY, "name_day"),), "'name_day'.*day cannot apply"),
    ],
)
def test_validation_names_the_field(fields, message):
    with pytest.raises(SchemaError, match=message):
        PartitionSpec(0, fields).validate(SCHEMA)


def test_spec_rejects_duplicate_ids_and_names():
    with pytest.raises(SchemaError, match="1000"):
        PartitionSpec(
            0, (PartitionField(1, 1000, IDENTITY, "a"), PartitionField(2, 1000, IDENTITY, "b"))
        )
    with pytest.raises(SchemaError, match="'a'"):
        PartitionSpec(
            0, (PartitionField(1, 1000, IDENTITY, "a"), PartitionField(2, 1001, IDENTITY, "a"))
        )


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda b: b.identity("nope"), "no such column"),
        (lambda b: b.day("ts").hour("ts"), "redundant"),
        (lambda b: b.bucket("id", 4).bucket("id", 4, name="other"), "redundant"),
        (lambda b: b.bucket("id", 4).truncate("name", 2, name="id_bucket"), "used twice"),
        (lambda b: b.bucket("id", 4, name="name"), "shadow"),
        (lambda b: b.identity("id", name="name"), "shadow"),
        (lambda b: b.bucket("score", 4), "'score_bucket'"),
    ],
)
def test_builder_checks(build, message):
    with pytest.raises(SchemaError, match=message):
        build(PartitionSpecBuilder(SCHEMA)).build()


def test_builder_allows_two_buckets_of_different_sizes_and_identity_under_own_name():
    spec = (
        PartitionSpecBuilder(SCHEMA)
        .bucket("id", 4)
        .bucket("id", 8, name="id_b8")
        .identity("id")
        .build()
    )
    assert [f.name for f in spec.fields] == ["id_bucket", "id_b8", "id"]


def test_unpartitioned():
    assert UNPARTITIONED.is_unpartitioned and UNPARTITIONED.spec_id == 0
    assert UNPARTITIONED.partition_type(SCHEMA) == StructType(())
    assert UNPARTITIONED.partition_for_row(SCHEMA, {1: 5}) == ()
    assert UNPARTITIONED.partition_path(SCHEMA, ()) == ""
    assert UNPARTITIONED.last_assigned_field_id == 999
    assert PartitionSpec(1, (PartitionField(1, 1000, VOID, "id_null"),)).is_unpartitioned
    assert not full_spec().is_unpartitioned


def test_equivalence_ignores_ids_only():
    a = PartitionSpecBuilder(SCHEMA, spec_id=0).bucket("id", 4).build()
    b = PartitionSpecBuilder(SCHEMA, spec_id=5, last_assigned_field_id=2000).bucket("id", 4).build()
    c = PartitionSpecBuilder(SCHEMA).bucket("id", 4, name="other").build()
    assert a.equivalent(b) and not a.equivalent(c)


def test_partition_tuple_and_path_example():
    spec = PartitionSpecBuilder(SCHEMA).bucket("id", 16).day("ts").truncate("name", 4).build()
    row = {1: 34, 3: 1_510_871_468_000_000, 2: "ice berg/ä"}
    partition = spec.partition_for_row(SCHEMA, row)
    assert partition == (3, 17486, "ice ")
    assert spec.partition_path(SCHEMA, partition) == "id_bucket=3/ts_day=2017-11-16/name_trunc=ice+"
    assert spec.partition_path(SCHEMA, (None, None, "a=b")) == (
        "id_bucket=null/ts_day=null/name_trunc=a%3Db"
    )


SOURCE_TYPES = {f.field_id: f.field_type for f in SCHEMA.all_fields() if f.field_id != 7}
ROW_SOURCES = [1, 2, 3, 4, 5, 10, 11, 12, 13, 15]


@st.composite
def rows(draw, truncatable_prices: bool = False):
    row = {
        fid: draw(st.none() | values_of(SOURCE_TYPES[fid], datetime_range=True))
        for fid in ROW_SOURCES
    }
    if truncatable_prices and row[4] is not None and row[4] <= Decimal("-9999999.50"):
        row[4] = None  # truncate[50] would need a 10th digit: refused (tested elsewhere)
    return row


@settings(max_examples=100, deadline=None)
@given(rows(truncatable_prices=True))
def test_partition_path_matches_pyiceberg(row):
    spec = full_spec()
    partition = spec.partition_for_row(SCHEMA, row)
    theirs_spec = PyPartitionSpec.model_validate(spec.to_json())
    theirs_schema = PySchema.model_validate(SCHEMA.to_json())
    expected = theirs_spec.partition_to_path(Record(*partition), theirs_schema)
    assert spec.partition_path(SCHEMA, partition) == expected


@settings(max_examples=30, deadline=None)
@given(st.lists(rows(), max_size=6))
def test_partition_arrays_match_row_by_row(batch):
    bound = full_spec().bind(SCHEMA)
    columns = {fid: to_arrow([r[fid] for r in batch], SOURCE_TYPES[fid]) for fid in ROW_SOURCES}
    columns[6] = pa.array([None] * len(batch), pa.float64())
    try:
        by_row = [bound.partition_for_row(r) for r in batch]
    except SchemaError:  # e.g. a truncated decimal outgrowing its precision: both refuse
        with pytest.raises(SchemaError):
            bound.partition_arrays(columns)
        return
    arrays = bound.partition_arrays(columns)
    for i, array in enumerate(arrays):
        if array.type == pa.date32():
            array = array.cast(pa.int32())
        assert array.to_pylist() == [p[i] for p in by_row]


def test_partition_helpers_check_arity_and_columns():
    bound = PartitionSpecBuilder(SCHEMA).bucket("id", 2).build().bind(SCHEMA)
    with pytest.raises(SchemaError):
        bound.partition_for_values([1, 2])
    with pytest.raises(SchemaError):
        bound.partition_path(())
    with pytest.raises(SchemaError, match="source id 1"):
        bound.partition_arrays({})
    assert bound.partition_for_values([None]) == (None,)
    assert bound.partition_for_row({}) == (None,)
    assert truncate(2).apply("abc", STRING) == "ab"


def test_spec_builder_shortcut_matches_the_builder():
    pairs = [("name", IDENTITY), ("id", bucket(4)), ("ts", DAY)]
    spec = spec_builder(SCHEMA, spec_id=2, fields=pairs)
    assert (
        spec == PartitionSpecBuilder(SCHEMA, 2).identity("name").bucket("id", 4).day("ts").build()
    )
    assert spec.partition_for(SCHEMA, ["x", 34, -1]) == ("x", 3, -1)


def test_truncated_decimal_outgrowing_its_precision_is_refused_by_both_paths():
    bound = PartitionSpecBuilder(SCHEMA).truncate("price", 50).build().bind(SCHEMA)
    with pytest.raises(SchemaError, match="overflows"):
        bound.partition_for_row({4: Decimal("-9999999.99")})
    with pytest.raises(SchemaError):
        bound.partition_arrays({4: to_arrow([Decimal("-9999999.99")], SOURCE_TYPES[4])})
