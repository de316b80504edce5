"""Catalogs: where a table's current metadata location lives and is swapped atomically."""

from calving.commit.catalog.base import Catalog, Namespace, TableIdent
from calving.commit.catalog.faults import FaultPlan, SwapFault
from calving.commit.catalog.filesystem import FilesystemCatalog
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
