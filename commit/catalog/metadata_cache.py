"""Parsed table metadata kept by location: a small cache every catalog reader shares.

Metadata files whose names carry a UUID (Java's, pyiceberg's and the SQL catalog's
"00042-<uuid>.metadata.json") are never rewritten, so their parsed contents are kept
by location: a writer then reads and parses only metadata that someone else wrote,
not the (ever longer) file it has just committed itself. Version-numbered names
("v42.metadata.json") come back when a table is dropped and re-created: always read.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict

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


def remembered_metadata(location: str) -> TableMetadata | None:
    """The parsed contents of ``location`` if kept, else None."""
    with _PARSED_LOCK:
        metadata = _PARSED.get(location)
        if metadata is not None:
            _PARSED.move_to_end(location)
        return metadata


def read_metadata_cached(io: FileIO, location: str) -> TableMetadata:
    """The metadata at ``location``: from the cache, else read, parsed and kept."""
    metadata = remembered_metadata(location)
    if metadata is None:
        metadata = parse_metadata(io.read(location), location)
        remember_metadata(location, metadata)
    return metadata
