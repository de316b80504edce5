"""Loading a table's current metadata from the catalog, with a small parsed cache.

Metadata files whose names carry a UUID (Java's, pyiceberg's and the SQL catalog's
"00042-<uuid>.metadata.json") are never rewritten, so their parsed contents are kept
by location: a writer then reads and parses only metadata that someone else wrote,
not the (ever longer) file it has just committed itself. Version-numbered names
("v42.metadata.json") come back when a table is dropped and re-created: always read.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from calving.commit.catalog.base import Catalog, TableIdent
from calving.commit.errors import CalvingError, CatalogUnavailableError
from calving.commit.io import FileIO
from calving.commit.spec.metadata import TableMetadata, parse_metadata

_UUID_NAME = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}[^/]*$", re.IGNORECASE)
_PARSED: OrderedDict[str, TableMetadata] = OrderedDict()
_PARSED_MAX = 8
_PARSED_LOCK = threading.Lock()


def remember_metadata(location: str, metadata: TableMetadata) -> None:
    """Keep ``metadata`` as the parsed contents of ``location`` (if its name is unique)."""
    if not _UUID_NAME.search(location):
        return
    with _PARSED_LOCK:
        _PARSED[location] = metadata
        _PARSED.move_to_end(location)
        while len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)


def _remembered(location: str) -> TableMetadata | None:
    with _PARSED_LOCK:
        metadata = _PARSED.get(location)
        if metadata is not None:
            _PARSED.move_to_end(location)
        return metadata


def load_metadata(catalog: Catalog, io: FileIO, ident: TableIdent) -> tuple[str, TableMetadata]:
    location = catalog.load_metadata_location(ident)
    metadata = _remembered(location)
    if metadata is None:
        metadata = parse_metadata(io.read(location), location)
        remember_metadata(location, metadata)
    return location, metadata


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
