"""Building small real tables for tests: a schema, Parquet files, commits."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from calving.commit.catalog.base import Catalog
from calving.commit.spec.partition import PartitionSpec, spec_builder
from calving.commit.spec.schema import Schema
from calving.commit.spec.transforms import IDENTITY, Transform, bucket
from calving.commit.spec.types import LONG, STRING, TIMESTAMPTZ, NestedField
from calving.commit.table.table import Table, create_table
from calving.ingest.write.parquet_writer import write_data_file

EVENTS = Schema(
    (
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "region", STRING, required=True),
        NestedField(3, "ts", TIMESTAMPTZ, required=True),
        NestedField(4, "payload", STRING),
    ),
    identifier_field_ids=(1,),
)
COLUMNS = ["id", "region", "ts", "payload"]


def events_spec(schema: Schema = EVENTS) -> PartitionSpec:
    return spec_builder(
        schema, fields=[("region", IDENTITY), ("id", bucket(4)), ("ts", Transform("day"))]
    )


def make_table(
    catalog: Catalog,
    name: str = "events",
    spec: PartitionSpec | None = None,
    properties: dict[str, str] | None = None,
) -> Table:
    return create_table(
        catalog, ("db", name), EVENTS, spec=spec or events_spec(), properties=properties
    )


def row(i: int, region: str = "eu", day: int = 0, payload: str | None = None) -> dict[str, Any]:
    ts = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(days=day, seconds=i)
    return {"id": i, "region": region, "ts": ts, "payload": payload or f"p{i}"}


def rows_as_tuples(rows: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in COLUMNS) for r in rows)


def write_partitioned(table: Table, rows: Sequence[dict[str, Any]]):
    """Write rows as one data file per partition; returns [(DataFile, rows in file order)]."""
    spec = table.metadata.spec
    schema = table.metadata.schema
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        src = [_internal_source(schema, f.source_id, r) for f in spec.fields]
        groups.setdefault(spec.partition_for(schema, src), []).append(r)
    out = []
    for partition, members in sorted(groups.items(), key=lambda kv: repr(kv[0])):
        path = spec.partition_path(schema, partition)
        location = f"{table.metadata.location}/data/{path}/{uuid.uuid4()}.parquet"
        arrow = pa.Table.from_pylist(members)
        out.append(
            (
                write_data_file(
                    table.io, location, arrow, schema, partition=partition, spec_id=spec.spec_id
                ),
                members,
            )
        )
    return out


def _internal_source(schema: Schema, source_id: int, r: dict[str, Any]) -> Any:
    f = schema.find_field(source_id)
    v = r[f.name]
    if isinstance(v, dt.datetime):
        d = v - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
        return (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
    return v
