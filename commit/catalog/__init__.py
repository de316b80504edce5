"""Catalogs: where a table's current metadata location lives and is swapped atomically."""

from commit.catalog.base import Catalog, TableIdent
from commit.catalog.filesystem import FilesystemCatalog
from commit.catalog.sql import SqlCatalog

__all__ = ["Catalog", "TableIdent", "SqlCatalog", "FilesystemCatalog"]
