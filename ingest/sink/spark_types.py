"""Arrow schemas of the sink's ``mapInArrow`` stages as Spark schemas.

Spark has no fixed-size binary (Iceberg uuid and fixed) and no time of day, so those
travel as binary and as microseconds (long); the Parquet writer casts them back."""

from __future__ import annotations

from typing import Any

import pyarrow as pa


def spark_safe(t: pa.DataType) -> pa.DataType:
    if pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_time(t):
        return pa.int64()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(spark_safe(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(t.value_field.with_type(spark_safe(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(spark_safe(t.key_type), t.item_field.with_type(spark_safe(t.item_type)))
    return t


def spark_safe_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_type(spark_safe(f.type)) for f in schema])


def spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(spark_safe_schema(schema))
