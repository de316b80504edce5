"""A shard as a chain of files: a base and deltas load to the index the changes describe,
for int and string keys; a delta of another shard, a tampered entry count, a file the
chain still needs missing from the manifest, and a corrupt delta are refused naming the
file; aliases rename a row-lineage copy's path; the manifest keeps chains and aliases
through encode/decode and still reads the three-field shard entries of earlier files."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from calving.commit.index.index_file import UnreadableIndexError
from calving.commit.index.keys import DEFAULT_HASHER, IntKeys, KeyCodec
from calving.commit.index.pk_index import PrimaryKeyIndex
from calving.commit.index.shard_chain import (
    SHARD_MERGE_FRACTION,
    AddedFile,
    Deleted,
    apply_changes,
    load_chain,
    merge_chains,
    shard_index,
    write_delta,
)
from calving.commit.index.shards import (
    ShardHeader,
    ShardManifest,
    read_manifest,
    shard_of,
    split_index,
    write_manifest,
)
from calving.commit.index.store import build_from_table, save
from calving.commit.io import local_path
from calving.commit.spec.types import LONG
from tests.commit.index.test_shards import entries, sharded_table

pytestmark = pytest.mark.integration

SHARDS = 4


def _changes(
    index: PrimaryKeyIndex, shard: int, new_path: str, new_keys: list[Any]
) -> tuple[list[AddedFile], Deleted]:
    """Delete every other entry of ``shard`` and add the ``new_keys`` that fall in it."""
    keys, file_index, positions, files = index.export_entries()
    mine = np.flatnonzero(shard_of(DEFAULT_HASHER.hash(keys), SHARDS) == shard)[::2]
    codec = KeyCodec(index.key_types, index.key_field_ids)
    column = pa.array(new_keys)
    fresh = codec.encode(pa.table({"k": column}))
    where = np.flatnonzero(shard_of(DEFAULT_HASHER.hash(fresh), SHARDS) == shard)
    added = [AddedFile(new_path, len(new_keys), fresh.take(where), where.astype(np.int64))]
    deleted = Deleted(
        tuple(files),
        keys.take(mine),
        file_index[mine].astype(np.int64),
        positions[mine].astype(np.int64),
    )
    return added, deleted


def _chain(catalog: Any, key: str) -> tuple[Any, ShardManifest, PrimaryKeyIndex]:
    """A table's shards with one delta on shard 1 (the new file is live in the
    manifest), and the index that delta should give for shard 1."""
    table = sharded_table(catalog, key, f"chain_{key}")
    index = build_from_table(table.io, table.metadata)
    _, manifest = split_index(table.io, index, table.metadata.location, SHARDS)
    base = manifest.shards[1]
    changed = load_chain(table.io, manifest, base)
    new_path = f"{table.metadata.location}/data/new.parquet"
    new_keys = list(range(5000, 5040)) if key == "int" else [f"new-{i}" for i in range(40)]
    added, deleted = _changes(changed, 1, new_path, new_keys)
    header = ShardHeader(
        manifest.table_uuid,
        manifest.snapshot_id,
        manifest.key_field_ids,
        manifest.key_types,
        1,
        SHARDS,
    )
    location = write_delta(table.io, table.metadata.location, header, added, deleted)
    apply_changes(changed, added, deleted)
    entries_after = len(changed)
    chain = replace(base, entries=entries_after, deltas=(location,))
    shards = (*manifest.shards[:1], chain, *manifest.shards[2:])
    grown = replace(manifest, files=(*manifest.files, (new_path, len(new_keys))), shards=shards)
    return table, grown, changed


@pytest.mark.parametrize("key", ["int", "string"])
def test_a_base_and_a_delta_load_to_the_changed_shard(sqlite_catalog: Any, key: str) -> None:
    table, manifest, want = _chain(sqlite_catalog, key)
    got = load_chain(table.io, manifest, manifest.shards[1])
    assert entries(got) == entries(want)
    assert len(got) == manifest.shards[1].entries
    merged = merge_chains(table.io, manifest)  # every shard, one driver index
    assert len(merged) == manifest.entries


def test_a_delta_or_count_that_does_not_fit_is_refused(sqlite_catalog: Any) -> None:
    table, manifest, _ = _chain(sqlite_catalog, "int")
    chain = manifest.shards[1]
    with pytest.raises(UnreadableIndexError, match="the manifest says"):
        load_chain(table.io, manifest, replace(chain, entries=chain.entries + 1))
    other = replace(manifest.shards[2], deltas=chain.deltas)  # shard 1's delta under 2
    with pytest.raises(UnreadableIndexError, match="says shard b'1'"):
        load_chain(table.io, manifest, other)
    without = replace(manifest, files=manifest.files[:-1])  # the new file is not live
    with pytest.raises(UnreadableIndexError, match="not a live file"):
        load_chain(table.io, without, chain)
    path = Path(local_path(chain.deltas[0]))
    data = bytearray(path.read_bytes())
    data[40] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(UnreadableIndexError, match="checksum mismatch"):
        load_chain(table.io, manifest, chain)


def copied_last_file(manifest: ShardManifest) -> tuple[ShardManifest, str, str]:
    """``manifest`` after a row-lineage copy renamed its last file, which shard 1's
    delta names: (the manifest with the alias, the old path, the new path)."""
    old = manifest.files[-1][0]
    new = old.replace(".parquet", "-rowid-0.parquet")
    copied = replace(
        manifest,
        files=(*manifest.files[:-1], (new, manifest.files[-1][1])),
        aliases=((manifest.shards[1].deltas[0], old, new),),
    )
    return copied, old, new


def test_aliases_rename_a_copied_file(sqlite_catalog: Any) -> None:
    table, manifest, _ = _chain(sqlite_catalog, "int")
    copied, old, new = copied_last_file(manifest)
    got = load_chain(table.io, copied, manifest.shards[1])
    assert got.has_file(new) and not got.has_file(old)
    location = write_manifest(table.io, copied, table.metadata.location)
    assert read_manifest(table.io, location) == copied


def test_manifests_keep_chains_and_read_three_field_entries(sqlite_catalog: Any) -> None:
    table, manifest, _ = _chain(sqlite_catalog, "int")
    location = write_manifest(table.io, manifest, table.metadata.location)
    assert read_manifest(table.io, location) == manifest
    body = json.loads(manifest.encode()[20:-4])
    assert len(body["shards"][0]) == 3 and len(body["shards"][1]) == 5  # plain, chained
    assert read_manifest(table.io, location).shards[0].base_snapshot == manifest.snapshot_id


_LZ4_FRAME = b"\x04\x22\x4d\x18"  # the magic number opening an LZ4 frame
_ZSTD_FRAME = b"\x28\xb5\x2f\xfd"  # and a zstd frame


def test_index_files_compress_by_how_long_they_live(sqlite_catalog: Any) -> None:
    """A delta's payload is stored plain, a shard's base with lz4, the saved index
    with zstd (``Compression``); each reads back."""
    table, manifest, want = _chain(sqlite_catalog, "int")
    chain = manifest.shards[1]
    base = Path(local_path(chain.location)).read_bytes()
    delta = Path(local_path(chain.deltas[0])).read_bytes()
    assert _LZ4_FRAME in base and _ZSTD_FRAME not in base
    assert _LZ4_FRAME not in delta and _ZSTD_FRAME not in delta
    saved = save(table.io, want, table.metadata.location)
    assert _ZSTD_FRAME in Path(local_path(saved)).read_bytes()
    assert entries(load_chain(table.io, manifest, chain)) == entries(want)


def test_a_worker_shard_merges_at_twice_the_saved_index_fraction() -> None:
    """Every worker holding a shard merges it, so a shard waits for twice the changes
    the saved index merges at: a fifth of the entries deleted merges the one, not the
    other."""
    n = 1_000_000
    header = ShardHeader("uuid", 1, (1,), (LONG,), 0, 1)
    keys, positions = IntKeys(np.arange(n, dtype=np.int64)), np.arange(n, dtype=np.uint32)
    files = [("a.parquet", n)]
    shard = shard_index(header, keys, np.zeros(n, np.uint32), positions, files)
    saved = PrimaryKeyIndex.from_entries(
        [1], [LONG], keys, np.zeros(n, np.uint32), positions, files
    )
    assert SHARD_MERGE_FRACTION == 2 * saved.merge_fraction
    for index in (shard, saved):
        index.delete_positions("a.parquet", np.arange(0, n, 5))
    assert saved.tidy() is True
    assert shard.tidy() is False
    assert len(shard) == len(saved) == n - n // 5
