"""One shard as a chain of files: its base and the deltas of the commits since, loaded
as a ``PrimaryKeyIndex`` of the shard's keys alone; and the files one batch writes.

A *delta* is what one commit did to one shard, in an index file (``index_file``'s
format) with a fourth column ``deleted``: an entry not deleted is a key the commit added
at (file, position), a row of one of its new data files; a deleted entry is a position
it deleted (its key is the key looked up). The schema metadata is a shard file's
(``shards.shard_metadata``) plus ``calving.index.delta``. Name:
``<snapshot-id>-s<shard>-d-<uuid>.calvidx`` under the shards directory, the snapshot
being the one the batch resolved its keys on.

``load_chain`` reads the base and applies the deltas in order; the files a base or delta
names must be live files of the manifest with as many rows, except files whose every
entry the chain deleted (a commit that deleted a file's last rows drops the file), which
are forgotten. The result must hold the entries the manifest says, else
``UnreadableIndexError`` names the shard's base: the caller rebuilds.

``catch_up_shard`` follows what other commits did (``snapshot_diff.SnapshotDiff``): removed
files, new deletion-vector positions, and added files' keys that fall in the shard.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from calving.commit.index.index_file import (
    Compression,
    UnreadableIndexError,
    read_entries,
    read_index_table,
    write_entries,
)
from calving.commit.index.keys import DEFAULT_HASHER, KeyCodec, Keys, concat_keys
from calving.commit.index.pk_index import IndexUpdateError, PrimaryKeyIndex
from calving.commit.index.shards import (
    SHARDS_DIRECTORY,
    ShardFile,
    ShardHeader,
    ShardManifest,
    check_shard_header,
    read_base,
    shard_metadata,
    shard_of,
    write_shard,
)
from calving.commit.index.snapshot_diff import SnapshotDiff
from calving.commit.index.store import live_keys
from calving.commit.io import FileIO
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.sorted_sets import distinct_ids

_MD_DELTA = b"calving.index.delta"


def delta_location(table_location: str, snapshot_id: int | None, shard: int) -> str:
    snap = "none" if snapshot_id is None else str(snapshot_id)
    name = f"{snap}-s{shard}-d-{uuid.uuid4()}.calvidx"
    return f"{table_location.rstrip('/')}/{SHARDS_DIRECTORY}/{name}"


# ---------------------------------------------------------------- what a batch changes


@dataclass(frozen=True)
class AddedFile:
    """The rows of one new data file whose keys fall in one shard."""

    path: str
    row_count: int
    keys: Keys
    positions: np.ndarray  # int64


@dataclass(frozen=True)
class Deleted:
    """Positions a commit deletes in one shard: ``keys[i]`` was at ``positions[i]`` of
    ``files[file_index[i]]`` (a (path, row count) table)."""

    files: tuple[tuple[str, int], ...]
    keys: Keys
    file_index: np.ndarray  # int64
    positions: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.positions)


def apply_changes(index: PrimaryKeyIndex, added: Sequence[AddedFile], deleted: Deleted) -> None:
    """Apply one commit's changes to a shard's index (in place)."""
    index.delete_located([p for p, _ in deleted.files], deleted.file_index, deleted.positions)
    for f in added:
        index.add_encoded(f.path, f.keys, f.positions, f.row_count)


def write_delta(
    io: FileIO,
    table_location: str,
    header: ShardHeader,
    added: Sequence[AddedFile],
    deleted: Deleted,
) -> str:
    """Write one commit's changes to a shard as a delta file; returns its location."""
    files = list(deleted.files) + [(f.path, f.row_count) for f in added]
    int_mode = KeyCodec(header.key_types, header.key_field_ids).int_mode
    base = len(deleted.files)
    keys = concat_keys([deleted.keys, *(f.keys for f in added)], int_mode)
    file_index = np.concatenate(
        [deleted.file_index]
        + [np.full(len(f.positions), base + i, np.int64) for i, f in enumerate(added)]
    )
    positions = np.concatenate([deleted.positions, *(f.positions for f in added)])
    flags = np.zeros(len(positions), bool)
    flags[: len(deleted)] = True
    md = shard_metadata(header, files)
    md[_MD_DELTA] = "1"
    location = delta_location(table_location, header.snapshot_id, header.shard)
    write_entries(
        io,
        location,
        md,
        keys,
        file_index.astype(np.uint32),
        positions.astype(np.uint32),
        extra={"deleted": pa.array(flags, pa.bool_())},
        compression=Compression.TRANSIENT,
    )
    return location


def read_delta(
    io: FileIO, manifest: ShardManifest, shard: int, location: str
) -> tuple[list[AddedFile], Deleted]:
    """A delta file's changes, once its header names this shard of the manifest's table."""
    table = read_index_table(io, location)
    md = table.schema.metadata or {}
    header = check_shard_header(location, md, manifest, shard)
    if md.get(_MD_DELTA) != b"1":
        raise UnreadableIndexError(location, "not a shard delta file")
    keys, file_index, positions = read_entries(location, table)
    try:
        flags = table.column("deleted").to_numpy(zero_copy_only=False).astype(bool)
    except (KeyError, pa.ArrowException) as err:
        raise UnreadableIndexError(location, f"delta has no deleted column: {err}") from None
    if len(flags) != len(keys) or (len(file_index) and file_index.max() >= len(header.files)):
        raise UnreadableIndexError(location, "delta entries do not fit its file table")
    files = tuple(header.files)
    gone = np.flatnonzero(flags)
    deleted = Deleted(
        files, keys.take(gone), file_index[gone].astype(np.int64), positions[gone].astype(np.int64)
    )
    kept = np.flatnonzero(~flags)
    added = []
    for i in distinct_ids(file_index[kept]):
        rows = kept[file_index[kept] == i]
        path, row_count = files[int(i)]
        added.append(AddedFile(path, row_count, keys.take(rows), positions[rows].astype(np.int64)))
    return added, deleted


# ---------------------------------------------------------------- loading a chain


#: A shard held by a worker merges its delta and tombstones into its base once either
#: outgrows this fraction of the base: twice the saved index's (``PrimaryKeyIndex``'s
#: default), since every worker holding a shard merges it. 500k-entry shards upserted by
#: 50k keys a batch on two workers merged 36 times in 30 batches at 0.125, 16 at 0.25,
#: for 16-25% fewer CPU-seconds of steps and read-aheads (``tests.bench.shard_steps``).
SHARD_MERGE_FRACTION = 0.25


def shard_index(
    manifest: ShardManifest | ShardHeader,
    keys: Keys,
    file_index: np.ndarray,
    positions: np.ndarray,
    files: Sequence[tuple[str, int]],
) -> PrimaryKeyIndex:
    """A shard's entries as the index a worker steps and caches
    (``PrimaryKeyIndex.from_entries`` with the shard merge policy)."""
    return PrimaryKeyIndex.from_entries(
        manifest.key_field_ids,
        manifest.key_types,
        keys,
        file_index,
        positions,
        files,
        table_uuid=manifest.table_uuid,
        snapshot_id=manifest.snapshot_id,
        merge_fraction=SHARD_MERGE_FRACTION,
    )


def load_chain(io: FileIO, manifest: ShardManifest, shard: ShardFile) -> PrimaryKeyIndex:
    """The shard's index: its base with every delta applied, checked against the
    manifest (``UnreadableIndexError`` naming the file that fails)."""
    file_ids = {path: i for i, (path, _) in enumerate(manifest.files)}
    header, keys, local, positions = read_base(io, manifest, shard, file_ids, allow_gone=True)
    try:
        index = shard_index(manifest, keys, local, positions, header.files)
        apply_aliases(index, manifest.aliases)
        for location in shard.deltas:
            added, deleted = read_delta(io, manifest, shard.shard, location)
            apply_changes(index, added, deleted)
            apply_aliases(index, manifest.aliases)
    except IndexUpdateError as err:
        raise UnreadableIndexError(shard.location, f"shard chain does not apply: {err}") from None
    live = index.live_rows_per_file()  # compacts
    for path, entries in live.items():
        at = file_ids.get(path)
        if at is not None:
            if manifest.files[at][1] != index.file_row_count(path):
                raise UnreadableIndexError(
                    shard.location,
                    f"{path}: {index.file_row_count(path)} rows in the shard, "
                    f"{manifest.files[at][1]} in the manifest",
                )
            continue
        if entries:
            raise UnreadableIndexError(
                shard.location, f"{path}: holds {entries} entries but is not a live file"
            )
        index.remove_file(path)
    if sum(live.values()) != shard.entries:
        raise UnreadableIndexError(
            shard.location,
            f"shard {shard.shard} holds {sum(live.values())} entries, the manifest says "
            f"{shard.entries}",
        )
    return index


def apply_aliases(index: PrimaryKeyIndex, aliases: Sequence[tuple[str, str, str]]) -> None:
    """Rename the files the manifest's aliases say were replaced (idempotent)."""
    for _, old, new in aliases:
        if index.has_file(old) and not index.has_file(new):
            index.rename_file(old, new)


def write_base(
    io: FileIO, table_location: str, header: ShardHeader, index: PrimaryKeyIndex
) -> ShardFile:
    """The shard's index as a new base file (a chain of one)."""
    keys, file_index, positions, files = index.export_entries()
    return write_shard(
        io, table_location, header, keys, file_index, positions, files, hasher=index.hasher
    )


# ---------------------------------------------------------------- other writers' commits


@dataclass(frozen=True)
class ShardDiff:
    """``snapshot_diff.SnapshotDiff`` as every shard task applies it: the data files (with their
    deletion vectors) whose keys each task reads for its shards."""

    from_snapshot: int | None
    to_snapshot: int | None
    removed: tuple[str, ...]
    deletes: tuple[tuple[str, np.ndarray], ...]
    added: tuple[tuple[DataFile, DataFile | None], ...]

    @classmethod
    def of(
        cls, diff: SnapshotDiff, from_snapshot: int | None, to_snapshot: int | None
    ) -> ShardDiff:
        added = []
        for path in diff.added:
            dv = diff.new.dvs.get(path)
            added.append((diff.new.data[path].data_file, None if dv is None else dv.data_file))
        return cls(
            from_snapshot,
            to_snapshot,
            tuple(diff.removed),
            tuple(diff.deletes.items()),
            tuple(added),
        )


def catch_up_shard(
    index: PrimaryKeyIndex,
    shard: int,
    shard_count: int,
    diff: ShardDiff,
    fresh: Sequence[tuple[str, int, Keys, np.ndarray]],
) -> None:
    """Apply ``diff`` to one shard's index (in place). ``fresh``: the added files'
    live keys, encoded, with their positions (``read_added``), read once per task."""
    for path in diff.removed:
        if index.has_file(path):
            index.remove_file(path)
    for path, positions in diff.deletes:
        if index.has_file(path):
            index.delete_positions(path, positions)
    for path, row_count, keys, positions in fresh:
        mine = np.flatnonzero(shard_of(DEFAULT_HASHER.hash(keys), shard_count) == shard)
        if index.has_file(path):
            index.remove_file(path)  # a file whose deleted rows came back
        if len(mine):
            index.add_encoded(path, keys.take(mine), positions[mine], row_count)
    index.snapshot_id = diff.to_snapshot


def read_added(
    io: FileIO, diff: ShardDiff, key_field_ids: Sequence[int], codec: KeyCodec
) -> list[tuple[str, int, Keys, np.ndarray]]:
    """The live keys (encoded) and positions of the files ``diff`` adds."""
    out = []
    for data_file, dv in diff.added:
        found = live_keys(io, data_file, dv, key_field_ids)
        out.append((found.path, found.row_count, codec.encode(found.keys), found.positions))
    return out


def merge_chains(io: FileIO, manifest: ShardManifest) -> PrimaryKeyIndex:
    """Every shard of ``manifest`` as one driver index at its snapshot (the switch back
    to driver mode; ``store.catch_up`` brings it forward)."""
    int_mode = KeyCodec(manifest.key_types, manifest.key_field_ids).int_mode
    files = list(manifest.files)
    ids = {path: i for i, (path, _) in enumerate(files)}
    keys, file_index, positions = [], [], []
    for shard in manifest.shards:
        k, local, pos, shard_files = load_chain(io, manifest, shard).export_entries()
        remap = np.array([ids[p] for p, _ in shard_files], np.uint32)
        keys.append(k)
        file_index.append(remap[local] if len(remap) else np.empty(0, np.uint32))
        positions.append(pos)
    return PrimaryKeyIndex.from_entries(
        manifest.key_field_ids,
        manifest.key_types,
        concat_keys(keys, int_mode),
        np.concatenate(file_index) if file_index else np.empty(0, np.uint32),
        np.concatenate(positions) if positions else np.empty(0, np.uint32),
        files,
        table_uuid=manifest.table_uuid,
        snapshot_id=manifest.snapshot_id,
    )
