"""The primary-key index for CDC upserts: key -> live (data file, position).

``keys``: canonical key encoding and hashing; ``pk_index``: the columnar index;
``index_file``: its file format; ``store``: saving it with the table, loading,
rebuilding and catching up; ``shards``: the index split into shard files by key hash.
"""

from calving.commit.index.index_file import UnreadableIndexError
from calving.commit.index.keys import KeyHasher, KeyTypeError, NullKeyError, partition_of
from calving.commit.index.pk_index import IndexUpdateError, Matches, PrimaryKeyIndex
from calving.commit.index.store import (
    INDEX_LOCATION_PROPERTY,
    IndexMismatchError,
    StaleIndexError,
    build_from_table,
    catch_up,
    count_full_rebuild,
    full_rebuilds,
    load,
    load_current,
    open_index,
    save,
)

__all__ = [
    "INDEX_LOCATION_PROPERTY",
    "IndexMismatchError",
    "IndexUpdateError",
    "KeyHasher",
    "KeyTypeError",
    "Matches",
    "NullKeyError",
    "PrimaryKeyIndex",
    "StaleIndexError",
    "UnreadableIndexError",
    "build_from_table",
    "catch_up",
    "count_full_rebuild",
    "full_rebuilds",
    "load",
    "load_current",
    "open_index",
    "partition_of",
    "save",
]
