"""The primary-key index for CDC upserts: key -> live (data file, position).

``keys``: canonical key encoding and hashing; ``pk_index``: the columnar index;
``index_file``: its file format; ``store``: saving it with the table, loading,
rebuilding and catching up; ``shards``: the index split into shard files by key hash
and the manifest naming them; sharded mode (the driver holding no key): ``shard_chain``
(a shard's base and delta files), ``shard_lookup`` (a batch's step per shard, run by a
task, and the worker's cache), ``shard_rebuild`` (shards rebuilt in-process) and
``sharded`` (the driver's side: the manifest, the batch's split by shard, the commit).
"""

from calving.commit.index.index_file import UnreadableIndexError
from calving.commit.index.keys import KeyHasher, KeyTypeError, NullKeyError, partition_of
from calving.commit.index.matches import Matches
from calving.commit.index.pk_index import IndexUpdateError, PrimaryKeyIndex
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
