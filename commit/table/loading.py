"""Loading a table's current metadata from the catalog, through the parsed-metadata
cache (``calving.commit.catalog.metadata_cache``)."""

from __future__ import annotations

import time
from collections.abc import Callable

from calving.commit.catalog.base import Catalog, TableIdent
from calving.commit.catalog.metadata_cache import read_metadata_cached
from calving.commit.errors import CalvingError, CatalogUnavailableError
from calving.commit.io import FileIO
from calving.commit.spec.metadata import TableMetadata


def load_metadata(catalog: Catalog, io: FileIO, ident: TableIdent) -> tuple[str, TableMetadata]:
    location = catalog.load_metadata_location(ident)
    return location, read_metadata_cached(io, location)


def reload_metadata(catalog: Catalog, io: FileIO, ident: TableIdent) -> tuple[str, TableMetadata]:
    """``load_metadata``, trying a few times over ~3.6 s while the catalog is
    unavailable; its last ``CatalogUnavailableError`` if it stays so."""
    last: CalvingError | None = None
    for delay in (0.0, 0.1, 0.5, 1.0, 2.0):
        if delay:
            time.sleep(delay)
        try:
            return load_metadata(catalog, io, ident)
        except CatalogUnavailableError as err:
            last = err
    assert last is not None
    raise last


def look_in_catalog(
    catalog: Catalog, io: FileIO, ident: TableIdent, sleep: Callable[[float], None]
) -> tuple[str, TableMetadata] | None:
    """The table as the catalog has it now, or None if the catalog cannot be read."""
    for delay in (0.0, 0.2, 1.0, 3.0):
        if delay:
            sleep(delay)
        try:
            return load_metadata(catalog, io, ident)
        except CatalogUnavailableError:
            continue
    return None
