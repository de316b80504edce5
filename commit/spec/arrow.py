"""The one mapping between Iceberg types and Arrow types.

``type_to_arrow`` / ``primitive_from_arrow`` are the pair every caller uses: the Parquet
writer, the decoders, the primary-key index and the dead-letter table. Iceberg -> Arrow
gives the types calving writes (``large_string``/``large_binary``/``large_list``,
microsecond or nanosecond timestamps, UTC for the ``tz`` kinds) and carries field ids as
``PARQUET:field_id`` field metadata. Arrow -> Iceberg also accepts the other encodings of
the same values (``string``, ``binary``, any time zone). A ``fixed_size_binary(16)`` is
``fixed[16]``: Arrow cannot tell it from a ``uuid``. Pure (no I/O).
"""

from __future__ import annotations

import pyarrow as pa

from calving.commit.errors import SchemaError
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import (
    IcebergType,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
    decimal,
    fixed,
)

#: Field metadata key of a column's Iceberg field id in Arrow (and Parquet) schemas.
FIELD_ID_KEY = b"PARQUET:field_id"

_TO_ARROW: dict[str, pa.DataType] = {
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
_FROM_ARROW: dict[pa.DataType, PrimitiveType] = {
    **{t: PrimitiveType(n) for n, t in _TO_ARROW.items() if n != "uuid"},
    pa.string(): PrimitiveType("string"),
    pa.binary(): PrimitiveType("binary"),
}


def primitive_to_arrow(t: PrimitiveType) -> pa.DataType:
    """The Arrow type calving writes for an Iceberg primitive."""
    if t.name in _TO_ARROW:
        return _TO_ARROW[t.name]
    if t.name == "decimal":
        return pa.decimal128(t.precision, t.scale)
    if t.name == "fixed":
        return pa.binary(t.length)
    raise SchemaError(f"no Arrow type for {t}")


def type_to_arrow(t: IcebergType) -> pa.DataType:
    """The Arrow type of an Iceberg type; nested fields carry their ids."""
    if isinstance(t, PrimitiveType):
        return primitive_to_arrow(t)
    if isinstance(t, StructType):
        return pa.struct([field_to_arrow(f) for f in t.fields])
    if isinstance(t, ListType):
        return pa.large_list(field_to_arrow(t.element_field))
    if isinstance(t, MapType):
        return pa.map_(field_to_arrow(t.key_field), field_to_arrow(t.value_field))
    raise SchemaError(f"no Arrow type for {t}")


def field_to_arrow(f: NestedField) -> pa.Field:
    return pa.field(
        f.name,
        type_to_arrow(f.field_type),
        nullable=not f.required,
        metadata={FIELD_ID_KEY: str(f.field_id).encode()},
    )


def schema_to_arrow(schema: Schema) -> pa.Schema:
    """An Iceberg schema as an Arrow schema with Parquet field ids."""
    return pa.schema([field_to_arrow(f) for f in schema.fields])


def primitive_from_arrow(t: pa.DataType) -> PrimitiveType:
    """The Iceberg primitive of an Arrow type; ``SchemaError`` if there is none."""
    if pa.types.is_timestamp(t) and t.tz is not None:
        t = pa.timestamp(t.unit, tz="UTC")  # an instant, whatever zone it is shown in
    found = _FROM_ARROW.get(t)
    if found is not None:
        return found
    if pa.types.is_decimal(t):
        return decimal(t.precision, t.scale)
    if pa.types.is_fixed_size_binary(t):
        return fixed(t.byte_width)
    raise SchemaError(f"no Iceberg type for Arrow {t}")
