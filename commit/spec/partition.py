"""Partition specs: fields, JSON form, the partition struct type, partition tuples of
rows or Arrow columns, and Hive-style partition paths.

Partition tuples hold values in calving's internal representation (see
``calving.commit.spec.values``), one per spec field, in spec field order.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from calving.commit.errors import SchemaError, UnsupportedFeatureError
from calving.commit.spec.schema import Schema
from calving.commit.spec.transforms import (
    IDENTITY,
    VOID,
    Binder,
    Transform,
    bucket,
    parse_transform,
    truncate,
)
from calving.commit.spec.types import NestedField, PrimitiveType, StructType

FIRST_PARTITION_FIELD_ID = 1000
# ``last-partition-id`` of a table that never had a partition field.
NO_PARTITION_FIELD_ID = FIRST_PARTITION_FIELD_ID - 1

_DEFAULT_NAME_SUFFIX = {
    "bucket": "bucket",
    "truncate": "trunc",
    "year": "year",
    "month": "month",
    "day": "day",
    "hour": "hour",
    "void": "null",
}


@dataclass(frozen=True)
class PartitionField:
    source_id: int
    field_id: int
    transform: Transform
    name: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "transform": str(self.transform),
            "source-id": self.source_id,
            "field-id": self.field_id,
        }

    @staticmethod
    def from_json(obj: Mapping[str, Any], default_field_id: int) -> PartitionField:
        """One field of a spec's JSON; v1 specs lack ``field-id`` and get
        ``default_field_id``. Unknown transforms are kept (v3 readers must load them)."""
        try:
            if "source-id" in obj:
                source_id = int(obj["source-id"])
            else:
                source_ids = [int(i) for i in obj["source-ids"]]
                if len(source_ids) != 1:
                    raise UnsupportedFeatureError(
                        f"partition field {obj.get('name')!r}: multi-argument transforms "
                        "are not supported"
                    )
                source_id = source_ids[0]
            return PartitionField(
                source_id=source_id,
                field_id=int(obj.get("field-id", default_field_id)),
                transform=parse_transform(str(obj["transform"]), allow_unknown=True),
                name=str(obj["name"]),
            )
        except KeyError as exc:
            raise SchemaError(f"partition field JSON lacks {exc.args[0]!r}: {obj!r}") from None


@dataclass(frozen=True)
class PartitionSpec:
    spec_id: int = 0
    fields: tuple[PartitionField, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        ids: set[int] = set()
        names: set[str] = set()
        for f in self.fields:
            if f.field_id in ids:
                raise SchemaError(f"partition field id {f.field_id} ({f.name!r}) is used twice")
            if not f.name:
                raise SchemaError(f"partition field {f.field_id} has an empty name")
            if f.name in names:
                raise SchemaError(f"partition field name {f.name!r} is used twice")
            ids.add(f.field_id)
            names.add(f.name)

    @property
    def is_unpartitioned(self) -> bool:
        """No fields, or only void ones: every row lands in the one empty partition."""
        return all(f.transform.is_void for f in self.fields)

    @property
    def last_assigned_field_id(self) -> int:
        return max((f.field_id for f in self.fields), default=NO_PARTITION_FIELD_ID)

    def equivalent(self, other: PartitionSpec) -> bool:
        """Same fields (source ids, transforms, names) in the same order, ids aside; the
        spec forbids adding a spec equivalent to an existing one."""
        return [(f.source_id, f.transform, f.name) for f in self.fields] == [
            (f.source_id, f.transform, f.name) for f in other.fields
        ]

    # ------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        return {"spec-id": self.spec_id, "fields": self.fields_to_json()}

    def fields_to_json(self) -> list[dict[str, Any]]:
        """The bare field list, as the manifest's ``partition-spec`` metadata key holds."""
        return [f.to_json() for f in self.fields]

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> PartitionSpec:
        try:
            spec_id = int(obj["spec-id"])
            raw_fields = obj["fields"]
        except KeyError as exc:
            raise SchemaError(f"partition spec JSON lacks {exc.args[0]!r}") from None
        return PartitionSpec.from_fields_json(raw_fields, spec_id)

    @staticmethod
    def from_fields_json(raw_fields: Sequence[Mapping[str, Any]], spec_id: int) -> PartitionSpec:
        return PartitionSpec(
            spec_id,
            tuple(
                PartitionField.from_json(f, FIRST_PARTITION_FIELD_ID + i)
                for i, f in enumerate(raw_fields)
            ),
        )

    # ------------------------------------------------------------ against a schema

    def validate(self, schema: Schema) -> None:
        """Raise ``SchemaError`` naming the field unless every source exists as a
        primitive outside lists and maps and its transform can apply to it."""
        self.bind(schema)

    def bind(self, schema: Schema) -> BoundPartitionSpec:
        return BoundPartitionSpec(self, schema)

    def source_types(self, schema: Schema) -> tuple[PrimitiveType, ...]:
        return self.bind(schema).source_types

    def partition_type(self, schema: Schema) -> StructType:
        """The ``partition`` struct of manifests: partition field ids and names, optional,
        each of its transform's result type."""
        return self.bind(schema).partition_type

    def partition_for_row(self, schema: Schema, row: Mapping[int, Any]) -> tuple[Any, ...]:
        return self.bind(schema).partition_for_row(row)

    def partition_for_values(self, schema: Schema, source_values: Sequence[Any]) -> tuple[Any, ...]:
        return self.bind(schema).partition_for_values(source_values)

    # Same as ``partition_for_values`` (the name callers used first).
    partition_for = partition_for_values

    def partition_path(self, schema: Schema, partition: Sequence[Any]) -> str:
        return self.bind(schema).partition_path(partition)


class BoundPartitionSpec:
    """A spec checked against one schema, with its transforms bound to their source
    types: the form to use per row or per batch."""

    def __init__(self, spec: PartitionSpec, schema: Schema) -> None:
        self.spec = spec
        self.schema = schema
        candidates = _partition_sources(schema)
        types: list[PrimitiveType] = []
        for f in spec.fields:
            source = candidates.get(f.source_id)
            where = f"partition field {f.name!r} (source id {f.source_id})"
            if source is None:
                found = schema.find_field(f.source_id)
                if found is None:
                    raise SchemaError(f"{where}: source column is not in the schema")
                raise SchemaError(
                    f"{where}: source column {schema.column_name(f.source_id)!r} must be a "
                    "primitive outside lists and maps"
                )
            assert isinstance(source.field_type, PrimitiveType)
            if not f.transform.is_known:
                raise UnsupportedFeatureError(f"{where}: unknown transform {f.transform}")
            if not f.transform.can_transform(source.field_type):
                raise SchemaError(
                    f"{where}: transform {f.transform} cannot apply to column "
                    f"{schema.column_name(f.source_id)!r} of type {source.field_type}"
                )
            types.append(source.field_type)
        self.source_types: tuple[PrimitiveType, ...] = tuple(types)
        self.partition_type = StructType(
            tuple(
                NestedField(f.field_id, f.name, f.transform.result_type(t), required=False)
                for f, t in zip(spec.fields, types)
            )
        )
        self._binders: tuple[Binder, ...] = tuple(
            f.transform.bind(t) for f, t in zip(spec.fields, types)
        )

    def partition_for_row(self, row: Mapping[int, Any]) -> tuple[Any, ...]:
        """Partition tuple of a row given as source field id -> value (absent = null)."""
        return self.partition_for_values([row.get(f.source_id) for f in self.spec.fields])

    def partition_for_values(self, source_values: Sequence[Any]) -> tuple[Any, ...]:
        """Partition tuple from each spec field's source value, in spec field order."""
        if len(source_values) != len(self._binders):
            raise SchemaError(
                f"spec {self.spec.spec_id} has {len(self._binders)} fields, "
                f"got {len(source_values)} source values"
            )
        return tuple(
            None if v is None else bind(v) for bind, v in zip(self._binders, source_values)
        )

    def partition_arrays(self, source_arrays: Mapping[int, pa.Array]) -> list[pa.Array]:
        """One Arrow array of partition values per spec field, from the source columns
        keyed by source field id (see ``Transform.apply_arrow`` for result types)."""
        out = []
        for f, source_type in zip(self.spec.fields, self.source_types):
            if f.source_id not in source_arrays:
                raise SchemaError(
                    f"partition field {f.name!r}: no column for source id {f.source_id}"
                )
            out.append(f.transform.apply_arrow(source_arrays[f.source_id], source_type))
        return out

    def partition_path(self, partition: Sequence[Any]) -> str:
        """Hive-style ``name=value/...`` with readable, URL-quoted values."""
        if len(partition) != len(self.spec.fields):
            raise SchemaError(
                f"spec {self.spec.spec_id} has {len(self.spec.fields)} fields, "
                f"partition tuple has {len(partition)}"
            )
        parts = []
        for f, source_type, value in zip(self.spec.fields, self.source_types, partition):
            text = f.transform.to_human_string(value, source_type)
            name = urllib.parse.quote_plus(f.name, safe="")
            parts.append(f"{name}={urllib.parse.quote_plus(text, safe='')}")
        return "/".join(parts)


def _partition_sources(schema: Schema) -> dict[int, NestedField]:
    """Primitive fields reachable through structs only (partition sources may not sit
    inside a list or a map)."""
    out: dict[int, NestedField] = {}
    pending = list(schema.fields)
    while pending:
        f = pending.pop()
        if isinstance(f.field_type, StructType):
            pending.extend(f.field_type.fields)
        elif isinstance(f.field_type, PrimitiveType):
            out[f.field_id] = f
    return out


UNPARTITIONED = PartitionSpec(0)


class PartitionSpecBuilder:
    """Builds a spec by column name, assigning field ids after ``last_assigned_field_id``
    and Java's default names (``id_bucket``, ``ts_day``, ``name_trunc`` ...).

    Checks as Java's builder does: names unique and not shadowing another column,
    no repeated (column, transform), at most one of year/month/day/hour per column.
    """

    def __init__(
        self,
        schema: Schema,
        spec_id: int = 0,
        last_assigned_field_id: int = NO_PARTITION_FIELD_ID,
    ) -> None:
        self._schema = schema
        self._spec_id = spec_id
        self._last_id = last_assigned_field_id
        self._fields: list[PartitionField] = []

    def add(
        self,
        column: str,
        transform: Transform,
        name: str | None = None,
        field_id: int | None = None,
    ) -> PartitionSpecBuilder:
        source = self._schema.find_field_by_name(column)
        if source is None:
            raise SchemaError(f"cannot partition by {column!r}: no such column")
        if name is None:
            suffix = _DEFAULT_NAME_SUFFIX.get(transform.name)
            name = column if suffix is None else f"{column}_{suffix}"
        self._check_name(name, source, transform)
        for f in self._fields:
            if f.source_id == source.field_id and (
                f.transform == transform or (f.transform.is_temporal and transform.is_temporal)
            ):
                raise SchemaError(
                    f"cannot add {transform}({column}) as {name!r}: redundant with "
                    f"{f.transform}({column}) in field {f.name!r}"
                )
        if field_id is None:
            field_id = self._last_id + 1
        self._last_id = max(self._last_id, field_id)
        self._fields.append(PartitionField(source.field_id, field_id, transform, name))
        return self

    def identity(self, column: str, name: str | None = None) -> PartitionSpecBuilder:
        return self.add(column, IDENTITY, name)

    def bucket(
        self, column: str, num_buckets: int, name: str | None = None
    ) -> PartitionSpecBuilder:
        return self.add(column, bucket(num_buckets), name)

    def truncate(self, column: str, width: int, name: str | None = None) -> PartitionSpecBuilder:
        return self.add(column, truncate(width), name)

    def year(self, column: str, name: str | None = None) -> PartitionSpecBuilder:
        return self.add(column, Transform("year"), name)

    def month(self, column: str, name: str | None = None) -> PartitionSpecBuilder:
        return self.add(column, Transform("month"), name)

    def day(self, column: str, name: str | None = None) -> PartitionSpecBuilder:
        return self.add(column, Transform("day"), name)

    def hour(self, column: str, name: str | None = None) -> PartitionSpecBuilder:
        return self.add(column, Transform("hour"), name)

    def void(self, column: str, name: str | None = None) -> PartitionSpecBuilder:
        return self.add(column, VOID, name)

    def build(self) -> PartitionSpec:
        spec = PartitionSpec(self._spec_id, tuple(self._fields))
        spec.validate(self._schema)
        return spec

    def _check_name(self, name: str, source: NestedField, transform: Transform) -> None:
        if not name:
            raise SchemaError("partition field name must not be empty")
        if any(f.name == name for f in self._fields):
            raise SchemaError(f"partition field name {name!r} is used twice")
        shadowed = self._schema.find_field_by_name(name)
        if shadowed is not None and not (
            transform == IDENTITY and shadowed.field_id == source.field_id
        ):
            raise SchemaError(
                f"partition field name {name!r} would shadow schema column {name!r}; "
                "only an identity partition of that column may use its name"
            )


def spec_builder(
    schema: Schema,
    spec_id: int = 0,
    first_field_id: int = FIRST_PARTITION_FIELD_ID,
    fields: Sequence[tuple[str, Transform]] = (),
) -> PartitionSpec:
    """A spec from (column name, transform) pairs with default names, in one call."""
    builder = PartitionSpecBuilder(schema, spec_id, first_field_id - 1)
    for column, transform in fields:
        builder.add(column, transform)
    return builder.build()
