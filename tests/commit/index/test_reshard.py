"""A new shard count from the shards' own files: the groups of every change between
powers of two cover each old and new shard once; splitting and merging chains (a delta
on one shard, int and string keys, a renamed file) gives the same entries, each in the
shard its hash names, with the new count in every header; the manifest keeps the
snapshot and drops the aliases; a corrupt old shard or a lost entry is refused."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from calving.commit.index.index_file import UnreadableIndexError
from calving.commit.index.keys import DEFAULT_HASHER, IntKeys
from calving.commit.index.pk_index import IndexUpdateError, PrimaryKeyIndex
from calving.commit.index.reshard import (
    ReshardGroup,
    reshard_groups,
    reshard_here,
    resharded,
    split_group,
)
from calving.commit.index.shard_chain import load_chain, merge_chains
from calving.commit.index.shards import ShardCountError, read_manifest, shard_of, write_manifest
from calving.commit.io import local_path
from tests.commit.index.test_shard_chain import _chain, copied_last_file
from tests.commit.index.test_shards import entries

COUNTS = [1, 2, 4, 8, 16]


@pytest.mark.parametrize("old", COUNTS)
@pytest.mark.parametrize("new", COUNTS)
def test_groups_cover_every_shard_once_and_keep_keys_together(old: int, new: int) -> None:
    groups = reshard_groups(old, new)
    assert sorted(s for g in groups for s in g.sources) == list(range(old))
    assert sorted(t for g in groups for t in g.targets) == list(range(new))
    assert len(groups) == min(old, new)
    hashes = DEFAULT_HASHER.hash(IntKeys(np.arange(5000, dtype=np.int64)))
    group_of_old = {s: i for i, g in enumerate(groups) for s in g.sources}
    group_of_new = {t: i for i, g in enumerate(groups) for t in g.targets}
    for a, b in zip(shard_of(hashes, old).tolist(), shard_of(hashes, new).tolist()):
        assert group_of_old[a] == group_of_new[b]


@pytest.mark.parametrize("bad", [(3, 4), (4, 6), (4, 0)])
def test_counts_that_are_not_powers_of_two_are_refused(bad: tuple[int, int]) -> None:
    with pytest.raises(ShardCountError):
        reshard_groups(*bad)


@pytest.mark.integration
@pytest.mark.parametrize("key", ["int", "string"])
@pytest.mark.parametrize("new", [1, 2, 8, 16])
def test_split_or_merged_chains_hold_the_same_entries(
    sqlite_catalog: Any, key: str, new: int
) -> None:
    table, manifest, _ = _chain(sqlite_catalog, key)  # 4 shards, a delta on shard 1
    want = entries(merge_chains(table.io, manifest))
    written = reshard_here(table.io, table.metadata, manifest, new)
    got = resharded(manifest, new, written)
    assert got.shard_count == new and got.snapshot_id == manifest.snapshot_id
    assert got.files == manifest.files and got.entries == manifest.entries
    assert all(not s.deltas and s.base_snapshot == manifest.snapshot_id for s in got.shards)
    assert entries(merge_chains(table.io, got)) == want
    for shard in got.shards:  # each shard holds only its keys, its header the new count
        index = load_chain(table.io, got, shard)
        keys, _, _, _ = index.export_entries()
        assert set(shard_of(DEFAULT_HASHER.hash(keys), new).tolist()) <= {shard.shard}
    location = write_manifest(table.io, got, table.metadata.location)
    assert read_manifest(table.io, location) == got


@pytest.mark.integration
def test_a_renamed_file_is_named_by_its_new_path_and_the_aliases_go(sqlite_catalog: Any) -> None:
    table, manifest, _ = _chain(sqlite_catalog, "int")
    copied, old, new = copied_last_file(manifest)
    got = resharded(copied, 2, reshard_here(table.io, table.metadata, copied, 2))
    assert got.aliases == ()
    merged = merge_chains(table.io, got)
    assert merged.has_file(new) and not merged.has_file(old)
    assert entries(merged) == entries(merge_chains(table.io, copied))


@pytest.mark.integration
def test_new_shards_can_be_kept_as_they_are_written(sqlite_catalog: Any) -> None:
    table, manifest, _ = _chain(sqlite_catalog, "string")
    kept: dict[int, PrimaryKeyIndex] = {}
    group = ReshardGroup((1,), (1, 5))
    written = split_group(
        table.io,
        manifest,
        table.metadata.location,
        8,
        group,
        lambda f, i: kept.update({f.shard: i}),
    )
    assert [f.shard for f in written] == [1, 5] and sorted(kept) == [1, 5]
    for f in written:
        assert entries(kept[f.shard]) == entries(
            load_chain(table.io, replace(manifest, shard_count=8), f)
        )


@pytest.mark.integration
def test_a_corrupt_old_shard_or_a_lost_entry_is_refused(sqlite_catalog: Any) -> None:
    table, manifest, _ = _chain(sqlite_catalog, "int")
    written = reshard_here(table.io, table.metadata, manifest, 8)
    with pytest.raises(IndexUpdateError, match="resharding wrote"):
        resharded(manifest, 8, written[:-1])
    short = replace(written[3], entries=written[3].entries - 1)
    with pytest.raises(IndexUpdateError, match="entries"):
        resharded(manifest, 8, [*written[:3], short, *written[4:]])
    path = Path(local_path(manifest.shards[1].deltas[0]))
    data = bytearray(path.read_bytes())
    data[40] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(UnreadableIndexError):
        reshard_here(table.io, table.metadata, manifest, 2)
