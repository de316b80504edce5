"""Infer an Iceberg schema from a sample of JSON values.

Conservative by design: integers -> long, other numbers -> double (a field with both
widens to double), strings stay strings unless ``detect_temporal`` is set (then a field
whose every string is an ISO-8601 timestamp with offset becomes timestamptz, without
offset timestamp, a plain date date), objects -> struct, arrays -> list. Every field is
optional and field ids are fresh from 1 (top-level fields first, then each nested level).

Decided by the records that agree: at each field the kind most records hold wins
(numbers and strings each count as one family, so 1 and 1.5, or a date and a name, do
not disagree); a record whose value of some field is of another family disagrees with
the sample and is left out, with all its fields (so a poison record can neither change
a column's type, nor drop it, nor add its own columns), and counted in ``disagreeing``;
the stream then dead-letters it like any record that does not fit.

A field that still cannot get one type is left out of the schema and explained in
``conflicts``: two families tied, only nulls, only empty lists, nesting deeper than
``max_depth``, or an object none of whose fields could be typed (never an empty struct).
Values that are not JSON objects are counted in ``skipped`` and not read.
"""

from __future__ import annotations

import re
from collections import Counter
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

    kinds: Counter[str] = field(default_factory=Counter)
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
    #: Records that disagree with the schema (a field's value of another family than its
    #: column): the stream dead-letters them.
    disagreeing: int = 0


def infer_schema(
    values: Iterable[bytes | str | Mapping[str, Any] | None],
    *,
    detect_temporal: bool = False,
    max_depth: int = 32,
) -> InferredSchema:
    objects: list[dict[str, Any]] = []
    skipped = 0
    for value in values:
        obj = _as_object(value)
        if obj is None:
            skipped += 1
        else:
            objects.append(obj)
    # Leave out the records that disagree with the majority, until none does (each
    # round only removes records, so this ends).
    agreeing = objects
    while True:
        root = _shape_of(agreeing, detect_temporal, max_depth)
        majority = _resolve_fields(root, "", {})
        keep = [o for o in agreeing if _agrees(o, majority, detect_temporal)]
        if len(keep) == len(agreeing):
            break
        agreeing = keep
    conflicts: dict[str, str] = {}
    resolved = _resolve_fields(root, "", conflicts)
    return InferredSchema(
        Schema(assign_fresh_ids(resolved, FieldIds())),
        conflicts,
        len(objects),
        skipped,
        disagreeing=sum(1 for o in objects if not _agrees(o, resolved, detect_temporal)),
    )


def _shape_of(objects: Iterable[Mapping[str, Any]], detect: bool, max_depth: int) -> _Shape:
    root = _Shape()
    for obj in objects:
        _merge_object(root, obj, detect, 1, max_depth)
    return root


#: Kinds that never disagree with each other (a field may widen within its family).
_FAMILY = {
    "long": "number",
    "double": "number",
    "string": "text",
    "timestamptz": "text",
    "timestamp": "text",
    "date": "text",
}


def _family_of_type(t: IcebergType) -> str:
    if isinstance(t, StructType):
        return "struct"
    if isinstance(t, ListType):
        return "list"
    return _FAMILY.get(str(t), str(t))


def _agrees(obj: Mapping[str, Any], fields: tuple[NestedField, ...], detect: bool) -> bool:
    """Whether every field of ``obj`` the majority typed holds a value of that family."""
    typed = {f.name: f.field_type for f in fields}
    for key, value in obj.items():
        t = typed.get(str(key))
        if t is not None and not _value_agrees(value, t, detect):
            return False
    return True


def _value_agrees(value: Any, t: IcebergType, detect: bool) -> bool:
    if value is None:
        return True
    kind = _kind(value, detect)
    if _FAMILY.get(kind, kind) != _family_of_type(t):
        return False
    if kind == "double" and str(t) == "long":
        return False  # a long column takes no double (the decoder refuses 0.0 there too)
    if isinstance(t, StructType):
        return _agrees(value, t.fields, detect)
    if isinstance(t, ListType):
        return all(_value_agrees(e, t.element_type, detect) for e in value)
    return True


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
    shape.kinds[kind] += 1
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
    counts = Counter({k: n for k, n in shape.kinds.items() if k != "null"})
    if not counts:
        conflicts[path] = "only null values seen; type unknown"
        return None
    families = Counter[str]()
    for k, n in counts.items():
        families[_FAMILY.get(k, k)] += n
    ranked = families.most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        tied = sorted(f for f, n in ranked if n == ranked[0][1])
        conflicts[path] = f"values of different kinds, as many of each: {', '.join(tied)}"
        return None
    winner = ranked[0][0]
    kinds = {k for k in counts if _FAMILY.get(k, k) == winner}
    if kinds == {"long", "double"}:
        kinds = {"double"}
    if len(kinds) > 1:  # several kinds of text: strings
        kinds = {"string"}
    if shape.too_deep:
        conflicts[path] = "nested deeper than the inference limit"
        return None
    kind = kinds.pop()
    if kind == "struct":
        children = _resolve_fields(shape, path + ".", conflicts)
        if not children:  # never an empty struct (no writer or reader takes one)
            conflicts[path] = "an object none of whose fields could be typed"
            return None
        return StructType(children)
    if kind == "list":
        if shape.element is None or not (set(shape.element.kinds) - {"null"}):
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
