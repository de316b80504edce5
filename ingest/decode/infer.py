"""Infer an Iceberg schema from a sample of JSON values.

Conservative by design: integers -> long, other numbers -> double (a field with both
widens to double), strings stay strings unless ``detect_temporal`` is set (then a field
whose every string is an ISO-8601 timestamp with offset becomes timestamptz, without
offset timestamp, a plain date date), objects -> struct, arrays -> list. Every field is
optional and field ids are fresh from 1 (top-level fields first, then each nested level).

A field that cannot get one type is left out of the schema and explained in
``conflicts``: mixed kinds (e.g. string and long), only nulls, only empty lists, or
nesting deeper than ``max_depth``. Values that are not JSON objects are counted in
``skipped`` and not read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from calving.commit.spec.schema import FieldIds, Schema, assign_fresh_ids
from calving.commit.spec.types import (
    BOOLEAN,
    DATE,
    DOUBLE,
    LONG,
    STRING,
    TIMESTAMP,
    TIMESTAMPTZ,
    IcebergType,
    ListType,
    NestedField,
    StructType,
)
from calving.ingest.decode.batch import Reject
from calving.ingest.decode.coerce import DATE_PATTERN, OFFSET_PATTERN, TIMESTAMP_PATTERN
from calving.ingest.decode.json_values import parse_json

_ZONED = re.compile(TIMESTAMP_PATTERN.removesuffix("?") + r"\Z")
_NAIVE = re.compile(TIMESTAMP_PATTERN.removesuffix(OFFSET_PATTERN + "?") + r"\Z")
_DATE = re.compile(DATE_PATTERN + r"\Z")


@dataclass
class _Shape:
    """Everything seen at one path: the kinds of values and, for objects and arrays,
    the shapes of their members."""

    kinds: set[str] = field(default_factory=set)
    fields: dict[str, _Shape] = field(default_factory=dict)
    element: _Shape | None = None
    too_deep: bool = False


@dataclass(frozen=True)
class InferredSchema:
    schema: Schema
    conflicts: dict[str, str]
    """Dotted field path -> why the field is not in the schema."""
    records_read: int
    skipped: int


def infer_schema(
    values: Iterable[bytes | str | Mapping[str, Any] | None],
    *,
    detect_temporal: bool = False,
    max_depth: int = 32,
) -> InferredSchema:
    root = _Shape()
    read = skipped = 0
    for value in values:
        obj = _as_object(value)
        if obj is None:
            skipped += 1
            continue
        read += 1
        _merge_object(root, obj, detect_temporal, 1, max_depth)
    conflicts: dict[str, str] = {}
    resolved = _resolve_fields(root, "", conflicts)
    return InferredSchema(Schema(assign_fresh_ids(resolved, FieldIds())), conflicts, read, skipped)


def _as_object(value: Any) -> dict[str, Any] | None:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        value = value.encode("utf-8", "surrogatepass")
    if isinstance(value, (bytes, bytearray)):
        try:
            parsed = parse_json(bytes(value))
        except Reject:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def _kind(value: Any, detect_temporal: bool) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        if detect_temporal:
            if _ZONED.match(value):
                return "timestamptz"
            if _NAIVE.match(value):
                return "timestamp"
            if _DATE.match(value):
                return "date"
        return "string"
    if isinstance(value, dict):
        return "struct"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


def _merge_object(
    shape: _Shape, obj: Mapping[str, Any], detect: bool, depth: int, limit: int
) -> None:
    for key, value in obj.items():
        child = shape.fields.setdefault(str(key), _Shape())
        _merge_value(child, value, detect, depth, limit)


def _merge_value(shape: _Shape, value: Any, detect: bool, depth: int, limit: int) -> None:
    kind = _kind(value, detect)
    shape.kinds.add(kind)
    if kind not in ("struct", "list"):
        return
    if depth >= limit:
        shape.too_deep = True
        return
    if kind == "struct":
        _merge_object(shape, value, detect, depth + 1, limit)
    else:
        if shape.element is None:
            shape.element = _Shape()
        for e in value:
            _merge_value(shape.element, e, detect, depth + 1, limit)


def _resolve(shape: _Shape, path: str, conflicts: dict[str, str]) -> IcebergType | None:
    """A shape -> a type with placeholder ids (0; ``assign_fresh_ids`` numbers them),
    or None after recording why in ``conflicts``."""
    kinds = shape.kinds - {"null"}
    if kinds == {"long", "double"}:
        kinds = {"double"}
    if len(kinds) > 1 and kinds <= {"string", "timestamptz", "timestamp", "date"}:
        kinds = {"string"}
    if not kinds:
        conflicts[path] = "only null values seen; type unknown"
        return None
    if len(kinds) > 1:
        conflicts[path] = f"values of different kinds: {', '.join(sorted(kinds))}"
        return None
    if shape.too_deep:
        conflicts[path] = "nested deeper than the inference limit"
        return None
    kind = kinds.pop()
    if kind == "struct":
        return StructType(_resolve_fields(shape, path + ".", conflicts))
    if kind == "list":
        if shape.element is None or not (shape.element.kinds - {"null"}):
            conflicts[path] = "only empty lists (or lists of nulls) seen; element type unknown"
            return None
        element = _resolve(shape.element, path + "[]", conflicts)
        return None if element is None else ListType(0, element, element_required=False)
    return {
        "boolean": BOOLEAN,
        "long": LONG,
        "double": DOUBLE,
        "string": STRING,
        "timestamptz": TIMESTAMPTZ,
        "timestamp": TIMESTAMP,
        "date": DATE,
    }[kind]


def _resolve_fields(
    shape: _Shape, prefix: str, conflicts: dict[str, str]
) -> tuple[NestedField, ...]:
    out = []
    for name, child in shape.fields.items():
        t = _resolve(child, prefix + name, conflicts)
        if t is not None:
            out.append(NestedField(0, name, t, required=False))
    return tuple(out)
