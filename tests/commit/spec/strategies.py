"""Hypothesis strategies for Iceberg types and schemas, shared by spec tests."""

from __future__ import annotations

from hypothesis import strategies as st

from calving.commit.spec.schema import Schema
from calving.commit.spec.types import (
    PRIMITIVE_NAMES,
    IcebergType,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
    decimal,
    fixed,
)

primitive_types = st.one_of(
    st.sampled_from([PrimitiveType(n) for n in PRIMITIVE_NAMES if n != "unknown"]),
    st.builds(lambda p, s: decimal(p, min(s, p)), st.integers(1, 38), st.integers(0, 38)),
    st.builds(fixed, st.integers(1, 64)),
)

names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=12
)


@st.composite
def nested_types(draw: st.DrawFn, next_id: list[int], depth: int = 0) -> IcebergType:
    def fresh() -> int:
        next_id[0] += 1
        return next_id[0]

    if depth >= 2:
        return draw(primitive_types)
    kind = draw(st.sampled_from(["prim", "prim", "struct", "list", "map"]))
    if kind == "prim":
        return draw(primitive_types)
    if kind == "list":
        eid = fresh()
        return ListType(eid, draw(nested_types(next_id, depth + 1)), draw(st.booleans()))
    if kind == "map":
        kid, vid = fresh(), fresh()
        return MapType(
            kid,
            draw(primitive_types),
            vid,
            draw(nested_types(next_id, depth + 1)),
            draw(st.booleans()),
        )
    return StructType(tuple(draw(field_lists(next_id, depth + 1))))


@st.composite
def field_lists(draw: st.DrawFn, next_id: list[int], depth: int = 0) -> list[NestedField]:
    field_names = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    out = []
    for name in field_names:
        next_id[0] += 1
        fid = next_id[0]
        out.append(
            NestedField(
                fid,
                name,
                draw(nested_types(next_id, depth)),
                draw(st.booleans()),
                draw(st.none() | names),
            )
        )
    return out


@st.composite
def schemas(draw: st.DrawFn) -> Schema:
    fields = draw(field_lists([0]))
    candidates = [
        f.field_id
        for f in fields
        if f.required
        and isinstance(f.field_type, PrimitiveType)
        and f.field_type.name not in ("float", "double")
    ]
    ids = draw(st.lists(st.sampled_from(candidates), unique=True)) if candidates else []
    return Schema(tuple(fields), draw(st.integers(0, 5)), tuple(ids))
