"""A new shard count from the shards themselves: split or merge, no data file read.

Shard counts are powers of two and a key's shard is its mixed hash modulo the count,
so with ``g = min(old, new)`` a key of old shard ``s`` lies in new shard ``t`` only
when ``s % g == t % g``. The shards fall into ``g`` independent *groups*: group ``c``
reads old shards ``c, c + g, ...`` (one when the count grows, ``old / new`` when it
shrinks) and writes new shards ``c, c + g, ...`` from their entries. A group loads each
old chain as a stream step would (``load_chain``: its base and deltas, checked against
the manifest, the manifest's renames applied), so the new bases hold the manifest's
rows and name the live files: the new manifest describes the same snapshot with no
aliases. ``reshard_here`` runs every group in this process; the Spark job running the
groups on the executors is ``calving.ingest.sink.shard_stage.SparkReshard``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from calving.commit.index.index_file import UnreadableIndexError
from calving.commit.index.keys import DEFAULT_HASHER, KeyCodec, Keys, concat_keys
from calving.commit.index.pk_index import IndexUpdateError, PrimaryKeyIndex
from calving.commit.index.shard_chain import load_chain, shard_index
from calving.commit.index.shards import (
    ShardFile,
    ShardHeader,
    ShardManifest,
    check_shard_count,
    shard_of,
    write_shard,
)
from calving.commit.io import FileIO
from calving.commit.io_sync import synced_together
from calving.commit.spec.metadata import TableMetadata


@dataclass(frozen=True)
class ReshardGroup:
    """Old shards ``sources`` hold exactly the keys of new shards ``targets``."""

    sources: tuple[int, ...]
    targets: tuple[int, ...]


def reshard_groups(old: int, new: int) -> list[ReshardGroup]:
    """The independent groups of a change from ``old`` to ``new`` shards."""
    check_shard_count(old, "old shard count")
    check_shard_count(new, "calving.index.shards")
    g = min(old, new)
    return [ReshardGroup(tuple(range(c, old, g)), tuple(range(c, new, g))) for c in range(g)]


#: Called with each new shard written and its index (a worker keeps it cached).
Keep = Callable[[ShardFile, PrimaryKeyIndex], None]


def split_group(
    io: FileIO,
    manifest: ShardManifest,
    table_location: str,
    shard_count: int,
    group: ReshardGroup,
    keep: Keep | None = None,
) -> list[ShardFile]:
    """The new shards of ``group`` written from its old shards' chains, in the
    manifest's file table, made durable together before they are returned.
    ``UnreadableIndexError`` names an old shard that does not load (the caller
    rebuilds instead); ``IndexUpdateError`` if the entries do not add up."""
    entries, held = _read_sources(io, manifest, group.sources)
    written = _write_targets(io, manifest, table_location, shard_count, group, entries, keep)
    if sum(f.entries for f in written) != held:
        raise IndexUpdateError(
            f"shards {list(group.sources)} held {held} entries, "
            f"{sum(f.entries for f in written)} were written"
        )
    return written


#: Entries of an index in the manifest's file table: keys, file indexes, positions
#: (uint32) and the keys' hashes, in hash order.
_Entries = tuple[Keys, np.ndarray, np.ndarray, np.ndarray]


def _read_sources(
    io: FileIO, manifest: ShardManifest, sources: Sequence[int]
) -> tuple[_Entries, int]:
    """The entries of old shards ``sources``, in hash order, and the entries their
    chains say they hold."""
    file_ids = {path: i for i, (path, _) in enumerate(manifest.files)}
    codec = KeyCodec(manifest.key_types, manifest.key_field_ids)
    keys_parts, file_parts, position_parts = [], [], []
    held = 0
    for s in sources:
        chain = manifest.shards[s]
        keys, local, positions, files = load_chain(io, manifest, chain).export_entries()
        missing = [p for p, _ in files if p not in file_ids]
        if missing:
            raise UnreadableIndexError(chain.location, f"{missing[0]} is not a live file")
        to_global = np.array([file_ids[p] for p, _ in files] or [0], np.int64)
        keys_parts.append(keys)
        file_parts.append(to_global[local.astype(np.int64)])
        position_parts.append(np.asarray(positions, np.uint32))
        held += chain.entries
    keys = concat_keys(keys_parts, codec.int_mode)
    file_index = np.concatenate(file_parts or [np.empty(0, np.int64)])
    positions = np.concatenate(position_parts or [np.empty(0, np.uint32)])
    hashes = DEFAULT_HASHER.hash(keys)
    if len(sources) > 1:  # sorted runs, put together by a stable sort (linear on runs)
        order = np.argsort(hashes, kind="stable")
        return (keys.take(order), file_index[order], positions[order], hashes[order]), held
    return (keys, file_index, positions, hashes), held


def _write_targets(
    io: FileIO,
    manifest: ShardManifest,
    table_location: str,
    shard_count: int,
    group: ReshardGroup,
    entries: _Entries,
    keep: Keep | None,
) -> list[ShardFile]:
    """New shards ``group.targets`` from ``entries`` (a split's shards are
    subsequences, so they stay in hash order), fsynced together."""
    keys, file_index, positions, hashes = entries
    where = shard_of(hashes, shard_count) if len(group.targets) > 1 else None
    written = []
    with synced_together():
        for t in group.targets:
            header = ShardHeader(
                manifest.table_uuid,
                manifest.snapshot_id,
                manifest.key_field_ids,
                manifest.key_types,
                t,
                shard_count,
            )
            if where is None:  # a merge: the whole group is the one target
                part, part_hashes = (keys, file_index, positions), hashes
            else:
                rows = np.flatnonzero(where == t)
                part = (keys.take(rows), file_index[rows], positions[rows])
                part_hashes = hashes[rows]
            new = write_shard(io, table_location, header, *part, manifest.files, hashes=part_hashes)
            if keep is not None:
                keep(new, _index_of(manifest, part))
            written.append(new)
    return written


def _index_of(
    manifest: ShardManifest, part: tuple[Keys, np.ndarray, np.ndarray]
) -> PrimaryKeyIndex:
    keys, file_index, positions = part
    return shard_index(manifest, keys, file_index, positions, manifest.files)


def resharded(
    manifest: ShardManifest, shard_count: int, written: Sequence[ShardFile]
) -> ShardManifest:
    """The manifest of the same snapshot with ``written`` (every new shard) as its
    shards: the renames it recorded are in the new bases, so it has no aliases."""
    shards = tuple(sorted(written, key=lambda f: f.shard))
    if [f.shard for f in shards] != list(range(shard_count)):
        raise IndexUpdateError(
            f"resharding wrote shards {[f.shard for f in shards]}, not 0..{shard_count - 1}"
        )
    if sum(f.entries for f in shards) != manifest.entries:
        raise IndexUpdateError(
            f"resharding wrote {sum(f.entries for f in shards)} entries, "
            f"the index holds {manifest.entries}"
        )
    return replace(manifest, shard_count=shard_count, shards=shards, aliases=())


class Reshard(Protocol):
    """Writes every new shard of ``manifest`` at ``shard_count`` shards."""

    def __call__(
        self, io: FileIO, metadata: TableMetadata, manifest: ShardManifest, shard_count: int
    ) -> list[ShardFile]: ...


def reshard_here(
    io: FileIO, metadata: TableMetadata, manifest: ShardManifest, shard_count: int
) -> list[ShardFile]:
    """Every group in this process, one at a time (a group's entries in memory)."""
    return [
        f
        for group in reshard_groups(manifest.shard_count, shard_count)
        for f in split_group(io, manifest, metadata.location, shard_count, group)
    ]
