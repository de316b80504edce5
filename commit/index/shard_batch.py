"""A keyed batch split by shard, and the shards' steps merged back into one lookup.

``BatchKeys`` encodes the keys a batch looks up (every key it upserts or deletes) and
the keys of its new files, and splits both by ``shard_of``; ``requests`` are the steps
it asks of the shards. ``merge_results`` turns the steps' matches, each over its
shard's share of the keys, back into one ``Matches`` over the batch's keys. The driver
(``sharded``) and a write task (``task_steps``) split and merge alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from calving.commit.index.keys import DEFAULT_HASHER, KeyCodec, Keys, concat_keys
from calving.commit.index.matches import Matches
from calving.commit.index.shard_chain import AddedFile, ShardDiff
from calving.commit.index.shard_lookup import ShardRequest, ShardResult
from calving.commit.index.shards import ShardManifest, shard_of
from calving.commit.index.store import IndexMismatchError
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.sorted_sets import distinct_ids


@dataclass(frozen=True)
class BatchKeys:
    """A batch's keys (encoded) and new files' keys, split by shard."""

    count: int  # keys looked up
    shard_count: int
    encoded: Keys
    key_shard: np.ndarray
    added: dict[int, list[AddedFile]]

    @classmethod
    def of(
        cls,
        manifest: ShardManifest,
        keys: pa.Table | None,
        files: Sequence[tuple[DataFile, pa.Table | None]],
    ) -> BatchKeys:
        codec = KeyCodec(manifest.key_types, manifest.key_field_ids)
        count = manifest.shard_count
        encoded = codec.encode(keys) if keys is not None else concat_keys([], codec.int_mode)
        key_shard = shard_of(DEFAULT_HASHER.hash(encoded), count)
        added: dict[int, list[AddedFile]] = {}
        for data_file, file_keys in files:
            if file_keys is None or not file_keys.num_rows:
                continue
            fk = codec.encode(file_keys)
            where = shard_of(DEFAULT_HASHER.hash(fk), count)
            for s in distinct_ids(where):
                rows = np.flatnonzero(where == s)
                added.setdefault(int(s), []).append(
                    AddedFile(data_file.file_path, data_file.record_count, fk.take(rows), rows)
                )
        return cls(len(encoded), count, encoded, key_shard, added)

    def wanted(self, manifest: ShardManifest, catch_up: ShardDiff | None) -> list[int]:
        if manifest.shard_count != self.shard_count:
            raise IndexMismatchError(
                f"index shards changed from {self.shard_count} to {manifest.shard_count} "
                "during a batch"
            )
        if catch_up is not None:
            return list(range(self.shard_count))
        return sorted(set(distinct_ids(self.key_shard).tolist()) | set(self.added))

    def rows_of(self, manifest: ShardManifest, catch_up: ShardDiff | None) -> dict[int, np.ndarray]:
        return {s: np.flatnonzero(self.key_shard == s) for s in self.wanted(manifest, catch_up)}

    def requests(self, manifest: ShardManifest, catch_up: ShardDiff | None) -> list[ShardRequest]:
        return [
            ShardRequest(s, self.encoded.take(rows), tuple(self.added.get(s, ())))
            for s, rows in self.rows_of(manifest, catch_up).items()
        ]


def merge_results(
    results: Sequence[ShardResult], rows_of: dict[int, np.ndarray], n: int
) -> Matches:
    """The shards' matches as one ``Matches`` over the batch's key rows."""
    ids: dict[str, int] = {}
    key_rows, file_ids, positions = [], [], []
    for r in results:
        local = np.array([ids.setdefault(p, len(ids)) for p in r.files], np.uint32)
        key_rows.append(rows_of[r.chain.shard][r.key_rows])
        file_ids.append(local[r.file_index] if len(local) else np.empty(0, np.uint32))
        positions.append(r.positions)
    if key_rows:
        kr = np.concatenate(key_rows).astype(np.int64)
        fi = np.concatenate(file_ids).astype(np.uint32)
        po = np.concatenate(positions).astype(np.int64)
        order = np.argsort(kr, kind="stable")
        kr, fi, po = kr[order], fi[order], po[order]
    else:
        kr, fi, po = np.empty(0, np.int64), np.empty(0, np.uint32), np.empty(0, np.int64)
    found = np.zeros(n, bool)
    found[kr] = True
    return Matches(found, kr, fi, po, list(ids))
