"""Catalogs: where a table's current metadata location lives and is swapped atomically.

``SqlCatalog`` is imported on first use: it brings SQLAlchemy (0.14 s), which a Spark
executor's Python worker, importing ``Table`` through this package, never needs.
"""

from typing import TYPE_CHECKING, Any

from calving.commit.catalog.base import Catalog, Namespace, TableIdent
from calving.commit.catalog.faults import FaultPlan, SwapFault
from calving.commit.catalog.filesystem import FilesystemCatalog

if TYPE_CHECKING:
    from calving.commit.catalog.sql import SqlCatalog

__all__ = [
    "Catalog",
    "FaultPlan",
    "FilesystemCatalog",
    "Namespace",
    "SqlCatalog",
    "SwapFault",
    "TableIdent",
]


def __getattr__(name: str) -> Any:
    if name == "SqlCatalog":
        from calving.commit.catalog.sql import SqlCatalog

        return SqlCatalog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
