"""Partition specs: fields, JSON, the partition struct type, partition paths."""

from __future__ import annotations

import datetime as _dt
import urllib.parse
from dataclasses import dataclass
from typing import Any, Sequence

from commit.errors import SchemaError
from commit.spec.schema import Schema
from commit.spec.transforms import Transform, parse_transform
from commit.spec.types import NestedField, PrimitiveType, StructType

FIRST_PARTITION_FIELD_ID = 1000


@dataclass(frozen=True)
class PartitionField:
    source_id: int
    field_id: int
    transform: Transform
    name: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "transform": str(self.transform),
                "source-id": self.source_id, "field-id": self.field_id}


@dataclass(frozen=True)
class PartitionSpec:
    spec_id: int
    fields: tuple[PartitionField, ...] = ()

    @property
    def is_unpartitioned(self) -> bool:
        return all(f.transform.name == "void" for f in self.fields)

    def to_json(self) -> dict[str, Any]:
        return {"spec-id": self.spec_id, "fields": [f.to_json() for f in self.fields]}

    @staticmethod
    def from_json(obj: dict[str, Any]) -> "PartitionSpec":
        try:
            fields = []
            for i, f in enumerate(obj.get("fields", [])):
                fields.append(PartitionField(
                    int(f["source-id"]), int(f.get("field-id", FIRST_PARTITION_FIELD_ID + i)),
                    parse_transform(f["transform"]), str(f["name"])))
            return PartitionSpec(int(obj.get("spec-id", 0)), tuple(fields))
        except KeyError as exc:
            raise SchemaError(f"partition field lacks {exc.args[0]!r}") from None

    def source_types(self, schema: Schema) -> list[PrimitiveType]:
        out = []
        for f in self.fields:
            src = schema.find_field(f.source_id)
            if src is None:
                raise SchemaError(f"partition field {f.name!r}: source id {f.source_id} "
                                  "is not in the schema")
            if not isinstance(src.field_type, PrimitiveType):
                raise SchemaError(f"partition field {f.name!r}: source {src.name!r} is not "
                                  "a primitive")
            if not f.transform.can_transform(src.field_type):
                raise SchemaError(f"partition field {f.name!r}: {f.transform} cannot apply to "
                                  f"{src.name!r} of type {src.field_type}")
            out.append(src.field_type)
        return out

    def partition_type(self, schema: Schema) -> StructType:
        return StructType(tuple(
            NestedField(f.field_id, f.name, f.transform.result_type(t), required=False)
            for f, t in zip(self.fields, self.source_types(schema))
        ))

    def partition_for(self, schema: Schema, source_values: Sequence[Any]) -> tuple[Any, ...]:
        """Partition tuple from the source column values, in spec field order."""
        return tuple(f.transform.apply(t, v) for f, t, v in
                     zip(self.fields, self.source_types(schema), source_values))

    def partition_path(self, schema: Schema, partition: Sequence[Any]) -> str:
        parts = []
        for f, t, v in zip(self.fields, self.source_types(schema), partition):
            text = human_string(f.transform, f.transform.result_type(t), v)
            parts.append(f"{urllib.parse.quote(f.name, safe='')}="
                         f"{urllib.parse.quote(text, safe='')}")
        return "/".join(parts)


def human_string(transform: Transform, result: PrimitiveType, v: Any) -> str:
    if v is None:
        return "null"
    epoch = _dt.date(1970, 1, 1)
    if transform.name == "year":
        return f"{1970 + v:04d}"
    if transform.name == "month":
        return f"{1970 + v // 12:04d}-{v % 12 + 1:02d}"
    if transform.name == "hour":
        t = _dt.datetime(1970, 1, 1) + _dt.timedelta(hours=v)
        return t.strftime("%Y-%m-%d-%H")
    if result.name == "date":
        return (epoch + _dt.timedelta(days=v)).isoformat()
    if result.name in ("timestamp", "timestamptz"):
        return (_dt.datetime(1970, 1, 1) + _dt.timedelta(microseconds=v)).isoformat()
    if isinstance(v, bytes):
        import base64

        return base64.b64encode(v).decode()
    return str(v).lower() if isinstance(v, bool) else str(v)


def spec_builder(schema: Schema, spec_id: int = 0, first_field_id: int = FIRST_PARTITION_FIELD_ID,
                 fields: Sequence[tuple[str, Transform]] = ()) -> PartitionSpec:
    """A spec from (source column name, transform) pairs, with Java's default names."""
    out = []
    for i, (column, transform) in enumerate(fields):
        src = schema.find_field_by_name(column)
        if src is None:
            raise SchemaError(f"cannot partition by {column!r}: no such column")
        suffix = {"bucket": "bucket", "truncate": "trunc"}.get(transform.name, transform.name)
        name = column if transform.name == "identity" else f"{column}_{suffix}"
        out.append(PartitionField(src.field_id, first_field_id + i, transform, name))
    spec = PartitionSpec(spec_id, tuple(out))
    spec.partition_type(schema)
    return spec


UNPARTITIONED = PartitionSpec(0)
