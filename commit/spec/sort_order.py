"""Sort orders (JSON form of the table spec)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from commit.spec.transforms import Transform, parse_transform


@dataclass(frozen=True)
class SortField:
    source_id: int
    transform: Transform
    direction: str = "asc"  # asc | desc
    null_order: str = "nulls-first"  # nulls-first | nulls-last

    def to_json(self) -> dict[str, Any]:
        return {"transform": str(self.transform), "source-id": self.source_id,
                "direction": self.direction, "null-order": self.null_order}


@dataclass(frozen=True)
class SortOrder:
    order_id: int
    fields: tuple[SortField, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"order-id": self.order_id, "fields": [f.to_json() for f in self.fields]}

    @staticmethod
    def from_json(obj: dict[str, Any]) -> "SortOrder":
        return SortOrder(
            int(obj["order-id"]),
            tuple(
                SortField(int(f["source-id"]), parse_transform(f["transform"]),
                          f.get("direction", "asc"), f.get("null-order", "nulls-first"))
                for f in obj.get("fields", [])
            ),
        )


UNSORTED = SortOrder(0)
