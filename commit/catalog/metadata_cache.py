"""Parsed table metadata kept by location: a cache every catalog reader shares, holding
for each of up to ``MAX_TABLES`` tables the version kept last.

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
#: Tables kept (least recently used first out): a many-table pipeline commits to every
#: one of its tables each batch, and each table's newest metadata is what it commits on.
MAX_TABLES = 1024
#: table UUID -> (location, its parsed metadata): one version a table, the one kept last.
_BY_TABLE: OrderedDict[str, tuple[str, TableMetadata]] = OrderedDict()
#: location -> table UUID, for the locations ``_BY_TABLE`` holds.
_TABLE_OF: dict[str, str] = {}
_LOCK = threading.Lock()


def remember_metadata(location: str, metadata: TableMetadata) -> None:
    """Keep ``metadata`` as the parsed contents of ``location`` (if its name is unique),
    in place of any version of the same table kept before."""
    if not _UUID_NAME.search(location):
        return
    table = metadata.table_uuid
    with _LOCK:
        before = _BY_TABLE.get(table)
        if before is not None:
            _TABLE_OF.pop(before[0], None)
        _BY_TABLE[table] = (location, metadata)
        _BY_TABLE.move_to_end(table)
        _TABLE_OF[location] = table
        while len(_BY_TABLE) > MAX_TABLES:
            gone, _ = _BY_TABLE.popitem(last=False)[1]
            _TABLE_OF.pop(gone, None)


def remembered_metadata(location: str) -> TableMetadata | None:
    """The parsed contents of ``location`` if kept, else None."""
    with _LOCK:
        table = _TABLE_OF.get(location)
        if table is None:
            return None
        _BY_TABLE.move_to_end(table)
        return _BY_TABLE[table][1]


def read_metadata_cached(io: FileIO, location: str) -> TableMetadata:
    """The metadata at ``location``: from the cache, else read, parsed and kept."""
    metadata = remembered_metadata(location)
    if metadata is None:
        metadata = parse_metadata(io.read(location), location)
        remember_metadata(location, metadata)
    return metadata
