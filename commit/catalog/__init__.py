"""Catalogs: where a table's current metadata location lives and is swapped atomically."""

from commit.catalog.base import Catalog, Namespace, TableIdent
from commit.catalog.faults import FaultPlan, SwapFault
from commit.catalog.filesystem import FilesystemCatalog
from commit.catalog.sql import SqlCatalog

__all__ = [
    "Catalog",
    "FaultPlan",
    "FilesystemCatalog",
    "Namespace",
    "SqlCatalog",
    "SwapFault",
    "TableIdent",
]
