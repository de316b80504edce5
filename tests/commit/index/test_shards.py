"""The index as shards: a driver index split into shard files and merged back is the
same index; every shard holds exactly the keys of its shard; any shard file that is
corrupt, swapped, of another snapshot or miscounted is refused naming the file. Real
tables on a SQLite catalog, real files on disk."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap64

from calving.commit.index.index_file import UnreadableIndexError
from calving.commit.index.keys import DEFAULT_HASHER, ByteKeys, IntKeys
from calving.commit.index.pk_index import PrimaryKeyIndex
from calving.commit.index.shards import (
    ShardCountError,
    ShardManifest,
    check_shard_count,
    load_sharded,
    read_manifest,
    read_shard,
    shard_of,
    split_index,
    write_manifest,
)
from calving.commit.index.store import (
    IndexMismatchError,
    build_from_table,
)
from calving.commit.io import local_path
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import NestedField
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.table import Table, create_table
from tests.support.tables import EVENTS, row, write_partitioned

pytestmark = pytest.mark.integration


def entries(index: PrimaryKeyIndex) -> list[tuple[Any, str, int]]:
    """Every (key, file, position) of the index, sorted."""
    keys, file_index, positions, files = index.export_entries()
    values = keys.to_arrow().to_pylist()
    return sorted(zip(values, [files[i][0] for i in file_index], positions.tolist()))


def sharded_table(catalog: Any, key: str, name: str = "") -> Table:
    """Two live files, one with a deletion vector (a third file, all of whose rows were
    deleted, went in the same commit), keyed on ``id`` (long) or ``payload`` (string)."""
    if key == "int":
        schema = EVENTS
    else:
        fields = tuple(NestedField(f.field_id, f.name, f.field_type, True) for f in EVENTS.fields)
        schema = Schema(fields, identifier_field_ids=(4,))
    table = create_table(catalog, ("db", name or f"sharded_{key}"), schema)
    first, doomed = (
        write_partitioned(table, [row(i, payload=f"k{i}") for i in range(lo, lo + 100)])
        for lo in (0, 100)
    )
    table.commit_or_raise(FastAppend(tuple(f for f, _ in first + doomed)))
    second = write_partitioned(table, [row(1000 + i, payload=f"key-{i}") for i in range(50)])
    deleted = {first[0][0].file_path: BitMap64([0, 2])}
    deleted |= {f.file_path: BitMap64(range(f.record_count)) for f, _ in doomed}
    table.commit_or_raise(RowDelta(tuple(f for f, _ in second), deleted))
    return table


@pytest.mark.parametrize("key", ["int", "string"])
@pytest.mark.parametrize("shards", [1, 4, 64, 512])
def test_split_then_merged_is_the_same_index(sqlite_catalog: Any, key: str, shards: int) -> None:
    table = sharded_table(sqlite_catalog, key)
    driver = build_from_table(table.io, table.metadata)
    location, manifest = split_index(table.io, driver, table.metadata.location, shards)
    assert read_manifest(table.io, location) == manifest
    assert manifest.entries == len(driver) == 148
    assert len(manifest.shards) == shards
    assert len(manifest.files) == len(driver.file_paths) == 2
    merged = load_sharded(table.io, location, table.metadata)
    assert entries(merged) == entries(driver)
    assert merged.snapshot_id == table.metadata.current_snapshot_id


@pytest.mark.parametrize("key", ["int", "string"])
def test_every_shard_holds_exactly_its_keys(sqlite_catalog: Any, key: str) -> None:
    table = sharded_table(sqlite_catalog, key)
    driver = build_from_table(table.io, table.metadata)
    _, manifest = split_index(table.io, driver, table.metadata.location, 8)
    file_ids = {p: i for i, (p, _) in enumerate(manifest.files)}
    seen = 0
    for shard in manifest.shards:
        keys, _, _ = read_shard(table.io, manifest, shard, file_ids)
        hashes = DEFAULT_HASHER.hash(keys)
        assert set(shard_of(hashes, 8).tolist()) <= {shard.shard}
        assert np.all(np.diff(hashes.astype(np.float64)) >= 0)  # hash order
        seen += len(keys)
    assert seen == len(driver)
    assert sum(1 for s in manifest.shards if s.entries) >= 6  # keys spread over shards


def test_the_shard_function_is_pinned() -> None:
    """Shards are files: the function must never change for the same name."""
    values = [0, 1, 2, 3, -1, 1 << 40]
    ints = DEFAULT_HASHER.hash(IntKeys(np.array(values, np.int64)))
    assert shard_of(ints, 16).tolist() == [3, 2, 1, 1, 10, 15]
    # The same from the definition, in Python integers: the int key's hash is its
    # two's-complement bits with the sign bit flipped, then MurmurHash3's fmix64.
    mask = (1 << 64) - 1

    def fmix(x: int) -> int:
        x ^= x >> 33
        x = (x * 0xFF51AFD7ED558CCD) & mask
        x ^= x >> 33
        x = (x * 0xC4CEB9FE1A85EC53) & mask
        return x ^ (x >> 33)

    assert [fmix((v & mask) ^ (1 << 63)) % 16 for v in values] == [3, 2, 1, 1, 10, 15]
    text = ByteKeys.from_arrow(pa.array([b"a", b"order-17", b""], pa.large_binary()))
    assert shard_of(DEFAULT_HASHER.hash(text), 1024).tolist() == [36, 764, 288]  # recorded


@pytest.mark.parametrize("bad", [0, 3, 12, -4, 1 << 17, True, 2.0])
def test_a_shard_count_must_be_a_power_of_two(bad: Any) -> None:
    with pytest.raises(ShardCountError, match=r"^index_shards: must be"):
        check_shard_count(bad, "index_shards")


def _flip(path: str, at: int) -> None:
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data[at] ^= 0x10
    with open(path, "wb") as f:
        f.write(bytes(data))


def test_a_corrupt_shard_is_refused_naming_its_file(sqlite_catalog: Any) -> None:
    table = sharded_table(sqlite_catalog, "string")
    driver = build_from_table(table.io, table.metadata)
    location, manifest = split_index(table.io, driver, table.metadata.location, 4)
    victim = manifest.shards[2].location
    _flip(local_path(victim), os.path.getsize(local_path(victim)) // 2)
    with pytest.raises(UnreadableIndexError, match="checksum mismatch") as err:
        load_sharded(table.io, location, table.metadata)
    assert victim in str(err.value)


def test_a_corrupt_manifest_is_refused(sqlite_catalog: Any) -> None:
    table = sharded_table(sqlite_catalog, "int")
    driver = build_from_table(table.io, table.metadata)
    location, _ = split_index(table.io, driver, table.metadata.location, 4)
    _flip(local_path(location), 30)
    with pytest.raises(UnreadableIndexError, match="checksum mismatch"):
        load_sharded(table.io, location, table.metadata)


def test_swapped_miscounted_or_foreign_shards_are_refused(sqlite_catalog: Any) -> None:
    table = sharded_table(sqlite_catalog, "int")
    driver = build_from_table(table.io, table.metadata)
    root = table.metadata.location
    _, manifest = split_index(table.io, driver, root, 4)
    s = manifest.shards

    def refused(bad: ShardManifest, match: str) -> None:
        location = write_manifest(table.io, bad, root)
        with pytest.raises(UnreadableIndexError, match=match):
            load_sharded(table.io, location, table.metadata)

    swapped = (replace(s[0], location=s[1].location, entries=s[1].entries), *s[1:])
    refused(replace(manifest, shards=swapped), "says shard b'1' of b'4'")
    miscounted = (replace(s[0], entries=s[0].entries + 1), *s[1:])
    refused(replace(manifest, shards=miscounted), "entries, the manifest says")
    refused(replace(manifest, shards=s[:3]), "does not list shards 0..3")
    other = split_index(table.io, build_from_table(table.io, table.metadata), root, 8)[1].shards[:4]
    refused(replace(manifest, shards=other), "of b'8'")
    # A base whose header names another snapshot than the manifest says it does.
    older = table.metadata.snapshots[0].snapshot_id
    refused(replace(manifest, shards=(replace(s[0], base_snapshot=older), *s[1:])), "snapshot")


def test_shards_of_an_older_snapshot_do_not_load_as_current(sqlite_catalog: Any) -> None:
    table = sharded_table(sqlite_catalog, "int")
    driver = build_from_table(table.io, table.metadata)
    location, _ = split_index(table.io, driver, table.metadata.location, 2)
    files = write_partitioned(table, [row(5000, payload="late")])
    table.commit_or_raise(FastAppend(tuple(f for f, _ in files)))
    with pytest.raises(IndexMismatchError, match="shards of snapshot"):
        load_sharded(table.io, location, table.refresh().metadata)
