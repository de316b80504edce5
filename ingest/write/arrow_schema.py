"""Iceberg schema -> Arrow schema with Parquet field ids (``PARQUET:field_id``).

The mapping itself lives in ``calving.commit.spec.arrow`` (the commit side needs it too);
this module keeps the writer-side names."""

from __future__ import annotations

from calving.commit.spec.arrow import (
    FIELD_ID_KEY,
    primitive_from_arrow,
    primitive_to_arrow,
    schema_to_arrow,
    type_to_arrow,
)

__all__ = [
    "FIELD_ID_KEY",
    "primitive_from_arrow",
    "primitive_to_arrow",
    "schema_to_arrow",
    "type_to_arrow",
]
