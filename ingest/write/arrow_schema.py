"""Iceberg schema -> Arrow schema with Parquet field ids (``PARQUET:field_id``)."""

from __future__ import annotations

import pyarrow as pa

from commit.errors import SchemaError
from commit.spec.schema import Schema
from commit.spec.types import IcebergType, ListType, MapType, NestedField, PrimitiveType, StructType

FIELD_ID_KEY = b"PARQUET:field_id"


def primitive_to_arrow(t: PrimitiveType) -> pa.DataType:
    n = t.name
    table = {
        "boolean": pa.bool_(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "date": pa.date32(),
        "time": pa.time64("us"),
        "timestamp": pa.timestamp("us"),
        "timestamptz": pa.timestamp("us", tz="UTC"),
        "timestamp_ns": pa.timestamp("ns"),
        "timestamptz_ns": pa.timestamp("ns", tz="UTC"),
        "string": pa.large_string(),
        "uuid": pa.binary(16),
        "binary": pa.large_binary(),
    }
    if n in table:
        return table[n]
    if n == "decimal":
        return pa.decimal128(t.precision, t.scale)
    if n == "fixed":
        return pa.binary(t.length)
    raise SchemaError(f"no Arrow type for {t}")


def _field(f: NestedField) -> pa.Field:
    return pa.field(
        f.name,
        type_to_arrow(f.field_type),
        nullable=not f.required,
        metadata={FIELD_ID_KEY: str(f.field_id).encode()},
    )


def type_to_arrow(t: IcebergType) -> pa.DataType:
    if isinstance(t, PrimitiveType):
        return primitive_to_arrow(t)
    if isinstance(t, StructType):
        return pa.struct([_field(f) for f in t.fields])
    if isinstance(t, ListType):
        return pa.large_list(_field(t.element_field))
    if isinstance(t, MapType):
        return pa.map_(_field(t.key_field), _field(t.value_field))
    raise SchemaError(f"no Arrow type for {t}")


def schema_to_arrow(schema: Schema) -> pa.Schema:
    return pa.schema([_field(f) for f in schema.fields])
