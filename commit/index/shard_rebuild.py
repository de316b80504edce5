"""Shards rebuilt in this process from the data files (tables without a Spark session,
and tests); the Spark job doing the same on executors is
``calving.ingest.sink.index_rebuild.rebuild_shards``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from calving.commit.errors import FileNotFoundInTableError
from calving.commit.index.keys import DEFAULT_HASHER, KeyCodec, Keys, concat_keys
from calving.commit.index.shards import ShardFile, ShardHeader, shard_of, write_shard
from calving.commit.index.store import key_spec, read_live_keys
from calving.commit.io import FileIO
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table import scan


def build_shards(
    io: FileIO,
    metadata: TableMetadata,
    snapshot_id: int | None,
    shard_count: int,
    only: Sequence[int] = (),
) -> list[ShardFile]:
    """The base files of shards ``only`` (all when empty) of snapshot ``snapshot_id``,
    read from its data files' key columns; in shard order."""
    ids, types = key_spec(metadata)
    snapshot = None if snapshot_id is None else metadata.snapshot_by_id(snapshot_id)
    if snapshot_id is not None and snapshot is None:
        raise FileNotFoundInTableError(f"snapshot {snapshot_id}")
    live = scan.live_files(io, metadata, snapshot)
    wanted = sorted(set(only)) if only else list(range(shard_count))
    codec = KeyCodec(types, ids)
    pieces: dict[int, list[tuple[int, Keys, np.ndarray]]] = {s: [] for s in wanted}
    paths = sorted(live.data)
    files = [(p, live.data[p].data_file.record_count) for p in paths]
    for i, found in enumerate(read_live_keys(io, live, paths, ids, 4)):
        keys = codec.encode(found.keys)
        where = shard_of(DEFAULT_HASHER.hash(keys), shard_count)
        for s in wanted:
            rows = np.flatnonzero(where == s)
            if len(rows):
                pieces[s].append((i, keys.take(rows), found.positions[rows]))
    out = []
    for s in wanted:
        got = pieces[s]
        header = ShardHeader(metadata.table_uuid, snapshot_id, ids, types, s, shard_count)
        keys = concat_keys([k for _, k, _ in got], codec.int_mode)
        file_index = np.concatenate(
            [np.full(len(p), i, np.int64) for i, _, p in got] or [np.empty(0, np.int64)]
        )
        positions = np.concatenate([p for _, _, p in got] or [np.empty(0, np.int64)])
        out.append(write_shard(io, metadata.location, header, keys, file_index, positions, files))
    return out
