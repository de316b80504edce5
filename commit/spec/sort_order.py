"""Sort orders: fields of (source column, transform, direction, null order), JSON form.

Order id 0 is reserved for the unsorted order (no fields).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from calving.commit.errors import SchemaError, UnsupportedFeatureError
from calving.commit.spec.schema import Schema
from calving.commit.spec.transforms import IDENTITY, Transform, parse_transform
from calving.commit.spec.types import PrimitiveType

ASC = "asc"
DESC = "desc"
NULLS_FIRST = "nulls-first"
NULLS_LAST = "nulls-last"
UNSORTED_ORDER_ID = 0


@dataclass(frozen=True)
class SortField:
    source_id: int
    transform: Transform = IDENTITY
    direction: str = ASC
    null_order: str = NULLS_FIRST

    def __post_init__(self) -> None:
        if self.direction not in (ASC, DESC):
            raise SchemaError(f"sort direction must be asc or desc, got {self.direction!r}")
        if self.null_order not in (NULLS_FIRST, NULLS_LAST):
            raise SchemaError(
                f"sort null order must be nulls-first or nulls-last, got {self.null_order!r}"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "transform": str(self.transform),
            "source-id": self.source_id,
            "direction": self.direction,
            "null-order": self.null_order,
        }

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> SortField:
        try:
            if "source-id" in obj:
                source_id = int(obj["source-id"])
            else:
                source_ids = [int(i) for i in obj["source-ids"]]
                if len(source_ids) != 1:
                    raise UnsupportedFeatureError(
                        "sort fields with multi-argument transforms are not supported"
                    )
                source_id = source_ids[0]
            return SortField(
                source_id=source_id,
                transform=parse_transform(str(obj["transform"]), allow_unknown=True),
                direction=str(obj["direction"]),
                null_order=str(obj["null-order"]),
            )
        except KeyError as exc:
            raise SchemaError(f"sort field JSON lacks {exc.args[0]!r}: {obj!r}") from None


def asc(
    source_id: int, transform: Transform = IDENTITY, null_order: str = NULLS_FIRST
) -> SortField:
    """Ascending; nulls first by default, as Java's ``SortOrder.Builder.asc``."""
    return SortField(source_id, transform, ASC, null_order)


def desc(
    source_id: int, transform: Transform = IDENTITY, null_order: str = NULLS_LAST
) -> SortField:
    """Descending; nulls last by default, as Java's ``SortOrder.Builder.desc``."""
    return SortField(source_id, transform, DESC, null_order)


@dataclass(frozen=True)
class SortOrder:
    order_id: int
    fields: tuple[SortField, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.order_id < 0:
            raise SchemaError(f"sort order id must not be negative, got {self.order_id}")
        if self.order_id == UNSORTED_ORDER_ID and self.fields:
            raise SchemaError("sort order id 0 is reserved for the unsorted order")
        if self.order_id != UNSORTED_ORDER_ID and not self.fields:
            raise SchemaError(f"sort order {self.order_id} has no fields; use order id 0")

    @property
    def is_unsorted(self) -> bool:
        return not self.fields

    def to_json(self) -> dict[str, Any]:
        return {"order-id": self.order_id, "fields": [f.to_json() for f in self.fields]}

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> SortOrder:
        try:
            order_id = int(obj["order-id"])
            raw_fields = obj["fields"]
        except KeyError as exc:
            raise SchemaError(f"sort order JSON lacks {exc.args[0]!r}") from None
        return SortOrder(order_id, tuple(SortField.from_json(f) for f in raw_fields))

    def validate(self, schema: Schema) -> None:
        """Raise ``SchemaError`` naming the field unless every source column exists as a
        primitive and its transform applies to it."""
        for f in self.fields:
            source = schema.find_field(f.source_id)
            if source is None:
                raise SchemaError(f"sort field source id {f.source_id} is not in the schema")
            column = schema.column_name(f.source_id)
            if not isinstance(source.field_type, PrimitiveType):
                raise SchemaError(f"sort column {column!r} must be a primitive")
            if not f.transform.is_known:
                raise UnsupportedFeatureError(
                    f"sort column {column!r}: unknown transform {f.transform}"
                )
            if not f.transform.can_transform(source.field_type):
                raise SchemaError(
                    f"sort column {column!r}: transform {f.transform} cannot apply to "
                    f"{source.field_type}"
                )

    def same_order(self, other: SortOrder) -> bool:
        """Same fields in the same order, whatever the ids (to reuse an existing order)."""
        return self.fields == other.fields


UNSORTED = SortOrder(UNSORTED_ORDER_ID)
